package admin_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/admin"
)

const viewerToken = "viewer-token-0123456789"

var viewer = []string{"Authorization", "Bearer " + viewerToken}

// Reads need a credential: without one (or with a wrong one) the dead messages and a
// transaction's detail are refused 401 and show nothing; a read token, a token that may act and
// a session cookie of Login read; a read token cannot act; an Admin without any credential
// refuses every read.
func TestIntegrationAPIReadsNeedCredentials(t *testing.T) {
	w := newWorld(t)
	now := time.Now()
	a := w.newAdmin(t, admin.WithTokens(nil, map[string]string{"viewer": viewerToken}), admin.ClockForTest(func() time.Time { return now }))
	c := serve(t, a)
	for _, path := range []string{"/api/outbox/dead", "/api/transactions/" + w.trying, "/api/notifications/" + w.failed.String(), "/api/overview"} {
		for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong-token-0123456789"}, {"Authorization", "Basic dmlld2VyOng="}} {
			r := c.do("GET", path, hdr...)
			c.want(r, 401)
			if r.header.Get("WWW-Authenticate") == "" || strings.Contains(string(r.body), "order-a") || strings.Contains(string(r.body), "sku") {
				t.Fatalf("GET %s %q: %v %s", path, hdr, r.header, r.body)
			}
		}
		c.want(c.do("GET", path, viewer...), 200)
		c.want(c.do("GET", path, bearer...), 200)
	}
	c.want(c.do("GET", "/api/outbox/dead"), 401, "no credentials")
	c.want(c.do("POST", "/api/outbox/dead/"+w.dead[0].String()+"/requeue", viewer...), 401, "viewer may only read")

	// The console's session: a cookie that reads, expires, and does not verify when altered.
	cookie, actor, err := a.Login(viewerToken)
	if err != nil || actor != "viewer" || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("Login = %+v, %q, %v", cookie, actor, err)
	}
	if strings.Contains(cookie.Value, viewerToken) {
		t.Fatalf("the session cookie holds the token: %s", cookie.Value)
	}
	if _, _, err := a.Login("wrong-token-0123456789"); err == nil {
		t.Fatal("Login with a wrong token succeeded")
	}
	withCookie := func(v string) reply {
		req, err := http.NewRequestWithContext(t.Context(), "GET", c.url+"/api/outbox/dead", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.AddCookie(&http.Cookie{Name: admin.SessionCookie, Value: v})
		return c.send(req)
	}
	c.want(withCookie(cookie.Value), 200)
	parts := strings.Split(cookie.Value, ".")
	other := base64.RawURLEncoding.EncodeToString([]byte("oncall")) + "." + parts[1] + "." + parts[2]
	c.want(withCookie(other), 401, "session not accepted")
	later := strings.Join([]string{parts[0], "99999999999", parts[2]}, ".")
	c.want(withCookie(later), 401, "session not accepted")
	now = now.Add(13 * time.Hour)
	c.want(withCookie(cookie.Value), 401, "session not accepted")
	now = time.Now()

	none, err := admin.New(w.s.Pool, admin.WithSchema(w.s.Name))
	if err != nil {
		t.Fatal(err)
	}
	nc := serve(t, none)
	nc.want(nc.do("GET", "/api/outbox/dead", bearer...), 401)
}

// A request whose Host is not this server's is refused 421 with no data, whatever its
// credentials (a page that rebinds its DNS name to 127.0.0.1 reads nothing); loopback names and
// the allowed ones are answered.
func TestIntegrationAPIForeignHost(t *testing.T) {
	w := newWorld(t)
	c := serve(t, w.newAdmin(t, admin.WithAllowedHosts("Admin.Internal")))
	get := func(host, path string) reply {
		req, err := http.NewRequestWithContext(t.Context(), "GET", c.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+oncallToken)
		return c.send(req)
	}
	for _, host := range []string{"rebind.attacker.example", "rebind.attacker.example:8089", "127.0.0.1.attacker.example", "localhost.attacker.example"} {
		for _, path := range []string{"/api/transactions/" + w.trying, "/api/outbox/dead", "/api/nothing"} {
			r := get(host, path)
			c.want(r, http.StatusMisdirectedRequest)
			if strings.Contains(string(r.body), "attacker") || strings.Contains(string(r.body), "order-a") || strings.Contains(string(r.body), "sku") {
				t.Fatalf("421 answer shows %s", r.body)
			}
		}
	}
	for _, host := range []string{"localhost:8089", "127.0.0.1", "[::1]:8089", "console.localhost", "admin.internal:443", "ADMIN.INTERNAL"} {
		c.want(get(host, "/api/transactions/"+w.trying), 200, w.trying)
	}
}

