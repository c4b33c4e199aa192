package console_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/admin/console"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/notify"
	"github.com/txkit/txkit/outbox"
)

func TestHandlerOptions(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), "postgres://127.0.0.1:1/none") // never connects: Handler runs no query
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	a, err := admin.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		a    *admin.Admin
		opts []console.Option
		bad  bool
	}{
		{"defaults", a, nil, false},
		{"refresh off", a, []console.Option{console.WithRefresh(0)}, false},
		{"refresh 30s", a, []console.Option{console.WithRefresh(30 * time.Second)}, false},
		{"nil admin", nil, nil, true},
		{"refresh below a second", a, []console.Option{console.WithRefresh(500 * time.Millisecond)}, true},
		{"negative refresh", a, []console.Option{console.WithRefresh(-time.Second)}, true},
		{"nil logger", a, []console.Option{console.WithLogger(nil)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := console.Handler(tc.a, tc.opts...)
			if tc.bad {
				if !errors.Is(err, console.ErrInvalidOption) || h != nil {
					t.Fatalf("Handler = %v, %v; want an error wrapping ErrInvalidOption", h, err)
				}
				return
			}
			if err != nil || h == nil {
				t.Fatalf("Handler = %v, %v", h, err)
			}
		})
	}
}

// hostile is what the rows hold: markup that would run if a page inserted it unescaped.
const (
	hostileScript = `<script>alert("txkit")</script>`
	hostileImg    = `<img src=x onerror=alert(1)>`
)

