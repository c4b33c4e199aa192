package barrier_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/signing"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
)

// send posts body to url with c (nil: an unsigning default client) after letting prepare set
// headers, and returns the status and the trimmed answer.
func send(t *testing.T, c *http.Client, url, body string, prepare func(r *http.Request)) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(r)
	}
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(r)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// signAs signs a request with secret at now+skew, over signedBody (which may differ from what is
// sent, to tamper with it).
func signAs(secret string, skew time.Duration, signedBody string) func(*http.Request) {
	return func(r *http.Request) { signing.SignRequest(r, secret, time.Now().Add(skew), []byte(signedBody)) }
}

// Item 1: a participant's handler runs nothing for a request that is not signed with one of its
// secrets, is stale, was altered or replayed, and writes nothing either.
func TestIntegrationHandlerRefusesUnauthenticated(t *testing.T) {
	f := newFixture(t, withSecrets(testSecret)...)
	srv := httptest.NewServer(handler(f.Bar, f.Record))
	t.Cleanup(srv.Close)
	const body = `{"gid":"g1","branch":"stock","op":"try"}`
	for _, tc := range []struct {
		name    string
		path    string
		prepare func(*http.Request)
	}{
		{name: "unsigned"},
		{name: "signed with another secret", prepare: signAs(wrongSecret, 0, body)},
		{name: "stale timestamp", prepare: signAs(testSecret, -10*time.Minute, body)},
		{name: "timestamp in the future", prepare: signAs(testSecret, 10*time.Minute, body)},
		{name: "body altered after signing", prepare: signAs(testSecret, 0, `{"gid":"g0","branch":"stock","op":"try"}`)},
		{name: "signed for another route", path: "/other", prepare: func(r *http.Request) {
			o := r.Clone(r.Context())
			o.URL.Path = "/stock"
			signing.SignRequest(o, testSecret, time.Now(), []byte(body))
			r.Header = o.Header
		}},
		{name: "garbage signature", prepare: func(r *http.Request) {
			r.Header.Set(signing.HeaderTimestamp, fmt.Sprint(time.Now().Unix()))
			r.Header.Set(signing.HeaderSignature, "v1=00")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, answer := send(t, nil, srv.URL+tc.path, body, tc.prepare)
			if code != http.StatusUnauthorized {
				t.Errorf("→ %d %q; want 401", code, answer)
			}
			if strings.Contains(answer, testSecret) {
				t.Errorf("the answer %q names the secret", answer)
			}
			f.Expect("g1", "stock", participant.OpTry, 0, 0)
			if n := f.Markers("txkit_barrier"); n != 0 {
				t.Errorf("%d barrier rows written for a refused request; want 0", n)
			}
		})
	}

	t.Run("replay", func(t *testing.T) {
		var captured http.Header
		code, answer := send(t, nil, srv.URL+"/stock", body, func(r *http.Request) {
			signing.SignRequest(r, testSecret, time.Now(), []byte(body))
			captured = r.Header.Clone()
		})
		if code != http.StatusOK {
			t.Fatalf("signed request → %d %q; want 200", code, answer)
		}
		code, answer = send(t, nil, srv.URL+"/stock", body, func(r *http.Request) { r.Header = captured.Clone() })
		if code != http.StatusUnauthorized {
			t.Errorf("the same signed request again → %d %q; want 401 (a replay)", code, answer)
		}
		f.Expect("g1", "stock", participant.OpTry, 1, 1)
	})
}

