package admin_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/internal/signing"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/participant"
)

// lineCounter counts the lines logged through it.
type lineCounter struct {
	mu sync.Mutex
	n  int
}

func (l *lineCounter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n += strings.Count(string(p), "\n")
	return len(p), nil
}

func (l *lineCounter) lines() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// auditRows counts the rows of the audit table in s.
func auditRows(t *testing.T, s *testenv.Schema) int {
	t.Helper()
	var n int
	if err := s.Pool.QueryRow(t.Context(), `select count(*) from `+pgx.Identifier{s.Name, admin.DefaultAuditTable}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// 10,000 POSTs without valid credentials (none, a wrong token, a wrong signature) add no audit
// row: each is counted in txkit_admin_refused_total, answered 401, or 429 once the address is
// over its rate, and the log gets a line every 10 s at most, not one per request.
func TestIntegrationAPIUnauthenticatedFlood(t *testing.T) {
	s := testenv.PG(t)
	reg := prometheus.NewRegistry()
	logged := &lineCounter{}
	a, err := admin.New(s.Pool, admin.WithSchema(s.Name), admin.WithTokens(map[string]string{"oncall": oncallToken}, nil),
		admin.WithMetrics(reg, nil), admin.WithLogger(slog.New(slog.NewTextHandler(logged, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := serve(t, a)
	newDeadMessage(t, s) // the outbox table
	path := "/api/outbox/dead/" + uuid.NewString() + "/requeue"
	const n = 10_000
	status := map[int]int{}
	for i := range n {
		req, err := http.NewRequestWithContext(t.Context(), "POST", c.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		switch i % 3 {
		case 1:
			req.Header.Set("Authorization", "Bearer wrong-token-0123456789")
		case 2:
			signing.SignRequest(req, "not-the-secret-0123456789", time.Now(), nil)
		}
		r := c.send(req)
		status[r.status]++
		if r.status == http.StatusTooManyRequests && r.header.Get("Retry-After") == "" {
			t.Fatalf("429 without Retry-After: %v", r.header)
		}
	}
	if rows := auditRows(t, s); rows != 0 {
		t.Fatalf("%d audit rows after %d unauthenticated POSTs, want none", rows, n)
	}
	if status[401]+status[429] != n || status[401] < admin.DefaultBurst || status[429] == 0 {
		t.Fatalf("answers %v: want %d of 401 and 429 together, at least the burst (%d) of 401 and some 429",
			status, n, admin.DefaultBurst)
	}
	if u, l := refusedTotal(t, reg, "unauthorized"), refusedTotal(t, reg, "rate_limited"); u != status[401] || l != status[429] {
		t.Fatalf("txkit_admin_refused_total unauthorized %d, rate_limited %d; answered %v", u, l, status)
	}
	if l := logged.lines(); l < 1 || l > 10 {
		t.Fatalf("%d log lines for %d refusals: want a sampled few", l, n)
	}
	// An authenticated POST is still recorded (from another address: this one is over its rate).
	c.client = fromAddr(t, "127.0.0.2")
	c.want(c.do("POST", path, bearer...), 404)
	if rows := auditRows(t, s); rows != 1 {
		t.Fatalf("%d audit rows after one authenticated POST, want 1", rows)
	}

	// A read-only Admin (txkit serve without -token-file makes no audit table): its refusals are
	// not an error line each.
	roLog := &lineCounter{}
	ro, err := admin.New(s.Pool, admin.WithSchema(s.Name), admin.WithTables(admin.Tables{Audit: "never_migrated"}),
		admin.WithLogger(slog.New(slog.NewTextHandler(roLog, nil))))
	if err != nil {
		t.Fatal(err)
	}
	rc := serve(t, ro)
	for range admin.DefaultBurst {
		rc.want(rc.do("POST", path), 401, "read-only")
	}
	if l := roLog.lines(); l != 1 {
		t.Fatalf("%d log lines for %d refusals of a read-only Admin, want 1", l, admin.DefaultBurst)
	}
}

// refusedTotal is the value of txkit_admin_refused_total{reason} in reg (0 when absent).
func refusedTotal(t *testing.T, reg *prometheus.Registry, reason string) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if f.GetName() == "txkit_admin_refused_total" && len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == reason {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}

// fromAddr returns an HTTP client whose connections come from the loopback address ip.
func fromAddr(t *testing.T, ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// The rate limit is per address and comes before authentication: past the burst even a valid
// token is answered 429 (no row); another address has its own bucket; tokens come back with time.
func TestIntegrationAPIRateLimit(t *testing.T) {
	s := testenv.PG(t)
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	a, err := admin.New(s.Pool, admin.WithSchema(s.Name), admin.WithTokens(map[string]string{"oncall": oncallToken}, nil),
		admin.WithMetrics(reg, nil), admin.WithRateLimit(0.5, 3), admin.ClockForTest(clock), admin.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := serve(t, a)
	newDeadMessage(t, s) // the outbox table
	path := "/api/outbox/dead/" + uuid.NewString() + "/requeue"
	for range 3 {
		c.want(c.do("POST", path, bearer...), 404)
	}
	r := c.do("POST", path, bearer...)
	c.want(r, 429, "too many requests")
	if r.header.Get("Retry-After") != "2" {
		t.Fatalf("Retry-After %q, want 2 (a token every 2 s)", r.header.Get("Retry-After"))
	}
	c.want(c.do("POST", path), 429)
	other := c
	other.client = fromAddr(t, "127.0.0.2")
	other.want(other.do("POST", path), 401)
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	c.want(c.do("POST", path, bearer...), 404)
	c.want(c.do("POST", path, bearer...), 429)
	if rows := auditRows(t, s); rows != 4 {
		t.Fatalf("%d audit rows, want the 4 authenticated POSTs under the limit", rows)
	}
	if got := refusedTotal(t, reg, "rate_limited"); got != 3 {
		t.Fatalf("rate_limited %d, want 3", got)
	}
}

// newDeadMessage returns an outbox in s with one message, made dead.
func newDeadMessage(t *testing.T, s *testenv.Schema) uuid.UUID {
	t.Helper()
	ob, err := outbox.New(s.Pool, outbox.WithTable(s.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	id, err := ob.Enqueue(t.Context(), s.Pool, outbox.Message{Topic: "orders", Body: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	kill(t, s, id)
	return id
}

// kill makes the outbox message id dead (again), as a relay that gave up would.
func kill(t *testing.T, s *testenv.Schema, id uuid.UUID) {
	t.Helper()
	if _, err := s.Pool.Exec(t.Context(), `update `+pgx.Identifier{s.Name, outbox.DefaultTable}.Sanitize()+
		` set status = 'dead', attempts = 16 where msg_id = $1`, id); err != nil {
		t.Fatal(err)
	}
}

// A signed request cannot be replayed as its actor: its Idempotency-Key is signed, so the same
// signature with another key (or none) is refused; the same request again gets the first answer
// and has no second effect; and neither the audit API nor the table holds a signature.
func TestIntegrationAPISignedReplay(t *testing.T) {
	s := testenv.PG(t)
	const secret = "robot-secret-0123456789"
	a, err := admin.New(s.Pool, admin.WithSchema(s.Name), admin.WithHMACSecrets("robot", secret), admin.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := serve(t, a)
	id := newDeadMessage(t, s)
	path := c.url + "/api/outbox/dead/" + id.String() + "/requeue"
	var sigs []string
	sent := func(key string) *http.Request {
		req, err := http.NewRequestWithContext(t.Context(), "POST", path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		signing.SignRequest(req, secret, time.Now(), nil)
		sigs = append(sigs, req.Header.Get(signing.HeaderSignature))
		return req
	}
	replay := func(orig *http.Request, key string) reply {
		req := orig.Clone(t.Context())
		req.Header.Del("Idempotency-Key")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		return c.send(req)
	}
	first := sent("key-1")
	c.want(c.send(first), 200, `"result":"ok"`)
	// The relay gives up on the message again; a stranger who saw the request replays it under a
	// new Idempotency-Key (or none), hoping for a second requeue in robot's name.
	kill(t, s, id)
	c.want(replay(first, "key-2"), 401, "signature does not verify")
	c.want(replay(first, ""), 401, "signature does not verify")
	// The same request again: the first answer, no second effect.
	if r := replay(first, "key-1"); r.status != 200 || r.header.Get("Idempotent-Replay") != "true" {
		t.Fatalf("the same signed request again: %d %v %s", r.status, r.header, r.body)
	}
	var dead int
	if err := s.Pool.QueryRow(t.Context(), `select count(*) from `+pgx.Identifier{s.Name, outbox.DefaultTable}.Sanitize()+
		` where status = 'dead'`).Scan(&dead); err != nil || dead != 1 {
		t.Fatalf("dead messages %d (%v): a replay requeued it", dead, err)
	}
	// Without a key: the signature is the nonce; the same request again gets the first answer.
	unkeyed := sent("")
	c.want(c.send(unkeyed), 200, `"result":"ok"`)
	kill(t, s, id)
	if r := replay(unkeyed, ""); r.status != 200 || r.header.Get("Idempotent-Replay") != "true" {
		t.Fatalf("an unkeyed signed request again: %d %v %s", r.status, r.header, r.body)
	}
	// Signed by a client that signs what it sends, key included (participant's signing client).
	hc, err := participant.NewSigningClient(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), "POST", path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "key-3")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST by a signing client with a key: %d", resp.StatusCode)
	}

	entries, err := a.Audit(t.Context(), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Fatalf("%d audit rows, want 3 (one per signed request, none per replay): %+v", len(entries), entries)
	}
	body := c.do("GET", "/api/audit").body
	for _, sig := range sigs {
		hexSig := strings.TrimPrefix(sig, "v1=")
		if strings.Contains(string(body), hexSig) {
			t.Fatalf("GET /api/audit shows a signature: %s", body)
		}
		var n int
		if err := s.Pool.QueryRow(t.Context(), `select count(*) from `+pgx.Identifier{s.Name, admin.DefaultAuditTable}.Sanitize()+
			` t where t::text like '%' || $1 || '%'`, hexSig).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d audit rows hold a signature (%v)", n, err)
		}
	}
}

// An audit table written before nonces keyed a signed request by its signature: Migrate turns
// such keys into nonces (their hash) and scrubs signatures from messages, so none is served.
func TestIntegrationAuditMigrationDropsSignatures(t *testing.T) {
	s := testenv.PG(t)
	ctx := t.Context()
	table := pgx.Identifier{s.Name, admin.DefaultAuditTable}.Sanitize()
	const sig = "v1=6f1ed002ab5595859014ebf0951522d9c7a7f0e8d2e9d0e6b9a1b5c0c8d7e6f5"
	if _, err := s.Pool.Exec(ctx, `create table `+table+` (
    id bigserial primary key, at timestamptz not null default now(), actor text not null, action text not null,
    target text not null, result text not null, status integer not null, message text not null default '',
    remote text not null default '', idem_key text, response bytea);
insert into `+table+` (actor, action, target, result, status, idem_key) values ('robot', 'outbox.requeue', 'm1', 'ok', 200, 'signature:`+sig+`');
insert into `+table+` (actor, action, target, result, status, message) values ('robot', 'outbox.requeue', 'm2', 'conflict', 409,
    'Idempotency-Key "signature:`+sig+`" was used for outbox.requeue m1, not outbox.requeue m2')`); err != nil {
		t.Fatal(err)
	}
	a, err := admin.New(s.Pool, admin.WithSchema(s.Name))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	entries, err := a.Audit(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.IdempotencyKey+e.Message, sig[3:]) {
			t.Fatalf("an audit entry still shows the signature: %+v", e)
		}
	}
	sum := sha256.Sum256([]byte(sig))
	var n int
	if err := s.Pool.QueryRow(ctx, `select count(*) from `+table+` where nonce = $1 and idem_key is null`, hex.EncodeToString(sum[:])).Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows with the signature's hash as nonce: %d (%v), want 1", n, err)
	}
}

// PurgeAudit deletes the rows older than it is told; Run does so on its schedule; a purge that
// would forget nonces still in the HMAC window is refused.
func TestIntegrationAuditRetention(t *testing.T) {
	s := testenv.PG(t)
	ctx := t.Context()
	a, err := admin.New(s.Pool, admin.WithSchema(s.Name), admin.WithAuditRetention(time.Hour, "@every 50ms"), admin.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for range 4 { // no notifications table: each fails, and is recorded all the same
		_ = a.Redeliver(ctx, "script", uuid.New())
	}
	if rows := auditRows(t, s); rows != 4 {
		t.Fatalf("%d audit rows, want 4", rows)
	}
	table := pgx.Identifier{s.Name, admin.DefaultAuditTable}.Sanitize()
	age := func(ids string, d string) {
		t.Helper()
		if _, err := s.Pool.Exec(ctx, `update `+table+` set at = now() - interval '`+d+`' where id in (`+ids+`)`); err != nil {
			t.Fatal(err)
		}
	}
	age("select id from "+table+" order by id limit 2", "800 hours")
	if _, err := a.PurgeAudit(ctx, time.Minute); !errors.Is(err, admin.ErrBadRequest) {
		t.Fatalf("PurgeAudit(1m) = %v, want ErrBadRequest (inside the HMAC window)", err)
	}
	if n, err := a.PurgeAudit(ctx, 720*time.Hour); err != nil || n != 2 {
		t.Fatalf("PurgeAudit(720h) = %d, %v; want the 2 rows aged 800h", n, err)
	}
	if rows := auditRows(t, s); rows != 2 {
		t.Fatalf("%d audit rows after the purge, want 2", rows)
	}
	age("select id from "+table+" order by id limit 1", "2 hours")
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool { return auditRows(t, s) == 1 },
		"Run does not purge the row older than the retention (1h)")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}