func TestAllowedHost(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none") // never connects
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	a, err := admin.New(pool, admin.WithAllowedHosts("ops.example.com", "10.0.0.5", "[fd00::1]"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"localhost", true}, {"LOCALHOST:8089", true}, {"localhost.", true}, {"a.localhost", true},
		{"127.0.0.1:8089", true}, {"127.1.2.3", true}, {"[::1]:80", true}, {"::1", true},
		{"ops.example.com", true}, {"ops.example.com:8443", true}, {"10.0.0.5:8089", true}, {"[fd00::1]:8089", true},
		{"", false}, {"example.com", false}, {"evil-localhost", false}, {"localhost.evil.example", false},
		{"10.0.0.6", false}, {"0.0.0.0", false}, {"ops.example.com.evil.example", false},
	} {
		if got := a.AllowedHost(tc.host); got != tc.ok {
			t.Errorf("AllowedHost(%q) = %v, want %v", tc.host, got, tc.ok)
		}
	}
	if _, err := admin.New(pool, admin.WithAllowedHosts("ops.example.com:8443")); err == nil {
		t.Error("WithAllowedHosts with a port: no error")
	}
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// Payloads, bodies and header values are redacted (size and SHA-256) on every read; a reveal call
// with a token that may act shows them and writes an audit row; without credentials, or with a
// read token, it is refused.
func TestIntegrationAPIRedactReveal(t *testing.T) {
	w := newWorld(t)
	a := w.newAdmin(t, admin.WithTokens(nil, map[string]string{"viewer": viewerToken}))
	c := serve(t, a)
	const payload = `{"sku":"<b>x</b>"}`
	secrets := []string{"4111111111111111", "shop-api-key", "<b>x</b>", "paid", // the values
		base64.StdEncoding.EncodeToString([]byte(cardBody))[:20], base64.StdEncoding.EncodeToString([]byte(payload))[:16]}
	for _, path := range []string{"/api/outbox/dead", "/api/transactions/" + w.trying, "/api/transactions?unfinished=1",
		"/api/notifications/failed", "/api/notifications/" + w.failed.String()} {
		r := c.do("GET", path, viewer...)
		c.want(r, 200)
		for _, s := range secrets {
			if strings.Contains(string(r.body), s) {
				t.Fatalf("GET %s shows %q: %s", path, s, r.body)
			}
		}
	}
	var dead []admin.DeadMessage
	r := c.do("GET", "/api/outbox/dead", viewer...)
	r.decode(t, &dead)
	if h := dead[0].Headers["Authorization"]; dead[0].Body.Size != len(cardBody) || dead[0].Body.SHA256 != sum(cardBody) || dead[0].Body.Value != nil ||
		h.Size != len(authHeader) || h.SHA256 != sum(authHeader) || h.Value != nil {
		t.Fatalf("dead message body %+v, headers %+v: want size and sha256 only", dead[0].Body, dead[0].Headers)
	}
	var tx admin.Transaction
	r = c.do("GET", "/api/transactions/"+w.trying, viewer...)
	r.decode(t, &tx)
	if p := tx.Branches[0].Payload; p == nil || p.Size != len(payload) || p.SHA256 != sum(payload) || p.Value != nil {
		t.Fatalf("branch payload %+v: want size and sha256 only", p)
	}

	msg := "/api/outbox/" + w.dead[0].String() + "/reveal"
	c.want(c.do("POST", msg), 401, "no credentials")
	c.want(c.do("POST", msg, viewer...), 401)
	c.want(c.do("POST", "/api/outbox/nope/reveal", bearer...), 400, "not a UUID")
	c.want(c.do("GET", msg, bearer...), 405)

	var m admin.DeadMessage
	r = c.do("POST", msg, bearer...)
	c.want(r, 200)
	r.decode(t, &m)
	if string(m.Body.Value) != cardBody || string(m.Headers["Authorization"].Value) != authHeader || m.Body.SHA256 != sum(cardBody) {
		t.Fatalf("revealed message: %+v", m)
	}
	r = c.do("POST", "/api/transactions/"+w.trying+"/reveal", bearer...)
	c.want(r, 200)
	r.decode(t, &tx)
	if p := tx.Branches[0].Payload; p == nil || string(p.Value) != payload {
		t.Fatalf("revealed branch payload %+v", p)
	}
	c.want(c.do("POST", "/api/transactions/no-such-gid/reveal", bearer...), 404)
	var n admin.Notification
	r = c.do("POST", "/api/notifications/"+w.failed.String()+"/reveal", bearer...)
	c.want(r, 200)
	r.decode(t, &n)
	if string(n.Payload.Value) != `{"paid":true}` {
		t.Fatalf("revealed notification payload %+v", n.Payload)
	}
	// The Go API reveals too, on behalf of its actor.
	if tx, err := a.RevealTransaction(t.Context(), "script", w.trying); err != nil || string(tx.Branches[0].Payload.Value) != payload {
		t.Fatalf("RevealTransaction = %+v, %v", tx, err)
	}

	entries, err := a.Audit(t.Context(), 100)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range entries {
		count[e.Actor+" "+e.Action+" "+e.Result+" "+e.Target]++
	}
	// (Refused reveals are left out: where refusals are counted is the audit's business.)
	for key, n := range map[string]int{
		"oncall outbox.reveal ok " + w.dead[0].String(): 1,
		"oncall tx.reveal ok " + w.trying:               1,
		"oncall tx.reveal not_found no-such-gid":        1,
		"oncall notify.reveal ok " + w.failed.String():  1,
		"script tx.reveal ok " + w.trying:               1,
	} {
		if count[key] != n {
			t.Errorf("audit: %d rows %q, want %d (all: %v)", count[key], key, n, count)
		}
	}
	for _, e := range entries {
		for _, s := range secrets[:3] {
			if strings.Contains(e.Message, s) {
				t.Errorf("audit row %+v holds %q", e, s)
			}
		}
	}
}
