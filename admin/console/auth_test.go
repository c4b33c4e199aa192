package console_test

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/admin/console"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
)

const (
	viewerToken = "viewer-token-0123456789"
	oncallToken = "oncall-token-0123456789"
)

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// TestIntegrationConsoleSignIn: without a credential every page answers 401 with the sign-in form
// and none of the data; a foreign Host is answered 421; a wrong token is refused; the right one
// buys a session cookie (HttpOnly, SameSite=Strict, not the token) that reads the pages, shows a
// dead message's body and header redacted, and is dropped by signing out; a cross-origin sign-in
// is refused.
func TestIntegrationConsoleSignIn(t *testing.T) {
	s := testenv.PG(t)
	ctx := t.Context()
	ob, err := outbox.New(s.Pool, outbox.WithTable(s.Name, ""))
	must(t, err, "outbox.New")
	must(t, ob.Migrate(ctx), "outbox Migrate")
	const body, auth = `{"card":"4111111111111111"}`, "Bearer shop-api-key-0123456789"
	id, err := ob.Enqueue(ctx, s.Pool, outbox.Message{Topic: "orders", Key: "order-77", Body: []byte(body),
		Headers: map[string]string{"Authorization": auth}})
	must(t, err, "Enqueue")
	_, err = s.Pool.Exec(ctx, `update `+pgx.Identifier{s.Name, outbox.DefaultTable}.Sanitize()+
		` set status = 'dead', attempts = 3, last_error = 'broker down' where msg_id = $1`, id)
	must(t, err, "make the message dead")

	a, err := admin.New(s.Pool, admin.WithSchema(s.Name), admin.WithTokens(map[string]string{"oncall": oncallToken}, nil),
		admin.WithTokens(nil, map[string]string{"viewer": viewerToken}))
	must(t, err, "admin.New")
	must(t, a.Migrate(ctx), "admin Migrate")
	pages, err := console.Handler(a)
	must(t, err, "console.Handler")
	mux := http.NewServeMux()
	mux.Handle("/api/", a.Handler())
	mux.Handle("/", pages)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	jar, err := cookiejar.New(nil)
	must(t, err, "cookie jar")
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path string, form url.Values, hdr ...string) (*http.Response, string) {
		t.Helper()
		var rd io.Reader
		if form != nil {
			rd = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, rd)
		must(t, err, "request")
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			if hdr[i] == "Host" {
				req.Host = hdr[i+1]
				continue
			}
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := browser.Do(req)
		must(t, err, "%s %s", method, path)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		must(t, err, "read")
		return resp, string(b)
	}

	for _, path := range []string{"/", "/outbox", "/transactions", "/audit", "/notifications"} {
		resp, page := do("GET", path, nil)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, `id="login"`) || strings.Contains(page, id.String()) ||
			strings.Contains(page, "order-77") || !strings.Contains(page, `name="next" value="`+path+`"`) {
			t.Fatalf("GET %s without a session: %d\n%s", path, resp.StatusCode, page)
		}
	}
	if resp, _ := do("GET", "/static/console.js", nil); resp.StatusCode != 200 {
		t.Fatalf("the script without a session: %d", resp.StatusCode)
	}
	for _, host := range []string{"rebind.attacker.example", "rebind.attacker.example:80"} {
		resp, page := do("GET", "/outbox", nil, "Host", host, "Authorization", "Bearer "+viewerToken)
		if resp.StatusCode != http.StatusMisdirectedRequest || strings.Contains(page, "order-77") || strings.Contains(page, "attacker") {
			t.Fatalf("GET /outbox with Host %s: %d %s", host, resp.StatusCode, page)
		}
	}

	resp, page := do("POST", "/login", url.Values{"token": {"wrong-token-0123456789"}, "next": {"/outbox"}})
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "not accepted") || len(jar.Cookies(resp.Request.URL)) != 0 {
		t.Fatalf("sign-in with a wrong token: %d %s", resp.StatusCode, page)
	}
	resp, page = do("POST", "/login", url.Values{"token": {viewerToken}, "next": {"/outbox"}}, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site")
	if resp.StatusCode != http.StatusForbidden || len(jar.Cookies(resp.Request.URL)) != 0 {
		t.Fatalf("cross-origin sign-in: %d %s", resp.StatusCode, page)
	}
	resp, _ = do("POST", "/login", url.Values{"token": {viewerToken}, "next": {"//evil.example/x"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("sign-in with an off-site next: %d, to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, _ = do("POST", "/login", url.Values{"token": {viewerToken}, "next": {"/outbox"}})
	setCookie := resp.Header.Get("Set-Cookie")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/outbox" || !strings.Contains(setCookie, "HttpOnly") ||
		!strings.Contains(setCookie, "SameSite=Strict") || strings.Contains(setCookie, viewerToken) {
		t.Fatalf("sign-in: %d to %q, Set-Cookie %q", resp.StatusCode, resp.Header.Get("Location"), setCookie)
	}
	resp, page = do("GET", "/outbox", nil)
	if resp.StatusCode != 200 || !strings.Contains(page, `id="dead-`+id.String()+`"`) || !strings.Contains(page, `id="sign-out"`) {
		t.Fatalf("GET /outbox signed in: %d\n%s", resp.StatusCode, page)
	}
	for _, secret := range []string{"4111111111111111", "shop-api-key"} {
		if strings.Contains(page, secret) {
			t.Fatalf("the outbox page shows %q:\n%s", secret, page)
		}
	}
	for _, want := range []string{`title="sha256 ` + sha(body) + `"`, `title="sha256 ` + sha(auth) + `"`, "Authorization: ",
		`data-url="/api/outbox/` + id.String() + `/reveal"`} {
		if !strings.Contains(page, want) {
			t.Fatalf("the outbox page lacks %q:\n%s", want, page)
		}
	}
	// The session cookie reads the pages, not the API's actions: a reveal needs the token itself.
	if resp, _ := do("POST", "/api/outbox/"+id.String()+"/reveal", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("reveal with the session cookie alone: %d", resp.StatusCode)
	}
	if resp, page := do("POST", "/api/outbox/"+id.String()+"/reveal", nil, "Authorization", "Bearer "+oncallToken); resp.StatusCode != 200 ||
		!strings.Contains(page, `"value":`) {
		t.Fatalf("reveal with the token: %d %s", resp.StatusCode, page)
	}

	resp, _ = do("POST", "/logout", nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out: %d", resp.StatusCode)
	}
	if resp, _ := do("GET", "/outbox", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /outbox after signing out: %d", resp.StatusCode)
	}
}
