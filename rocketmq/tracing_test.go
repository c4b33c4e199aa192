package rocketmq_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/message"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
	"github.com/txkit/txkit/tracelog"
)

// The trace of a business request runs on through the outbox, the relay and the broker to the
// consumer: a message enqueued in a transaction under a "business request" span is relayed by the
// outbox relay through the real broker and consumed, and the consumer's span has the request's
// trace id, with the relay's publish span (itself the request span's child) as its parent.
func TestIntegrationTraceOutboxToConsumer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tp, exp := inMemoryProvider(t)
	_, handled := tracedConsumer(t, e, tp)

	ob, err := outbox.New(e.pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, span := tp.Tracer("test").Start(t.Context(), "business request")
	err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Message{Topic: e.topic, Key: "order-1", Body: []byte("placed")})
		return err
	})
	span.End()
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	request := span.SpanContext()

	pub := newPublisher(t, e, rocketmq.WithTelemetry(nil, tp))
	relay, err := outbox.NewRelay(ob, pub, outbox.WithElector(zkenv.Elector(t, testenv.ZKRoot(t)+"/relay", "r1")),
		outbox.WithTelemetry(nil, tp), outbox.WithSchedule("@every 100ms", 128), outbox.WithLogger(e.log))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, relay.Run)

	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool { return len(handled()) > 0 },
		"the message was not consumed")

	publish := spanNamed(t, exp, "outbox relay publish")
	consume := spanNamed(t, exp, "rocketmq consume")
	if publish.SpanContext.TraceID() != request.TraceID() || publish.Parent.SpanID() != request.SpanID() {
		t.Errorf("publish span: trace %s parent %s, want the request's trace %s and the request span %s",
			publish.SpanContext.TraceID(), publish.Parent.SpanID(), request.TraceID(), request.SpanID())
	}
	if consume.SpanContext.TraceID() != request.TraceID() {
		t.Errorf("consumer span trace %s, want the request's %s", consume.SpanContext.TraceID(), request.TraceID())
	}
	if consume.Parent.SpanID() != publish.SpanContext.SpanID() || !consume.Parent.IsRemote() {
		t.Errorf("consumer span parent %s (remote %v), want the publish span %s",
			consume.Parent.SpanID(), consume.Parent.IsRemote(), publish.SpanContext.SpanID())
	}
	if consume.SpanKind != trace.SpanKindConsumer {
		t.Errorf("consumer span kind %v", consume.SpanKind)
	}
	if h := handled(); h[0].SpanID() != consume.SpanContext.SpanID() {
		t.Errorf("the handler's ctx carries span %s, want the consumer span %s", h[0].SpanID(), consume.SpanContext.SpanID())
	}
}

// tracedConsumer runs a Consumer with tracer provider tp until the test ends; handled returns
// the span contexts its handler's ctx carried.
func tracedConsumer(t *testing.T, e *env, tp trace.TracerProvider) (c *rocketmq.Consumer, handled func() []trace.SpanContext) {
	t.Helper()
	var (
		mu    sync.Mutex
		spans []trace.SpanContext
	)
	c = newConsumer(t, e, group(t, "trace"), func(ctx context.Context, tx pgx.Tx, msg message.Message) error {
		mu.Lock()
		spans = append(spans, trace.SpanContextFromContext(ctx))
		mu.Unlock()
		return nil
	}, rocketmq.WithTelemetry(nil, tp))
	run(t, c)
	return c, func() []trace.SpanContext {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(spans)
	}
}

func spanNamed(t *testing.T, exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	// A span is exported when it ends, which may come after what the test waited for (the consume
	// span ends after the handler's transaction commits): wait for it.
	var found tracetest.SpanStub
	testenv.Eventually(t, waitFor, 10*time.Millisecond, func() bool {
		spans := exp.GetSpans()
		i := slices.IndexFunc(spans, func(s tracetest.SpanStub) bool { return s.Name == name })
		if i >= 0 {
			found = spans[i]
		}
		return i >= 0
	}, "no span %q ended", name)
	return found
}

