package barrier_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
)

// An HTTP participant call made under a client span arrives in the handler's server span: same
// trace, the client span as parent, fn's ctx carrying the server span. A refusal is recorded.
func TestIntegrationHandlerTracing(t *testing.T) {
	exp, tp := coretest.Tracing(t)
	var logs coretest.LogBuffer
	f := newFixture(t, barrier.WithSecrets(testSecret), barrier.WithTelemetry(nil, tp),
		barrier.WithLogger(logs.TraceLogger()))
	var (
		mu   sync.Mutex
		inFn trace.SpanContext
	)
	mux := http.NewServeMux()
	mux.Handle("POST /stock", f.Bar.Handler(func(ctx context.Context, tx pgx.Tx, r participant.Request) error {
		mu.Lock()
		inFn = trace.SpanContextFromContext(ctx)
		mu.Unlock()
		if r.Op == participant.OpCancel {
			return errors.New("warehouse system unavailable")
		}
		return f.Record(ctx, tx, r)
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	client, err := participant.NewSigningClient(testSecret, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := participant.HTTP{URL: srv.URL + "/stock", Client: client}

	ctx, span := tp.Tracer("test").Start(t.Context(), "coordinator call", trace.WithSpanKind(trace.SpanKindClient))
	err = p.Do(ctx, participant.Request{GID: "g-trace", Branch: "b1", Op: participant.OpTry, Payload: json.RawMessage(`{}`)})
	span.End()
	if err != nil {
		t.Fatalf("try: %v", err)
	}
	client0 := span.SpanContext()
	server := findSpan(t, exp, "participant try")
	switch {
	case server.SpanContext.TraceID() != client0.TraceID():
		t.Errorf("server span trace %s, want the client's %s", server.SpanContext.TraceID(), client0.TraceID())
	case server.Parent.SpanID() != client0.SpanID() || !server.Parent.IsRemote():
		t.Errorf("server span parent %s (remote %v), want the client span %s", server.Parent.SpanID(), server.Parent.IsRemote(), client0.SpanID())
	case server.SpanKind != trace.SpanKindServer:
		t.Errorf("span kind %v, want server", server.SpanKind)
	}
	mu.Lock()
	if inFn.SpanID() != server.SpanContext.SpanID() {
		t.Errorf("fn's ctx carries span %s, want the server span %s", inFn.SpanID(), server.SpanContext.SpanID())
	}
	mu.Unlock()
	checkAttrs(t, server, "g-trace", "b1", "try")
	if server.Status.Code != codes.Unset {
		t.Errorf("successful try: status %v", server.Status)
	}

	// A failing op: the error is recorded on the span, and the 500's log line carries its ids.
	if err := p.Do(t.Context(), participant.Request{GID: "g-trace", Branch: "b1", Op: participant.OpCancel}); err == nil {
		t.Fatal("cancel: no error, want the handler's failure")
	}
	failed := findSpan(t, exp, "participant cancel")
	if failed.Status.Code != codes.Error || len(failed.Events) == 0 {
		t.Errorf("failed cancel: status %v, %d events; want Error and the recorded error", failed.Status, len(failed.Events))
	}
	if failed.Parent.IsValid() {
		t.Errorf("a call without a span: the server span has parent %s, want a root", failed.Parent.SpanID())
	}
	if !logs.Logged("participant: internal error", failed.SpanContext) {
		t.Errorf("no internal-error line with the span's trace_id and span_id:\n%s", logs.String())
	}
}

// The in-process participant runs each op as the handler does, under an internal span
// "participant <op>" that is the child of the caller's span, with the same attributes; fn's ctx
// carries it, and a failure is recorded on it and logged with its trace and span ids.
func TestIntegrationParticipantTracing(t *testing.T) {
	exp, tp := coretest.Tracing(t)
	var logs coretest.LogBuffer
	f := newFixture(t, barrier.WithTelemetry(nil, tp), barrier.WithLogger(logs.TraceLogger()))
	var inFn trace.SpanContext // Do calls fn in the caller's goroutine
	p := f.Bar.Participant(func(ctx context.Context, tx pgx.Tx, r participant.Request) error {
		inFn = trace.SpanContextFromContext(ctx)
		if r.Op == participant.OpCancel {
			return errors.New("warehouse system unavailable")
		}
		return f.Record(ctx, tx, r)
	})

	ctx, caller := tp.Tracer("test").Start(t.Context(), "coordinator call", trace.WithSpanKind(trace.SpanKindClient))
	err := p.Do(ctx, participant.Request{GID: "g-inproc", Branch: "b1", Op: participant.OpTry, Payload: json.RawMessage(`{}`)})
	caller.End()
	if err != nil {
		t.Fatalf("try: %v", err)
	}
	s := findSpan(t, exp, "participant try")
	switch c := caller.SpanContext(); {
	case s.SpanContext.TraceID() != c.TraceID():
		t.Errorf("span trace %s, want the caller's %s", s.SpanContext.TraceID(), c.TraceID())
	case s.Parent.SpanID() != c.SpanID() || s.Parent.IsRemote():
		t.Errorf("span parent %s (remote %v), want the caller's span %s, local", s.Parent.SpanID(), s.Parent.IsRemote(), c.SpanID())
	case s.SpanKind != trace.SpanKindInternal:
		t.Errorf("span kind %v, want internal", s.SpanKind)
	case inFn.SpanID() != s.SpanContext.SpanID():
		t.Errorf("fn's ctx carries span %s, want %s", inFn.SpanID(), s.SpanContext.SpanID())
	case s.Status.Code != codes.Unset:
		t.Errorf("successful try: status %v", s.Status)
	}
	checkAttrs(t, s, "g-inproc", "b1", "try")

	ctx, caller = tp.Tracer("test").Start(t.Context(), "coordinator call")
	err = p.Do(ctx, participant.Request{GID: "g-inproc", Branch: "b1", Op: participant.OpCancel})
	caller.End()
	if err == nil {
		t.Fatal("cancel: no error, want fn's failure")
	}
	failed := findSpan(t, exp, "participant cancel")
	if failed.Status.Code != codes.Error || len(failed.Events) == 0 || failed.Parent.SpanID() != caller.SpanContext().SpanID() {
		t.Errorf("failed cancel: status %v, %d events, parent %s; want Error, the recorded error, the caller's span %s",
			failed.Status, len(failed.Events), failed.Parent.SpanID(), caller.SpanContext().SpanID())
	}
	if !logs.Logged("participant: request failed", failed.SpanContext) {
		t.Errorf("no failure line with the span's trace_id and span_id:\n%s", logs.String())
	}
}

// checkAttrs checks the span's txkit.gid, txkit.branch and txkit.op.
func checkAttrs(t *testing.T, s tracetest.SpanStub, gid, branch, op string) {
	t.Helper()
	for k, want := range map[string]string{"txkit.gid": gid, "txkit.branch": branch, "txkit.op": op} {
		if got := coretest.Attr(s, k); got != want {
			t.Errorf("span %q: attribute %s = %q, want %q", s.Name, k, got, want)
		}
	}
}

func findSpan(t *testing.T, exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no span %q among %d", name, len(exp.GetSpans()))
	return tracetest.SpanStub{}
}

// A coordinator that goes away mid-call (its ctx cancelled: the HTTP connection closes, or the
// in-process call's ctx ends) is an expected event: the op's end is logged at Info, not ERROR, and
// its span is not marked as an error.
func TestIntegrationCallerGoneIsNotAnError(t *testing.T) {
	exp, tp := coretest.Tracing(t)
	var logs coretest.LogBuffer
	f := newFixture(t, barrier.WithSecrets(testSecret), barrier.WithTelemetry(nil, tp), barrier.WithLogger(logs.TraceLogger()))
	started := make(chan struct{}, 2)
	fn := func(ctx context.Context, tx pgx.Tx, r participant.Request) error {
		started <- struct{}{}
		<-ctx.Done() // the caller went away; the statement then fails as pgx fails it
		_, err := tx.Exec(ctx, `select 1`)
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /stock", f.Bar.Handler(fn))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	client, err := participant.NewSigningClient(testSecret, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, gid, span string
		p               participant.Participant
	}{
		{"http", "g-gone-http", "participant try", participant.HTTP{URL: srv.URL + "/stock", Client: client}},
		{"in-process", "g-gone-inproc", "participant confirm", f.Bar.Participant(fn)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := participant.OpTry
			if tc.span == "participant confirm" {
				op = participant.OpConfirm
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				done <- tc.p.Do(ctx, participant.Request{GID: tc.gid, Branch: "b1", Op: op, Payload: json.RawMessage(`{}`)})
			}()
			select {
			case <-started:
			case <-time.After(30 * time.Second):
				t.Fatal("fn did not start")
			}
			cancel()
			if err := <-done; err == nil {
				t.Fatal("Do of an abandoned call: nil error")
			}
			var s tracetest.SpanStub
			testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool { // the handler ends after the client left
				for _, x := range exp.GetSpans() {
					if x.Name == tc.span && coretest.Attr(x, "txkit.gid") == tc.gid {
						s = x
						return true
					}
				}
				return false
			}, "no span %q of %s", tc.span, tc.gid)
			if s.Status.Code == codes.Error {
				t.Errorf("span of an abandoned call: status %v, want not an error", s.Status)
			}
			var line string
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "gid="+tc.gid) && !strings.Contains(l, "rollback") {
					line = l
				}
			}
			if !strings.Contains(line, "level=INFO") || !strings.Contains(line, `msg="participant: call abandoned by the coordinator"`) ||
				!strings.Contains(line, "span_id="+s.SpanContext.SpanID().String()) {
				t.Errorf("log line of an abandoned call %q; want level=INFO, the abandoned message and the span id; all:\n%s", line, logs.String())
			}
		})
	}
}