// A barrier given no secret does not serve unsigned requests: signing is on unless turned off
// explicitly (WithUnsignedRequests), which then serves them.
func TestIntegrationHandlerSecureByDefault(t *testing.T) {
	const body = `{"gid":"g1","branch":"stock","op":"try"}`
	f := newFixture(t)
	srv := httptest.NewServer(handler(f.Bar, f.Record))
	t.Cleanup(srv.Close)
	for _, prepare := range []func(*http.Request){nil, signAs(testSecret, 0, body)} {
		if code, answer := send(t, nil, srv.URL, body, prepare); code != http.StatusUnauthorized {
			t.Errorf("a barrier without secrets answered %d %q; want 401", code, answer)
		}
	}
	f.Expect("g1", "stock", participant.OpTry, 0, 0)

	open := newFixture(t, withUnsigned()...)
	osrv := httptest.NewServer(handler(open.Bar, open.Record))
	t.Cleanup(osrv.Close)
	if code, answer := send(t, nil, osrv.URL, body, nil); code != http.StatusOK {
		t.Errorf("WithUnsignedRequests: an unsigned request → %d %q; want 200", code, answer)
	}
	open.Expect("g1", "stock", participant.OpTry, 1, 1)
}

// During a key rotation the participant accepts both keys.
func TestIntegrationHandlerKeyRotation(t *testing.T) {
	f := newFixture(t, withSecrets(testSecret, oldSecret)...)
	srv := httptest.NewServer(handler(f.Bar, f.Record))
	t.Cleanup(srv.Close)
	for i, secret := range []string{oldSecret, testSecret} {
		p := participant.HTTP{URL: srv.URL, Client: signingClient(t, secret, srv.Client())}
		if err := p.Do(t.Context(), req(fmt.Sprint("g", i), "stock", participant.OpTry)); err != nil {
			t.Errorf("signed with secret %d: %v", i+1, err)
		}
	}
	p := participant.HTTP{URL: srv.URL, Client: signingClient(t, wrongSecret, srv.Client())}
	if err := p.Do(t.Context(), req("g9", "stock", participant.OpTry)); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("signed with an unknown secret: %v; want HTTP 401", err)
	}
	f.Expect("g9", "stock", participant.OpTry, 0, 0)
}

// Each route takes only its op: a confirm posted to the route of tries is refused, not run.
func TestIntegrationHandlerAllowedOps(t *testing.T) {
	f := newFixture(t, withSecrets(testSecret)...)
	mux := http.NewServeMux()
	mux.Handle("POST /try", handler(f.Bar, f.Record, participant.OpTry))
	mux.Handle("POST /confirm", handler(f.Bar, f.Record, participant.OpConfirm))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	client := signingClient(t, testSecret, srv.Client())
	call := func(route string, op participant.Op) error {
		return participant.HTTP{URL: srv.URL + route, Client: client}.Do(t.Context(), req("g1", "stock", op))
	}
	if err := call("/confirm", participant.OpTry); err == nil || !strings.Contains(err.Error(), "HTTP 400") {
		t.Errorf("a try posted to /confirm: %v; want HTTP 400", err)
	}
	if err := call("/try", participant.OpTry); err != nil {
		t.Fatalf("try: %v", err)
	}
	if err := call("/try", participant.OpConfirm); err == nil || !strings.Contains(err.Error(), "HTTP 400") {
		t.Errorf("a confirm posted to /try: %v; want HTTP 400", err)
	}
	f.Expect("g1", "stock", participant.OpConfirm, 0, 0)
	if err := call("/confirm", participant.OpConfirm); err != nil {
		t.Fatalf("confirm: %v", err)
	}
	f.Expect("g1", "stock", participant.OpTry, 1, 1)
	f.Expect("g1", "stock", participant.OpConfirm, 1, 1)
}

