package notify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/notify"
	"github.com/txkit/txkit/notify/inbox"
	"github.com/txkit/txkit/tracelog"
)

// attr returns the span's attribute key ("" when absent).
func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// A notification's delivery attempts are linked to the enqueuing request: enqueued under a
// "business request" span, refused twice then delivered, it gives three "notify deliver" spans in
// the request's trace, children of the request's span, numbered 1, 2, 3; the receiver got each
// attempt's own traceparent; the notifier's log lines about those attempts carry their ids; the
// receiver's Inbox applies the delivered attempt under a "notify receive" span, the child of that
// attempt's span, and the apply function's ctx carries it. A table migrated before tracing existed
// gains the trace_context column.
func TestIntegrationTraceDeliveryAttempts(t *testing.T) {
	w := newWorld(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var (
		mu      sync.Mutex
		headers = map[string][]string{} // the traceparent header of each attempt, by notification id
		calls   atomic.Int32
	)
	store, err := idempotency.New(w.receiver.Pool, idempotency.WithTable(w.receiver.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	appliedIn := map[string]trace.SpanContext{} // the span context of apply's ctx, by notification id
	traced, err := inbox.New(w.receiver.Pool, store, "shop", []string{secret}, func(ctx context.Context, tx pgx.Tx, d notify.Delivery) error {
		mu.Lock()
		appliedIn[d.ID.String()] = trace.SpanContextFromContext(ctx)
		mu.Unlock()
		_, err := tx.Exec(ctx, `insert into applied values ($1, $2, 1)`, d.ID, d.Key)
		return err
	}, inbox.WithTracerProvider(tp), inbox.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) bool {
		id := r.Header.Get(notify.HeaderID)
		mu.Lock()
		headers[id] = append(headers[id], r.Header.Get("traceparent"))
		mu.Unlock()
		if calls.Add(1) <= 2 {
			http.Error(rw, "down", http.StatusServiceUnavailable)
			return true
		}
		traced.ServeHTTP(rw, r)
		return true
	})
	logs := &coretest.LogBuffer{}
	n := w.notifier(w.receivers(), notify.WithTelemetry(nil, tp), notify.WithElector(zkenv.Elector(t, w.path, "a")),
		notify.WithLogger(slog.New(tracelog.Handler(slog.NewJSONHandler(logs, nil)))))
	// An existing deployment, older than tracing and than the record of the schema's versions: its
	// table has no trace_context column; Migrate adds it.
	table := pgx.Identifier{w.sender.Name, "txkit_notify"}.Sanitize()
	if _, err := w.sender.Pool.Exec(t.Context(), `alter table `+table+` drop column trace_context;
		delete from `+pgx.Identifier{w.sender.Name, pgutil.MigrationsTable}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if err := n.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, n.Run)

	ctx, req := tp.Tracer("test").Start(t.Context(), "business request")
	nt := notify.Notification{Receiver: "shop", Key: "traced", Payload: json.RawMessage(`{"amount":1}`)}
	if err := pgx.BeginFunc(ctx, w.sender.Pool, func(tx pgx.Tx) error {
		var err error
		nt.ID, err = n.Enqueue(ctx, tx, nt)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	req.End()
	w.waitStatus(n, nt, notify.StatusDelivered, 15*time.Second)
	// A notification enqueued outside any span: its attempt starts a trace of its own.
	plain := w.enqueue(n, "shop", "plain", 1)
	w.waitStatus(n, plain, notify.StatusDelivered, 10*time.Second)

	deliveries := func(id string) []sdktrace.ReadOnlySpan {
		var out []sdktrace.ReadOnlySpan
		for _, s := range exp.GetSpans().Snapshots() {
			if s.Name() == "notify deliver" && attr(s, "txkit.notification").AsString() == id {
				out = append(out, s)
			}
		}
		sort.Slice(out, func(i, j int) bool {
			return attr(out[i], "txkit.attempt").AsInt64() < attr(out[j], "txkit.attempt").AsInt64()
		})
		return out
	}
	var spans []sdktrace.ReadOnlySpan
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() bool { spans = deliveries(nt.ID.String()); return len(spans) == 3 },
		"%d notify deliver spans, want 3", len(spans))
	rsc := req.SpanContext()
	mu.Lock()
	sent := append([]string(nil), headers[nt.ID.String()]...)
	mu.Unlock()
	if len(sent) != 3 {
		t.Fatalf("the receiver saw %d attempts, want 3", len(sent))
	}
	for i, s := range spans {
		sc := s.SpanContext()
		if sc.TraceID() != rsc.TraceID() || s.Parent().SpanID() != rsc.SpanID() {
			t.Fatalf("attempt %d: trace %s parent %s, want a child of the request's span %s/%s", i+1, sc.TraceID(), s.Parent().SpanID(), rsc.TraceID(), rsc.SpanID())
		}
		if got := attr(s, "txkit.attempt").AsInt64(); got != int64(i+1) {
			t.Fatalf("span %d: attempt %d", i, got)
		}
		wantResult, wantCode := "refused", codes.Error
		if i == 2 {
			wantResult, wantCode = "ok", codes.Unset
		}
		if got := attr(s, "txkit.result").AsString(); got != wantResult || s.Status().Code != wantCode {
			t.Fatalf("attempt %d: result %q status %v, want %q %v", i+1, got, s.Status().Code, wantResult, wantCode)
		}
		if wantCode == codes.Error && len(s.Events()) == 0 {
			t.Fatalf("attempt %d: no error recorded", i+1)
		}
		if want := fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags()); sent[i] != want {
			t.Fatalf("attempt %d: the receiver saw traceparent %q, want the attempt's span %q", i+1, sent[i], want)
		}
	}
	// The failed attempts' log lines carry their spans' ids.
	for _, s := range spans[:2] {
		want := fmt.Sprintf(`"trace_id":"%s","span_id":"%s"`, s.SpanContext().TraceID(), s.SpanContext().SpanID())
		testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() bool { return strings.Contains(logs.String(), want) },
			"no log line carries %s:\n%s", want, logs.String())
	}
	// The receiver continued the delivered attempt's trace.
	var recv sdktrace.ReadOnlySpan
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() bool {
		for _, s := range exp.GetSpans().Snapshots() {
			if s.Name() == "notify receive" && attr(s, "txkit.notification").AsString() == nt.ID.String() {
				recv = s
				return true
			}
		}
		return false
	}, "no notify receive span for %s", nt.ID)
	delivered := spans[2].SpanContext()
	if recv.SpanContext().TraceID() != rsc.TraceID() || recv.Parent().SpanID() != delivered.SpanID() || recv.SpanKind() != trace.SpanKindServer {
		t.Fatalf("notify receive: trace %s parent %s kind %v, want a server span, child of the delivered attempt %s/%s",
			recv.SpanContext().TraceID(), recv.Parent().SpanID(), recv.SpanKind(), delivered.TraceID(), delivered.SpanID())
	}
	mu.Lock()
	inApply := appliedIn[nt.ID.String()]
	mu.Unlock()
	if inApply.SpanID() != recv.SpanContext().SpanID() {
		t.Fatalf("apply ran under span %s, want the notify receive span %s", inApply.SpanID(), recv.SpanContext().SpanID())
	}
	var ps []sdktrace.ReadOnlySpan
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() bool { ps = deliveries(plain.ID.String()); return len(ps) == 1 },
		"%d notify deliver spans of the plain notification, want 1", len(ps))
	if ps[0].Parent().IsValid() || ps[0].SpanContext().TraceID() == rsc.TraceID() {
		t.Fatalf("the plain notification's attempt has parent %v in trace %s", ps[0].Parent(), ps[0].SpanContext().TraceID())
	}
}
