package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/testkit/mqtest"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/tracelog"
)

// TestIntegrationRelayTracing: a message enqueued under a request's span is published, attempt
// after attempt, under "outbox relay publish" spans that are children of that span (the same trace,
// although the relay's own ctx carries none of it); the publisher's ctx carries each attempt's
// span; the relay's log lines about a failed publish (those written: they are limited) and a dead
// message carry the trace of the request that enqueued it; a message enqueued outside any span
// starts a trace of its own. The table is one migrated before tracing existed (and before Migrate
// recorded the schema's versions): Migrate adds the trace_context column.
func TestIntegrationRelayTracing(t *testing.T) {
	e := newRelayEnv(t)
	parts := strings.Split(e.ob.Table(), ".")
	if _, err := e.pool.Exec(t.Context(), `alter table `+pgx.Identifier(parts).Sanitize()+` drop column trace_context;
		delete from `+pgx.Identifier{parts[0], pgutil.MigrationsTable}.Sanitize()); err != nil { // older than the record of versions too
		t.Fatal(err)
	}
	if err := e.ob.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate of a table without trace_context: %v", err)
	}

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var (
		mu      sync.Mutex
		failed  = map[string]int{}                 // failed attempts so far, by body
		inCalls = map[string][]trace.SpanContext{} // the span context of each Publish's ctx, by body
	)
	rec := &recorder{next: mqtest.Publisher(t)}
	rec.setFail(func(ctx context.Context, m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		b := string(m.Body)
		inCalls[b] = append(inCalls[b], trace.SpanContextFromContext(ctx))
		if b == "doomed" || (b == "traced" && failed[b] < 2) {
			failed[b]++
			return fmt.Errorf("broker away: %w", errInjected)
		}
		return nil
	})
	enqueueUnder := func(name, body string) trace.SpanContext {
		ctx, span := tp.Tracer("test").Start(t.Context(), name)
		defer span.End()
		if err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			_, err := e.ob.Enqueue(ctx, tx, outbox.Message{Topic: e.topic, Key: body, Body: []byte(body)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return span.SpanContext()
	}
	req := enqueueUnder("business request", "traced")
	doomedReq := enqueueUnder("doomed request", "doomed")
	e.enqueue(t, "plain", "plain")

	logs := &coretest.LogBuffer{}
	r := e.relay(t, "relay-1", rec, outbox.WithTelemetry(nil, tp), outbox.WithRetry(3, time.Millisecond, 5*time.Millisecond),
		outbox.WithLogger(slog.New(tracelog.Handler(slog.NewJSONHandler(logs, nil)))))
	run(t, r)
	e.waitOneDead(t, "traced and plain published, doomed dead")

	publishes := func(body string) []sdktrace.ReadOnlySpan {
		var out []sdktrace.ReadOnlySpan
		for _, s := range exp.GetSpans().Snapshots() {
			if s.Name() == "outbox relay publish" && slices.ContainsFunc(inCalls[body], func(sc trace.SpanContext) bool { return sc.SpanID() == s.SpanContext().SpanID() }) {
				out = append(out, s)
			}
		}
		sort.Slice(out, func(i, j int) bool {
			return attrOf(out[i], "txkit.attempt").AsInt64() < attrOf(out[j], "txkit.attempt").AsInt64()
		})
		return out
	}
	mu.Lock()
	defer mu.Unlock()
	spans := publishes("traced")
	if len(spans) != 3 || len(inCalls["traced"]) != 3 {
		t.Fatalf("traced: %d publish spans for %d publishes, want 3 of each (each publish's ctx carries its span)", len(spans), len(inCalls["traced"]))
	}
	for i, s := range spans {
		if s.SpanContext().TraceID() != req.TraceID() || s.Parent().SpanID() != req.SpanID() || s.SpanKind() != trace.SpanKindProducer {
			t.Fatalf("attempt %d: trace %s parent %s kind %v, want a producer span, child of the request %s/%s",
				i+1, s.SpanContext().TraceID(), s.Parent().SpanID(), s.SpanKind(), req.TraceID(), req.SpanID())
		}
		if got := attrOf(s, "txkit.attempt").AsInt64(); got != int64(i+1) {
			t.Fatalf("span %d: txkit.attempt %d", i, got)
		}
		want := codes.Error
		if i == 2 {
			want = codes.Unset
		}
		if s.Status().Code != want {
			t.Fatalf("attempt %d: status %v, want %v", i+1, s.Status().Code, want)
		}
	}
	lines := parseLines(t, logs.String())
	// The failure lines are limited (one per topic per interval, the others counted): each line
	// written carries the span of the failed attempt it reports.
	failedSpans := map[string]string{} // span id -> trace id, of every failed attempt
	for _, s := range append(spans[:2], publishes("doomed")...) {
		failedSpans[s.SpanContext().SpanID().String()] = s.SpanContext().TraceID().String()
	}
	written := 0
	for _, l := range lines {
		if l["msg"] != "outbox: publish failed" {
			continue
		}
		written++
		if tr, ok := failedSpans[fmt.Sprint(l["span_id"])]; !ok || tr != l["trace_id"] {
			t.Fatalf("a publish failed line does not carry the span of a failed attempt: %v\n%s", l, logs.String())
		}
	}
	if written == 0 {
		t.Fatalf("no publish failed line:\n%s", logs.String())
	}
	if !slices.ContainsFunc(lines, func(l map[string]any) bool {
		return strings.HasPrefix(fmt.Sprint(l["msg"]), "outbox: message dead") && l["trace_id"] == doomedReq.TraceID().String()
	}) {
		t.Fatalf("the dead message's line does not carry its request's trace %s:\n%s", doomedReq.TraceID(), logs.String())
	}
	plain := publishes("plain")
	if len(plain) != 1 || plain[0].Parent().IsValid() || plain[0].SpanContext().TraceID() == req.TraceID() {
		t.Fatalf("plain: %d spans, want 1 that begins a trace of its own", len(plain))
	}
}

// attrOf returns the span's attribute key (the zero Value when absent).
func attrOf(s sdktrace.ReadOnlySpan, key string) (v attribute.Value) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return v
}

// parseLines decodes JSON log lines.
func parseLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		m := map[string]any{}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}