// waitFor polls cond until it holds or timeout passes, and reports whether it held.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// Item 2: a panic in the business function rolls the transaction back and gives the connection
// back: no session stays idle in transaction, the pool is whole, the caller gets a 500 without
// the panic's text, the log has the stack, and a later cancel of the same branch goes through.
func TestIntegrationHandlerPanicLeaksNothing(t *testing.T) {
	s := testenv.PG(t)
	ctx := t.Context()
	app := "txkit-" + testenv.Name(t)
	pool := testenv.AppPool(t, s, app, 4)
	var logs coretest.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	bar, err := barrier.New(pool, append(withSecrets(testSecret), barrier.WithLogger(log))...)
	if err != nil {
		t.Fatal(err)
	}
	if err := bar.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `create table held (gid text, branch text)`); err != nil {
		t.Fatal(err)
	}
	var cancels atomic.Int32
	srv := httptest.NewServer(handler(bar, func(ctx context.Context, tx pgx.Tx, r participant.Request) error {
		if r.Op == participant.OpCancel {
			cancels.Add(1)
			return nil
		}
		if _, err := tx.Exec(ctx, `insert into held values ($1, $2)`, r.GID, r.Branch); err != nil {
			return err
		}
		var items []string
		_ = items[len(r.Payload)] // parsing the caller's payload goes wrong: index out of range
		return nil
	}))
	t.Cleanup(srv.Close)
	client := signingClient(t, testSecret, srv.Client())

	const panics = 3
	for i := range panics {
		body := fmt.Sprintf(`{"gid":"g1","branch":"b%d","op":"try","payload":{"secret_internal":1}}`, i)
		code, answer := send(t, client, srv.URL, body, nil)
		if code != http.StatusInternalServerError || !strings.Contains(answer, "request id") || strings.Contains(answer, "index out of range") {
			t.Errorf("panicking try %d → %d %q; want 500 with a request id and without the panic's text", i, code, answer)
		}
	}
	if !waitFor(5*time.Second, func() bool { return pool.Stat().AcquiredConns() == 0 }) {
		t.Errorf("%d of the pool's 4 connections still checked out after %d panics; want 0", pool.Stat().AcquiredConns(), panics)
	}
	idle := func() int {
		var n int
		if err := s.Pool.QueryRow(ctx, `select count(*) from pg_stat_activity
			where application_name = $1 and state like 'idle in transaction%'`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if !waitFor(5*time.Second, func() bool { return idle() == 0 }) {
		t.Errorf("%d sessions idle in transaction after %d panics; want 0", idle(), panics)
	}
	start := time.Now()
	code, answer := send(t, client, srv.URL, `{"gid":"g1","branch":"b0","op":"cancel"}`, nil)
	if code != http.StatusOK || time.Since(start) > 5*time.Second {
		t.Errorf("cancel of a branch whose try panicked → %d %q after %v; want 200 at once", code, answer, time.Since(start))
	}
	if cancels.Load() != 0 {
		t.Errorf("the cancel ran the business code; want an empty rollback (the try left nothing)")
	}
	var held int
	if err := s.Pool.QueryRow(ctx, `select count(*) from held`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Errorf("%d rows of panicking tries committed; want 0", held)
	}
	if l := logs.String(); !strings.Contains(l, "index out of range") || !strings.Contains(l, "stack=") || !strings.Contains(l, "request_id=") {
		t.Errorf("the log does not hold the panic with its stack and request id:\n%s", l)
	}
}

// Item 8: a 500 says "internal error" and a request id; the error itself is only in the log.
func TestIntegrationHandlerHidesInternalErrors(t *testing.T) {
	var logs coretest.LogBuffer
	f := newFixture(t, append(withSecrets(testSecret), barrier.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))...)
	const internal = "connect to db-internal.example as user txkit_admin: password authentication failed"
	srv := httptest.NewServer(handler(f.Bar, func(ctx context.Context, tx pgx.Tx, r participant.Request) error {
		return errors.New(internal)
	}))
	t.Cleanup(srv.Close)
	code, answer := send(t, signingClient(t, testSecret, srv.Client()), srv.URL, `{"gid":"g1","branch":"b","op":"try"}`, nil)
	if code != http.StatusInternalServerError {
		t.Fatalf("→ %d %q; want 500", code, answer)
	}
	if strings.Contains(answer, "db-internal") || strings.Contains(answer, "txkit_admin") {
		t.Errorf("the 500 answer carries the internal error: %q", answer)
	}
	_, id, ok := strings.Cut(answer, "request id ")
	id = strings.TrimSuffix(id, ")")
	if !ok || id == "" || !strings.Contains(logs.String(), "request_id="+id) || !strings.Contains(logs.String(), "txkit_admin") {
		t.Errorf("answer %q: want a request id that names the logged error; log:\n%s", answer, logs.String())
	}
}