// TestIntegrationConsoleEscapes: a transaction whose gid, payload and last errors, and a dead
// outbox message whose body and last error hold markup are shown as text on every page that
// shows them (payloads and bodies redacted to their size and hash), never as markup; the pages carry a Content-Security-Policy without inline script.
// Also: unknown gid 404, bad filters 400 with what is wrong, unknown page 404, the assets.
func TestIntegrationConsoleEscapes(t *testing.T) {
	s := testenv.PG(t)
	ctx := t.Context()
	log, err := core.New(s.Pool, core.WithSchema(s.Name))
	if err != nil {
		t.Fatal(err)
	}
	must(t, log.Migrate(ctx), "core Migrate")
	gid := "gid-" + hostileImg
	must(t, log.Create(ctx, gid, core.KindTCC, time.Minute, []byte(hostileScript),
		core.Branch{Name: "stock" + hostileImg, Target: core.Target{Kind: core.TargetHTTP, Ref: "http://stock/tcc?x=" + hostileScript}}), "Create")
	for _, q := range []string{`update ` + pgx.Identifier{s.Name, "txkit_global"}.Sanitize() + ` set last_error = $1`,
		`update ` + pgx.Identifier{s.Name, "txkit_branch"}.Sanitize() + ` set last_error = $1, attempts = 2`} {
		_, err := s.Pool.Exec(ctx, q, "refused: "+hostileScript)
		must(t, err, "%s", q)
	}
	ob, err := outbox.New(s.Pool, outbox.WithTable(s.Name, ""))
	must(t, err, "outbox.New")
	must(t, ob.Migrate(ctx), "outbox Migrate")
	id, err := ob.Enqueue(ctx, s.Pool, outbox.Message{Topic: "orders", Key: "k", Body: []byte(hostileScript)})
	must(t, err, "Enqueue")
	_, err = s.Pool.Exec(ctx, `update `+pgx.Identifier{s.Name, outbox.DefaultTable}.Sanitize()+
		` set status = 'dead', attempts = 3, last_error = $2 where msg_id = $1`, id, "broker said "+hostileImg)
	must(t, err, "make the message dead")

	nt, err := notify.New(s.Pool, []notify.Receiver{{Name: "shop", URL: "https://shop.example/notify", Secrets: []string{"0123456789abcdef0123"}}},
		notify.WithTable(s.Name, ""))
	must(t, err, "notify.New")
	must(t, nt.Migrate(ctx), "notify Migrate")
	nid, err := nt.Enqueue(ctx, s.Pool, notify.Notification{Receiver: "shop", Key: "k-" + hostileImg,
		Payload: json.RawMessage(`{"note":"` + strings.ReplaceAll(hostileScript, `"`, `\"`) + `"}`)})
	must(t, err, "notify Enqueue")
	_, err = s.Pool.Exec(ctx, `update `+pgx.Identifier{s.Name, "txkit_notify"}.Sanitize()+
		` set status = 'failed', next_attempt_at = 'infinity', attempts = 1, tries = 1, last_status = 502, last_error = $2 where id = $1`, nid, "answered "+hostileScript)
	must(t, err, "make the notification fail")
	_, err = s.Pool.Exec(ctx, `insert into `+pgx.Identifier{s.Name, "txkit_notify_attempt"}.Sanitize()+
		` (id, n, status_code, latency_ms, error) values ($1, 1, 502, 12.5, $2)`, nid, "answered "+hostileScript)
	must(t, err, "record the attempt")

	a, err := admin.New(s.Pool, admin.WithSchema(s.Name), admin.WithTokens(nil, map[string]string{"viewer": viewerToken}))
	must(t, err, "admin.New")
	h, err := console.Handler(a)
	must(t, err, "console.Handler")
	srv := httptest.NewServer(h)
	defer srv.Close()

	get := func(path string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
		must(t, err, "request")
		req.Header.Set("Authorization", "Bearer "+viewerToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header, string(b)
	}
	for _, tc := range []struct {
		path string
		want []string // escaped texts the page must show
	}{
		{"/", []string{"1 unfinished in all", "1 dead", `href="/transactions/gid-%3cimg%20src=x%20onerror=alert%281%29%3e"`}},
		{"/transactions", []string{`gid-&lt;img src=x onerror=alert(1)&gt;`, `refused: &lt;script&gt;alert(&#34;txkit&#34;)&lt;/script&gt;`}},
		{"/transactions/" + url.PathEscape(gid), []string{
			`stock&lt;img src=x onerror=alert(1)&gt;`,
			`<pre class="err">refused: &lt;script&gt;alert(&#34;txkit&#34;)&lt;/script&gt;</pre>`,
			`http://stock/tcc?x=&lt;script&gt;`,
			`id="tx-payload" data-secret="payload" title="sha256 ` + sha(hostileScript) + `">` + strconv.Itoa(len(hostileScript)) + ` bytes · sha256 ` + sha(hostileScript)[:12] + `…</pre>`}},
		{"/outbox", []string{`broker said &lt;img src=x onerror=alert(1)&gt;`, `id="dead-` + id.String() + `"`,
			`data-secret="body" title="sha256 ` + sha(hostileScript) + `"`,
			`id="read-only"`, `<button type="button" class="act" disabled`}}, // no tokens: the buttons are off
		{"/notifications", []string{`id="notification-` + nid.String() + `"`, `k-&lt;img src=x onerror=alert(1)&gt;`, `answered &lt;script&gt;`}},
		{"/notifications/" + nid.String(), []string{`answered &lt;script&gt;alert(&#34;txkit&#34;)&lt;/script&gt;`, `id="notification-payload"`,
			`data-url="/api/notifications/` + nid.String() + `/redeliver"`, `<tr data-n="1">`}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			code, hdr, body := get(tc.path)
			if code != http.StatusOK {
				t.Fatalf("GET %s: %d\n%s", tc.path, code, body)
			}
			if !strings.Contains(hdr.Get("Content-Security-Policy"), "script-src 'self'") || hdr.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("headers %v lack the CSP or nosniff", hdr)
			}
			for _, raw := range []string{hostileScript, hostileImg, "<script>alert"} {
				if strings.Contains(body, raw) {
					t.Errorf("GET %s shows %q unescaped", tc.path, raw)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("GET %s lacks %q\n%s", tc.path, w, body)
				}
			}
		})
	}
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/transactions/no-such-gid", 404, "not found"},
		{"/transactions?kind=xa", 400, "kind &#34;xa&#34;: want tcc, saga, 2pc, 3pc or workflow"},
		{"/transactions?older_than=soon", 400, "older than &#34;soon&#34;: want a duration"},
		{"/transactions?limit=100000", 400, "limit 100000: must be 1..500"},
		{"/outbox?after=" + url.QueryEscape(hostileScript), 400, "want a message id"},
		{"/notifications/" + url.PathEscape(hostileImg), 404, "not found"},
		{"/no/such/page", 404, "no such page"},
		{"/static/", 404, "no such page"},
	} {
		code, _, body := get(tc.path)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s: %d, want %d with %q\n%s", tc.path, code, tc.code, tc.want, body)
		}
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
			t.Errorf("GET %s: error page shows markup unescaped", tc.path)
		}
	}
	for path, ctype := range map[string]string{"/static/console.css": "text/css", "/static/console.js": "text/javascript"} {
		code, hdr, body := get(path)
		if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), ctype) || len(body) < 100 {
			t.Errorf("GET %s: %d %s, %d bytes", path, code, hdr.Get("Content-Type"), len(body))
		}
	}
	req, err := http.NewRequestWithContext(ctx, "POST", srv.URL+"/outbox", nil)
	must(t, err, "request")
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	resp, err := http.DefaultClient.Do(req)
	must(t, err, "POST /outbox")
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /outbox: %d, want 405 (pages only read)", resp.StatusCode)
	}
}
