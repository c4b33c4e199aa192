package core_test

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
)

// TestIntegrationTraceContextColumn: Migrate adds trace_context to a global table made before it
// existed, and the log stores the trace context of Create's ctx and loads it with the transaction.
func TestIntegrationTraceContextColumn(t *testing.T) {
	ctx := t.Context()
	l, s := newLogOn(t)
	// The table as a deployment older than tracing, and than the record of the schema's versions, has it.
	if _, err := s.Pool.Exec(ctx, "alter table txkit_global drop column trace_context; delete from "+pgutil.MigrationsTable); err != nil {
		t.Fatalf("drop the column: %v", err)
	}
	if err := l.Migrate(ctx); err != nil {
		t.Fatalf("Migrate of the old table: %v", err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5},
		TraceFlags: trace.FlagsSampled})
	if err := l.Create(trace.ContextWithSpanContext(ctx, sc), "traced", core.KindTCC, time.Minute, nil); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := l.Create(ctx, "untraced", core.KindSaga, time.Minute, nil, httpBranch("a")); err != nil {
		t.Fatalf("Create: %v", err)
	}
	got := trace.SpanContextFromContext(obs.DecodeTrace(ctx, get(t, l, "traced").TraceContext))
	if got.TraceID() != sc.TraceID() {
		t.Fatalf("stored trace %s, want %s", got.TraceID(), sc.TraceID())
	}
	if tc := get(t, l, "untraced").TraceContext; tc != "" {
		t.Fatalf("a ctx without a span stored %q", tc)
	}
	txs, err := l.List(ctx, core.Filter{Kind: core.KindTCC})
	if err != nil || len(txs) != 1 || txs[0].TraceContext != get(t, l, "traced").TraceContext {
		t.Fatalf("List = %v, %v: want the traced transaction with its trace context", txs, err)
	}
}
