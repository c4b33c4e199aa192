package barrier_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/testkit/barriertest"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
)

// newServer serves f's barrier over HTTP. The business code records its call, then does what the
// payload's "mode" says: "refuse" (a business refusal), "fail" (a transient error), "bad" (an
// invalid payload) or nothing (success).
func newServer(t *testing.T, f *fixture) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("POST /stock", f.Bar.Handler(func(ctx context.Context, tx pgx.Tx, r participant.Request) error {
		if err := f.Record(ctx, tx, r); err != nil {
			return err
		}
		var p struct{ Mode string }
		if len(r.Payload) > 0 {
			if err := json.Unmarshal(r.Payload, &p); err != nil {
				return fmt.Errorf("payload: %w: %w", participant.ErrBadRequest, err)
			}
		}
		switch p.Mode {
		case "refuse":
			return fmt.Errorf("out of stock: %w", participant.ErrRefused)
		case "fail":
			return errors.New("warehouse system unavailable")
		case "bad":
			return fmt.Errorf("payload has no item: %w", participant.ErrBadRequest)
		}
		return nil
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

var post = barriertest.Post

func TestIntegrationHandlerStatus(t *testing.T) {
	f := newFixture(t, barrier.MaxRequestBytesForTest(1024), barrier.WithSecrets(testSecret))
	srv := newServer(t, f)
	for _, tc := range []struct {
		name     string
		method   string
		body     string
		want     int
		wantBody string // a substring
		invoked  bool   // whether the business code ran
	}{
		{name: "ok", body: `{"gid":"g1","branch":"b","op":"try"}`, want: 200, wantBody: `{"ok":true}`, invoked: true},
		{name: "duplicate", body: `{"gid":"g1","branch":"b","op":"try","nonce":"retry"}`, want: 200, wantBody: `{"ok":true}`},
		{name: "refused", body: `{"gid":"g2","branch":"b","op":"try","payload":{"mode":"refuse"}}`, want: 409,
			wantBody: "out of stock", invoked: true},
		{name: "transient failure", body: `{"gid":"g3","branch":"b","op":"try","payload":{"mode":"fail"}}`, want: 500,
			wantBody: "participant: internal error (request id ", invoked: true},
		{name: "bad payload", body: `{"gid":"g4","branch":"b","op":"try","payload":{"mode":"bad"}}`, want: 400,
			wantBody: "no item", invoked: true},
		{name: "empty rollback", body: `{"gid":"g5","branch":"b","op":"cancel"}`, want: 200, wantBody: `{"ok":true}`},
		{name: "hanging try", body: `{"gid":"g5","branch":"b","op":"try"}`, want: 409, wantBody: "hanging"},
		{name: "malformed JSON", body: `{"gid":"g6",`, want: 400, wantBody: "bad request"},
		{name: "unknown op", body: `{"gid":"g6","branch":"b","op":"explode"}`, want: 400, wantBody: "unknown op"},
		{name: "no op", body: `{"gid":"g6","branch":"b"}`, want: 400},
		{name: "empty gid", body: `{"gid":"","branch":"b","op":"try"}`, want: 400, wantBody: "empty gid"},
		{name: "gid too long", body: `{"gid":"` + strings.Repeat("g", 250) + `","branch":"b","op":"try"}`, want: 400},
		{name: "body too large", body: `{"gid":"g6","branch":"b","op":"try","payload":"` + strings.Repeat("x", 2000) + `"}`, want: 400},
		{name: "GET", method: http.MethodGet, want: 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r participant.Request
			_ = json.Unmarshal([]byte(tc.body), &r)
			before := f.Invocations(r.GID, r.Branch, r.Op)
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			code, body := post(t, srv.URL+"/stock", method, tc.body)
			if code != tc.want || !strings.Contains(body, tc.wantBody) {
				t.Fatalf("%s → %d %q; want %d with %q", tc.body, code, body, tc.want, tc.wantBody)
			}
			if ran := f.Invocations(r.GID, r.Branch, r.Op) > before; ran != tc.invoked {
				t.Fatalf("business code ran: %v; want %v", ran, tc.invoked)
			}
			if code != 200 && r.GID != "" && f.Committed(r.GID, r.Branch, r.Op) != 0 {
				t.Fatalf("a %d answer left committed effects", code)
			}
		})
	}
	var markers, nonces int
	if err := f.Pool.QueryRow(t.Context(), `select count(*) filter (where scope <> 'nonce'), count(*) filter (where scope = 'nonce')
		from txkit_barrier`).Scan(&markers, &nonces); err != nil {
		t.Fatal(err)
	}
	if markers != 3 || nonces != 3 {
		t.Fatalf("%d barrier markers, %d nonces; want 3 markers (g1's try, g5's try and cancel) and the nonces of the 3 requests answered 200: failures must leave none",
			markers, nonces)
	}
}

// The coordinator's HTTP client and the handler agree: 2xx is success, 409 a refusal, the rest a
// failure to retry — and a retried failure runs the business code again.
func TestIntegrationHandlerWithHTTPClient(t *testing.T) {
	f := newFixture(t, barrier.WithSecrets(testSecret))
	srv := newServer(t, f)
	ctx := t.Context()
	// Retries within one second are signed alike but carry different nonces: none is a replay.
	c := participant.HTTP{URL: srv.URL + "/stock", Client: signingClient(t, testSecret, srv.Client())}
	r := func(gid string, op participant.Op, mode string) participant.Request {
		return participant.Request{GID: gid, Branch: "stock", Op: op, Payload: json.RawMessage(`{"mode":"` + mode + `"}`)}
	}
	const (
		T = participant.OpTry
		C = participant.OpConfirm
		X = participant.OpCancel
	)

	// try, confirm and their duplicates.
	for _, op := range []participant.Op{T, T, C, C} {
		if err := c.Do(ctx, r("g1", op, "")); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
	}
	f.Expect("g1", "stock", T, 1, 1)
	f.Expect("g1", "stock", C, 1, 1)

	// A refused try, then the cancel the coordinator sends, an empty rollback.
	if err := c.Do(ctx, r("g2", T, "refuse")); !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("refused try = %v; want ErrRefused", err)
	}
	if err := c.Do(ctx, r("g2", X, "")); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	f.Expect("g2", "stock", T, 1, 0)
	f.Expect("g2", "stock", X, 0, 0)

	// Cancel first (the try was delayed), then the hanging try: 409, not run.
	if err := c.Do(ctx, r("g3", X, "")); err != nil {
		t.Fatalf("empty rollback: %v", err)
	}
	if err := c.Do(ctx, r("g3", T, "")); !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("hanging try = %v; want ErrRefused (409)", err)
	}
	f.Expect("g3", "stock", T, 0, 0)

	// A transient failure rolls back everything; the retry runs the business code again.
	err := c.Do(ctx, r("g4", C, "fail"))
	if err == nil || errors.Is(err, participant.ErrRefused) || !strings.Contains(err.Error(), "HTTP 500") {
		t.Fatalf("failed confirm = %v; want an HTTP 500 error, not a refusal", err)
	}
	if err := c.Do(ctx, r("g4", C, "")); err != nil {
		t.Fatalf("retried confirm: %v", err)
	}
	if err := c.Do(ctx, r("g4", C, "")); err != nil {
		t.Fatalf("duplicate confirm: %v", err)
	}
	f.Expect("g4", "stock", C, 2, 1)
}

// The in-process Participant maps errors the same way as the handler.
func TestIntegrationParticipantErrors(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	boom := errors.New("boom")
	p := f.Bar.Participant(func(ctx context.Context, tx pgx.Tx, r participant.Request) error {
		if err := f.Record(ctx, tx, r); err != nil {
			return err
		}
		if r.Branch == "fail" {
			return boom
		}
		return nil
	})
	if err := p.Do(ctx, participant.Request{GID: "g", Op: participant.OpTry}); !errors.Is(err, participant.ErrBadRequest) {
		t.Fatalf("no branch = %v; want ErrBadRequest", err)
	}
	if err := p.Do(ctx, req("g", "fail", participant.OpTry)); !errors.Is(err, boom) {
		t.Fatalf("failing fn = %v; want its error", err)
	}
	f.Expect("g", "fail", participant.OpTry, 1, 0)
	if err := p.Do(ctx, req("g", "fail", participant.OpCancel)); err != nil {
		t.Fatalf("cancel after the failed try: %v", err)
	}
	f.Expect("g", "fail", participant.OpCancel, 0, 0) // the failed try left nothing: an empty rollback
}
