package rocketmq_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/testenv"
	"github.com/txkit/txkit/message"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

// The trace of a business request runs on through the outbox, the relay and the broker to the
// consumer: a message enqueued in a transaction under a "business request" span is relayed by the
// outbox relay through the real broker and consumed, and the consumer's span has the request's
// trace id, with the relay's publish span (itself the request span's child) as its parent.
func TestIntegrationTraceOutboxToConsumer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	var (
		mu      sync.Mutex
		handled []trace.SpanContext
	)
	c := newConsumer(t, e, group(t, "trace"), func(ctx context.Context, tx pgx.Tx, msg message.Message) error {
		mu.Lock()
		handled = append(handled, trace.SpanContextFromContext(ctx))
		mu.Unlock()
		return nil
	}, rocketmq.WithTracerProvider(tp))
	run(t, c)

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

	pub := newPublisher(t, e, rocketmq.WithTracerProvider(tp))
	relay, err := outbox.NewRelay(ob, pub, outbox.WithElector(testenv.Elector(t, testenv.ZKRoot(t)+"/relay", "r1")),
		outbox.WithTracerProvider(tp), outbox.WithSchedule("@every 100ms"), outbox.WithLogger(e.log))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, relay.Run)

	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) > 0
	}, "the message was not consumed")

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
	mu.Lock()
	if handled[0].SpanID() != consume.SpanContext.SpanID() {
		t.Errorf("the handler's ctx carries span %s, want the consumer span %s", handled[0].SpanID(), consume.SpanContext.SpanID())
	}
	mu.Unlock()
}

func spanNamed(t *testing.T, exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	spans := exp.GetSpans()
	i := slices.IndexFunc(spans, func(s tracetest.SpanStub) bool { return s.Name == name })
	if i < 0 {
		t.Fatalf("no span %q among %d", name, len(spans))
	}
	return spans[i]
}
