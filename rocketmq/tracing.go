package rocketmq

import (
	"context"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/message"
)

// The message properties that carry the W3C trace context: a [Publisher] sets them from the ctx
// it is given (the outbox relay passes the context stored with the message's row), and a
// [Consumer] starts its span as their child. A message header of either name is replaced by the
// publisher's trace context when that ctx carries a span.
const (
	PropertyTraceParent = "traceparent"
	PropertyTraceState  = "tracestate"
)

// tracerName is the instrumentation scope of this package's spans.
const tracerName = "github.com/txkit/txkit/rocketmq"

// WithTracerProvider sets the OpenTelemetry tracer provider (default: the application's global
// provider). It fits all three constructors. A [Consumer] runs each message's transaction under a
// span "rocketmq consume" (kind consumer), the child of the trace context the message's
// [PropertyTraceParent] and [PropertyTraceState] properties carry, and passes the span in the
// [Handler]'s ctx; a [Publisher] starts no span of its own: it only propagates ctx's trace context
// into those properties (the outbox relay's "outbox relay publish" span is the producer span).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return commonOption(func(o *commonOptions) { o.tp = tp })
}

// propertyCarrier is a propagation.TextMapCarrier over a RocketMQ message's properties.
type propertyCarrier struct{ m *primitive.Message }

var _ propagation.TextMapCarrier = propertyCarrier{}

func (c propertyCarrier) Get(key string) string { return c.m.GetProperty(key) }

func (c propertyCarrier) Set(key, value string) { c.m.WithProperty(key, value) }

func (c propertyCarrier) Keys() []string {
	var keys []string
	for _, k := range []string{PropertyTraceParent, PropertyTraceState} {
		if c.m.GetProperty(k) != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

// injectTrace sets m's trace properties from ctx (nothing when ctx carries no span).
func injectTrace(ctx context.Context, m *primitive.Message) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		obs.Propagator().Inject(ctx, propertyCarrier{m})
	}
}

// startConsume starts the "rocketmq consume" span of msg, the child of the trace context m
// carries; the returned ctx carries the span.
func (c *Consumer) startConsume(ctx context.Context, m *primitive.MessageExt, msg message.Message) (context.Context, trace.Span) {
	ctx = obs.Propagator().Extract(ctx, propertyCarrier{&m.Message})
	return c.tracer.Start(ctx, "rocketmq consume", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "rocketmq"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", c.topic),
			attribute.String("messaging.consumer.group.name", c.group),
			attribute.String("messaging.message.id", msg.ID.String()),
			attribute.Int("messaging.rocketmq.message.reconsume_times", int(m.ReconsumeTimes)),
		))
}

// endSpan records err (if any) on span and ends it.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
