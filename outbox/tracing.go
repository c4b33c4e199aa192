package outbox

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/obs"
)

// tracerName is the instrumentation scope of the relay's spans.
const tracerName = "github.com/txkit/txkit/outbox"

// startPublish starts the publish span of x: a child of x's stored trace context, linked to the
// span ctx carries (if any). The returned ctx carries the span.
func (r *Relay) startPublish(ctx context.Context, x row) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", x.msg.Topic),
			attribute.String("messaging.message.id", x.msg.ID.String()),
			attribute.Int("txkit.attempt", x.attempts+1),
		)}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	if x.trace != "" {
		// The stored context replaces the relay's as the parent (a remote span context).
		ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{})
		ctx = obs.DecodeTrace(ctx, x.trace)
	}
	return r.tracer.Start(ctx, "outbox relay publish", opts...)
}
