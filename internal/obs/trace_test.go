package obs

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func TestEncodeDecodeTrace(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	defer span.End()
	s := EncodeTrace(ctx)
	if s == "" {
		t.Fatal("no trace context encoded from a context with a span")
	}
	got := trace.SpanContextFromContext(DecodeTrace(context.Background(), s))
	if !got.IsRemote() || got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("decoded %v, want the span's %v", got, span.SpanContext())
	}
	if EncodeTrace(context.Background()) != "" {
		t.Fatal("a context without a span encoded something")
	}
	for _, bad := range []string{"", "not json", `{"traceparent":"garbage"}`} {
		if trace.SpanContextFromContext(DecodeTrace(context.Background(), bad)).IsValid() {
			t.Fatalf("DecodeTrace(%q) produced a valid span context", bad)
		}
	}
}