// requestSpan starts a "business request" span of tp; the test ends it.
func requestSpan(t *testing.T, tp trace.TracerProvider) (context.Context, trace.SpanContext) {
	t.Helper()
	ctx, span := tp.Tracer("test").Start(t.Context(), "business request")
	t.Cleanup(func() { span.End() })
	return ctx, span.SpanContext()
}

func inMemoryProvider(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// A transactional Send continues the caller's trace: its "rocketmq send" span is the request
// span's child, the local transaction's span (which localTx's ctx carries) is the send span's
// child, and the consumer's span, through the real broker, is the send span's remote child.
func TestIntegrationTraceTxSendToConsumer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	createUsers(t, e)
	tp, exp := inMemoryProvider(t)

	c, handled := tracedConsumer(t, e, tp)
	p := newTxProducer(t, e, group(t, "txp"), rocketmq.WithTelemetry(nil, tp))

	ctx, request := requestSpan(t, tp)
	var local trace.SpanContext
	user := uuid.New()
	err := p.Send(ctx, message.Message{ID: uuid.New(), Topic: e.topic, Key: "k", Body: []byte("traced")},
		func(ctx context.Context, tx pgx.Tx) error {
			local = trace.SpanContextFromContext(ctx)
			return insertUser(user)(ctx, tx)
		})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool { return c.Stats().Applied == 1 },
		"the message arrives (stats %+v)", c.Stats())

	send := spanNamed(t, exp, "rocketmq send")
	localTx := spanNamed(t, exp, "rocketmq local transaction")
	consume := spanNamed(t, exp, "rocketmq consume")
	if send.SpanContext.TraceID() != request.TraceID() || send.Parent.SpanID() != request.SpanID() {
		t.Errorf("send span: trace %s parent %s, want the request's trace %s and the request span %s",
			send.SpanContext.TraceID(), send.Parent.SpanID(), request.TraceID(), request.SpanID())
	}
	if send.SpanKind != trace.SpanKindProducer || send.Status.Code != codes.Unset {
		t.Errorf("send span kind %v status %v", send.SpanKind, send.Status)
	}
	if localTx.Parent.SpanID() != send.SpanContext.SpanID() || local.SpanID() != localTx.SpanContext.SpanID() {
		t.Errorf("local transaction span %s (parent %s); localTx's ctx carried %s; the send span is %s",
			localTx.SpanContext.SpanID(), localTx.Parent.SpanID(), local.SpanID(), send.SpanContext.SpanID())
	}
	if consume.SpanContext.TraceID() != request.TraceID() {
		t.Errorf("consumer span trace %s, want the request's %s", consume.SpanContext.TraceID(), request.TraceID())
	}
	if consume.Parent.SpanID() != send.SpanContext.SpanID() || !consume.Parent.IsRemote() {
		t.Errorf("consumer span parent %s (remote %v), want the send span %s",
			consume.Parent.SpanID(), consume.Parent.IsRemote(), send.SpanContext.SpanID())
	}
	if h := handled(); h[0].SpanID() != consume.SpanContext.SpanID() {
		t.Errorf("the handler's ctx carries span %s, want the consumer span %s", h[0].SpanID(), consume.SpanContext.SpanID())
	}
}

