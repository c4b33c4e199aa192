package obs

import (
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Propagator is the W3C trace context (traceparent, tracestate) every txkit component injects
// into what it sends or stores and extracts from what it receives or loads.
func Propagator() propagation.TextMapPropagator { return propagation.TraceContext{} }

// TracerProvider returns tp, or the application's global provider when tp is nil (the
// OpenTelemetry convention for libraries: the application chooses the SDK).
func TracerProvider(tp trace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return otel.GetTracerProvider()
	}
	return tp
}

// EncodeTrace returns the trace context of ctx as the text a durable record stores (a global
// transaction, an outbox row, a notification), so that work resumed by another process, later,
// continues the trace; "" when ctx carries no valid span context.
func EncodeTrace(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	Propagator().Inject(ctx, c)
	b, err := json.Marshal(c)
	if err != nil {
		return ""
	}
	return string(b)
}

// DecodeTrace returns ctx carrying the remote span context stored by [EncodeTrace] in s (ctx
// unchanged when s is empty or not a stored trace context).
func DecodeTrace(ctx context.Context, s string) context.Context {
	if s == "" {
		return ctx
	}
	c := propagation.MapCarrier{}
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return ctx
	}
	return Propagator().Extract(ctx, c)
}

// EndSpan records err (if any) on span, with status Error, and ends the span: the one way every
// component ends a span that can fail.
func EndSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
