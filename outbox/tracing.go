package outbox

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/obs"
)

// tracerName is the instrumentation scope of the relay's spans.
const tracerName = "github.com/txkit/txkit/outbox"

// WithTracerProvider sets the OpenTelemetry tracer provider of the relay (default: the
// application's global provider). The relay publishes each message under a span "outbox relay
// publish" (kind producer) and passes the span in the ctx it gives the [Publisher], which
// propagates it to the broker (the RocketMQ publisher sets the message's traceparent and
// tracestate properties from it).
//
// The span is a child of the trace context [Outbox.Enqueue] stored with the message — the
// request that wrote the business change — not of the relay's own work: a message is relayed
// later, by whichever process leads, and its consumers belong to the request that caused it. So
// the request's trace runs on through the relay to the consumer. When the relay's ctx itself
// carries a span, the publish span links to it. A message enqueued without a span is published
// under a span that begins a trace of its own.
func WithTracerProvider(tp trace.TracerProvider) RelayOption {
	return func(o *relayOptions) { o.tp = tp }
}

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
