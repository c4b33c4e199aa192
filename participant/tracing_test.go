package participant_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/participant"
)

// An HTTP participant call made under a client span arrives in the handler's server span: same
// trace, the client span as parent, fn's ctx carrying the server span. A refusal is recorded.
func TestIntegrationHandlerTracing(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	f := newFixture(t, participant.WithSecrets(testSecret), participant.WithBarrierTracerProvider(tp))
	var (
		mu   sync.Mutex
		inFn trace.SpanContext
	)
	mux := http.NewServeMux()
	mux.Handle("POST /stock", f.bar.Handler(func(ctx context.Context, tx pgx.Tx, r participant.Request) error {
		mu.Lock()
		inFn = trace.SpanContextFromContext(ctx)
		mu.Unlock()
		if r.Op == participant.OpCancel {
			return errors.New("warehouse system unavailable")
		}
		return f.record(ctx, tx, r)
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
	want := map[attribute.Key]string{"txkit.gid": "g-trace", "txkit.branch": "b1", "txkit.op": "try"}
	for _, kv := range server.Attributes {
		if w, ok := want[kv.Key]; ok {
			if kv.Value.AsString() != w {
				t.Errorf("attribute %s = %q, want %q", kv.Key, kv.Value.AsString(), w)
			}
			delete(want, kv.Key)
		}
	}
	if len(want) > 0 {
		t.Errorf("server span lacks attributes %v", want)
	}
	if server.Status.Code != codes.Unset {
		t.Errorf("successful try: status %v", server.Status)
	}

	// A failing op: the error is recorded on the span.
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
