package rocketmq

import (
	"context"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/message"
)

// The message properties that carry the W3C trace context: a [Publisher] sets them from the ctx
// it is given (the outbox relay passes the context stored with the message's row), a
// [TxProducer] from its "rocketmq send" span, and a [Consumer] and a TxProducer's check-back start
// their spans as their child. A message header of either name is replaced by the sender's trace
// context when there is one.
const (
	PropertyTraceParent = "traceparent"
	PropertyTraceState  = "tracestate"
)

// tracerName is the instrumentation scope of this package's spans.
const tracerName = "github.com/txkit/txkit/rocketmq"

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

// messagingAttrs are the attributes every span of this package has.
func messagingAttrs(topic string) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("messaging.system", "rocketmq"),
		attribute.String("messaging.destination.name", topic),
	}
}

// startConsume starts the "rocketmq consume" span of m, the child of the trace context m
// carries; the returned ctx carries the span. The txkit id is added once m is decoded. The
// attributes are set once the span has started, and only when it records: a message that is not
// traced builds none.
func (c *Consumer) startConsume(ctx context.Context, m *primitive.MessageExt) (context.Context, trace.Span) {
	if m.GetProperty(PropertyTraceParent) != "" {
		ctx = obs.Propagator().Extract(ctx, propertyCarrier{&m.Message})
	}
	ctx, span := c.tracer.Start(ctx, "rocketmq consume", trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(messagingAttrs(c.topic)...)
		span.SetAttributes(
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.consumer.group.name", c.group),
			attribute.String("txkit.mq_msg_id", m.MsgId),
			attribute.Int("messaging.rocketmq.message.reconsume_times", int(m.ReconsumeTimes)),
		)
	}
	return ctx, span
}

// startSend starts the "rocketmq send" span of a [TxProducer.Send] of msg, the child of ctx's
// span; the returned ctx carries it.
func (p *TxProducer) startSend(ctx context.Context, msg message.Message) (context.Context, trace.Span) {
	return p.tracer.Start(ctx, "rocketmq send", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(messagingAttrs(msg.Topic)...),
		trace.WithAttributes(
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.rocketmq.client_group", p.group),
			attribute.String("messaging.rocketmq.message.type", "transaction"),
			attribute.String("messaging.message.id", msg.ID.String()),
		))
}

// startLocal starts the "rocketmq local transaction" span, the child of the send span ctx carries.
func (p *TxProducer) startLocal(ctx context.Context, id uuid.UUID) (context.Context, trace.Span) {
	return p.tracer.Start(ctx, "rocketmq local transaction",
		trace.WithAttributes(attribute.String("messaging.message.id", id.String())))
}

// startCheckBack starts the "rocketmq check-back" span of the half message m, the child of the
// trace context m carries (the Send's span, possibly in a process that has died since), or a
// new trace when it carries none; the returned ctx, derived from ctx, carries the span.
func (p *TxProducer) startCheckBack(ctx context.Context, m *primitive.MessageExt) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(messagingAttrs(m.Topic)...),
		trace.WithAttributes(
			attribute.String("messaging.rocketmq.client_group", p.group),
			attribute.String("txkit.mq_msg_id", m.MsgId),
			attribute.String("messaging.message.id", m.GetProperty(PropertyTxID)),
		),
	}
	// ctx descends from NewTxProducer's ctx, whose span (if any) has nothing to do with m.
	if sc := trace.SpanContextFromContext(obs.Propagator().Extract(context.Background(), propertyCarrier{&m.Message})); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	return p.tracer.Start(ctx, "rocketmq check-back", opts...)
}

// messageContext returns ctx carrying the trace context m's properties carry (ctx unchanged
// when they carry none), for the log lines of a client callback that has no ctx of its own.
func messageContext(ctx context.Context, m *primitive.Message) context.Context {
	return obs.Propagator().Extract(ctx, propertyCarrier{m})
}

// failSpan records err on span and sets its status to Error, for a span that ends without an
// error to return (a poison message is acknowledged).
func failSpan(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
