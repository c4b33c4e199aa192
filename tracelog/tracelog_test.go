package tracelog

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestHandler(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	spanCtx, span := tp.Tracer("test").Start(context.Background(), "request")
	defer span.End()
	sc := span.SpanContext()
	stored := trace.ContextWithRemoteSpanContext(context.Background(), sc) // a remote parent, as resumed work has
	for _, c := range []struct {
		name    string
		ctx     context.Context
		log     func(l *slog.Logger, ctx context.Context)
		withIDs bool
	}{
		{"span", spanCtx, func(l *slog.Logger, ctx context.Context) { l.InfoContext(ctx, "m", "k", "v") }, true},
		{"remote span context", stored, func(l *slog.Logger, ctx context.Context) { l.WarnContext(ctx, "m", "k", "v") }, true},
		{"with attrs", spanCtx, func(l *slog.Logger, ctx context.Context) { l.With("a", 1).ErrorContext(ctx, "m", "k", "v") }, true},
		{"no span", context.Background(), func(l *slog.Logger, ctx context.Context) { l.InfoContext(ctx, "m", "k", "v") }, false},
		{"no context", spanCtx, func(l *slog.Logger, _ context.Context) { l.Info("m", "k", "v") }, false},
		{"invalid span context", trace.ContextWithSpanContext(context.Background(), trace.SpanContext{}),
			func(l *slog.Logger, ctx context.Context) { l.InfoContext(ctx, "m", "k", "v") }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			c.log(slog.New(Handler(slog.NewJSONHandler(&buf, nil))), c.ctx)
			var rec map[string]any
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
				t.Fatalf("%q: %v", buf.String(), err)
			}
			if rec["k"] != "v" || rec["msg"] != "m" {
				t.Fatalf("the record lost its own content: %v", rec)
			}
			tid, hasT := rec["trace_id"]
			sid, hasS := rec["span_id"]
			switch {
			case c.withIDs && (tid != sc.TraceID().String() || sid != sc.SpanID().String()):
				t.Fatalf("trace_id %v, span_id %v; want %s, %s", tid, sid, sc.TraceID(), sc.SpanID())
			case !c.withIDs && (hasT || hasS):
				t.Fatalf("ids added without a span: %v", rec)
			}
		})
	}
	// Levels are the wrapped handler's.
	h := Handler(slog.NewJSONHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if h.Enabled(spanCtx, slog.LevelInfo) || !h.Enabled(spanCtx, slog.LevelWarn) {
		t.Fatal("Handler does not follow the wrapped handler's level")
	}
}