// A check-back is in the trace of the Send that left the half message, even when the producer
// that sent it has closed and another producer of the group — here with a tracer provider and
// exporter of its own, as another process would have — answers it: the check-back span is the
// remote child of the send span, and the consumer span too.
func TestIntegrationTraceTxCheckBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	createUsers(t, e)
	sender, senderExp := inMemoryProvider(t)
	answerer, answererExp := inMemoryProvider(t)

	c := newConsumer(t, e, group(t, "txc"), (&recorder{}).handler(nil), rocketmq.WithTelemetry(nil, sender))
	run(t, c)
	g := group(t, "txp")
	dying := startTxProducer(t, e, rocketmq.NewWithheldTxProducer, g, rocketmq.WithTelemetry(nil, sender))
	newTxProducer(t, e, g, rocketmq.WithTelemetry(nil, answerer)) // the survivor, which answers the check-back

	ctx, request := requestSpan(t, sender)
	if err := dying.Send(ctx, message.Message{ID: uuid.New(), Topic: e.topic, Body: []byte("checked back")}, insertUser(uuid.New())); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if err := dying.Close(); err != nil { // the second phase was withheld: only a check-back delivers it
		t.Fatal(err)
	}
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool { return c.Stats().Applied == 1 },
		"the message arrives through a check-back (stats %+v)", c.Stats())

	send := spanNamed(t, senderExp, "rocketmq send")
	if send.SpanContext.TraceID() != request.TraceID() {
		t.Fatalf("send span trace %s, want the request's %s", send.SpanContext.TraceID(), request.TraceID())
	}
	var committed int
	for _, s := range answererExp.GetSpans() {
		if s.Name != "rocketmq check-back" {
			continue
		}
		if s.Parent.SpanID() != send.SpanContext.SpanID() || !s.Parent.IsRemote() || s.SpanContext.TraceID() != request.TraceID() {
			t.Errorf("check-back span: trace %s parent %s (remote %v), want the request's trace %s and the send span %s",
				s.SpanContext.TraceID(), s.Parent.SpanID(), s.Parent.IsRemote(), request.TraceID(), send.SpanContext.SpanID())
		}
		if slices.Contains(s.Attributes, attribute.String("txkit.checkback.result", "commit")) {
			committed++
		}
	}
	if committed != 1 {
		t.Errorf("%d check-back spans answered commit in the surviving producer, want 1 (spans: %v)", committed, answererExp.GetSpans())
	}
	consume := spanNamed(t, senderExp, "rocketmq consume")
	if consume.SpanContext.TraceID() != request.TraceID() || consume.Parent.SpanID() != send.SpanContext.SpanID() {
		t.Errorf("consumer span: trace %s parent %s, want the request's trace %s and the send span %s",
			consume.SpanContext.TraceID(), consume.Parent.SpanID(), request.TraceID(), send.SpanContext.SpanID())
	}
}

// The consumer's log lines carry the trace: with a logger whose handler is tracelog.Handler, the
// line of a failed attempt has the trace id of the request that published the message and the
// span id of that attempt's "rocketmq consume" span.
func TestIntegrationTraceConsumeLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tp, exp := inMemoryProvider(t)
	var logs logBuffer
	log := slog.New(tracelog.Handler(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("consumer log:\n%s", logs.String())
		}
	})

	c := newConsumer(t, e, group(t, "trace"), (&recorder{}).handler(func(_ message.Message, n int) error {
		if n == 1 {
			return errBoom
		}
		return nil
	}), rocketmq.WithTelemetry(nil, tp), rocketmq.WithLogger(log), rocketmq.WithRedelivery(16, 1))
	run(t, c)
	pub := newPublisher(t, e)
	ctx, request := requestSpan(t, tp)
	if err := pub.Publish(ctx, message.Message{ID: uuid.New(), Topic: e.topic, Body: []byte("fails once")}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool { return c.Stats().Applied == 1 },
		"the message is applied on its second attempt (stats %+v)", c.Stats())

	var line struct{ TraceID, SpanID string }
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "message failed, redelivering later") {
			var v map[string]any
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
			line.TraceID, _ = v["trace_id"].(string)
			line.SpanID, _ = v["span_id"].(string)
		}
	}
	if line.TraceID != request.TraceID().String() {
		t.Fatalf("the failed attempt's log line has trace_id %q, want the request's %s", line.TraceID, request.TraceID())
	}
	var failed []string
	for _, s := range exp.GetSpans() {
		if s.Name == "rocketmq consume" && s.Status.Code == codes.Error {
			failed = append(failed, s.SpanContext.SpanID().String())
		}
	}
	if len(failed) != 1 || failed[0] != line.SpanID {
		t.Errorf("the failed attempt's log line has span_id %q, want the failed consume span's (%v)", line.SpanID, failed)
	}
}
