package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/message"
)

// Handler applies one message in tx, the transaction in which the [Consumer] has just claimed the
// message's ID. Returning nil commits tx (the claim and the handler's writes together); returning
// an error rolls both back and has the message redelivered, unless the error wraps [ErrPoison].
// ctx ends after 1 min, when tx is rolled back and the message redelivered; it does not end when
// [Consumer.Run]'s ctx does, so that a handler in flight can finish; it carries the "rocketmq consume" span (see [WithTelemetry]).
// The handler must not commit or roll back tx.
type Handler func(ctx context.Context, tx pgx.Tx, msg message.Message) error

// Consumer applies the messages of one topic exactly once to PostgreSQL: a push consumer in a
// RocketMQ consumer group receives them at least once, and each is applied in a transaction that
// first claims its txkit ID ([PropertyID]) in an [idempotency.Store] (scope = the group). A
// message already claimed is committed and acknowledged without effect (a duplicate). A message
// over [MaxMessageSize], undecodable, or whose handler error wraps [ErrPoison] is logged and
// acknowledged without being applied (poison). On any other error (claim, handler, commit,
// timeout, panic) the transaction rolls back and the message is redelivered — through the group's
// retry topic, or in place with [WithOrderly] — and after [WithRedelivery]'s maxTimes goes to
// %DLQ%<group>. Without [WithOrderly], messages are applied concurrently, in no order, even those
// of one key. Create the group's retry topic ahead ([EnsureTopic] with [WithRetryTopicsFor]), or a
// new group's first redeliveries wait up to 30 s (docs/outbox.md).
//
// A Consumer is safe for concurrent use; [Consumer.Run] runs at most once at a time.
type Consumer struct {
	ns      []string
	group   string
	topic   string
	pool    *pgxpool.Pool
	store   *idempotency.Store
	handler Handler
	o       consumerOptions
	log     *slog.Logger
	running atomic.Bool
	m       *consumerMetrics
	tracer  trace.Tracer
	fails   *obs.LogLimiter // the "message failed" lines: one per obs.LogInterval

	applied, duplicates, failed, poison atomic.Int64
}

// Stats counts what a [Consumer] did since it was created, over all its runs.
type Stats struct {
	Applied    int64 // messages whose handler committed
	Duplicates int64 // messages acknowledged because their ID was already claimed
	Failed     int64 // attempts that failed and asked for a redelivery
	Poison     int64 // messages acknowledged without being applied: undecodable, or ErrPoison
}

// NewConsumer returns a Consumer of topic in consumer group group. It checks its arguments and
// does no I/O; [Consumer.Run] connects. The store's table must exist ([idempotency.Store.Migrate]).
// It returns an error wrapping [ErrInvalidOption] for bad arguments or options.
func NewConsumer(nameservers []string, group, topic string, pool *pgxpool.Pool, store *idempotency.Store,
	handler Handler, opts ...ConsumerOption) (*Consumer, error) {
	if err := checkNameservers(nameservers); err != nil {
		return nil, err
	}
	if err := checkName("group", group, maxGroupLen); err != nil {
		return nil, err
	}
	if err := checkName("topic", topic, maxTopicLen); err != nil {
		return nil, err
	}
	if pool == nil || store == nil || handler == nil {
		return nil, fmt.Errorf("rocketmq: consumer %s: nil pool, store or handler: %w", group, ErrInvalidOption)
	}
	o, err := buildConsumerOptions(opts)
	if err != nil {
		return nil, err
	}
	m, err := newConsumerMetrics(o.reg)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: consumer %s: %w", group, err)
	}
	return &Consumer{
		ns: append([]string(nil), nameservers...), group: group, topic: topic,
		pool: pool, store: store, handler: handler, o: o, m: m,
		log:    o.log.With("group", group, "topic", topic),
		tracer: obs.TracerProvider(o.tp).Tracer(tracerName),
		fails:  obs.NewLogLimiter(obs.LogInterval, nil),
	}, nil
}

// Stats returns the Consumer's counters. It is safe to call at any time.
func (c *Consumer) Stats() Stats {
	return Stats{
		Applied:    c.applied.Load(),
		Duplicates: c.duplicates.Load(),
		Failed:     c.failed.Load(),
		Poison:     c.poison.Load(),
	}
}

// run is the state of one call of Run.
type run struct {
	ctx      context.Context // Run's ctx; handlers run under context.WithoutCancel(ctx)
	gate     sync.RWMutex    // orders "stopping" against inflight.Add
	stopping bool
	inflight sync.WaitGroup
	stopped  chan struct{} // closed once the push consumer has shut down
}

// Run starts a push consumer, subscribes it to the topic and applies messages until ctx ends.
// Then it stops taking new messages, waits for the handlers in flight (each bounded by 1 min),
// shuts the push consumer down and returns nil. Messages received but not yet handled are left
// unacknowledged and redelivered to the group later.
//
// It returns an error at once if the push consumer cannot start — in particular when the topic
// does not exist: rocketmq-client-go does not create topics for consumers (its Start fails with
// "route info not found"), so create it first with [EnsureTopic] — and [ErrRunning] if another Run of this Consumer
// is running.
//
// rocketmq-client-go v2.1.2 leaves some goroutines running after Shutdown (its issue #1147); Run
// waits for every goroutine of its own.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return fmt.Errorf("rocketmq: consumer %s on %s: %w", c.group, c.topic, ErrRunning)
	}
	defer c.running.Store(false)

	from := consumer.ConsumeFromLastOffset
	if c.o.fromFirst {
		from = consumer.ConsumeFromFirstOffset
	}
	pc, err := rmq.NewPushConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver(c.ns)),
		consumer.WithGroupName(c.group),
		consumer.WithInstance(instanceName("con")),
		consumer.WithConsumerModel(consumer.Clustering),
		consumer.WithConsumeFromWhere(from),
		consumer.WithConsumerOrder(c.o.orderly),
		consumer.WithMaxReconsumeTimes(int32(c.o.maxReconsume)),
		consumer.WithConsumeGoroutineNums(c.o.goroutines),
		consumer.WithConsumeMessageBatchMaxSize(1),
		consumer.WithCredentials(c.o.credentials),
	)
	if err != nil {
		return fmt.Errorf("rocketmq: consumer %s: new push consumer: %w", c.group, err)
	}
	r := &run{ctx: ctx, stopped: make(chan struct{})}
	if err := pc.Subscribe(c.topic, c.selector(), func(cbctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		return c.consume(r, cbctx, msgs)
	}); err != nil {
		return fmt.Errorf("rocketmq: consumer %s: subscribe %s: %w", c.group, c.topic, err)
	}
	// A failed Start shuts the push consumer down itself when it got that far (missing topic);
	// shutting down one that failed earlier would dereference its unset statistics.
	if err := pc.Start(); err != nil {
		return fmt.Errorf("rocketmq: consumer %s: start on %s: %w", c.group, c.topic, err)
	}
	c.log.InfoContext(ctx, "rocketmq: consumer started", "orderly", c.o.orderly)

	flush := time.NewTicker(obs.LogInterval) // writes the last "message failed" line held back
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			waiting = false
		case <-flush.C:
			c.fails.Flush()
		}
	}
	flush.Stop()

	r.gate.Lock()
	r.stopping = true
	r.gate.Unlock()
	r.inflight.Wait()
	if err := pc.Shutdown(); err != nil {
		c.log.WarnContext(ctx, "rocketmq: consumer shutdown", "err", err)
	}
	close(r.stopped)
	c.fails.FlushAll()
	c.log.InfoContext(ctx, "rocketmq: consumer stopped")
	return nil
}

// selector is the subscription's filter: every message, or those whose tag matches WithTagExpression.
func (c *Consumer) selector() consumer.MessageSelector {
	if c.o.tagExpression == "" || c.o.tagExpression == "*" {
		return consumer.MessageSelector{}
	}
	return consumer.MessageSelector{Type: consumer.TAG, Expression: c.o.tagExpression}
}

// consume is the push consumer's callback. It is never called with more than one message (batch
// size 1) but handles any number.
func (c *Consumer) consume(r *run, cbctx context.Context, msgs []*primitive.MessageExt) (consumer.ConsumeResult, error) {
	retry := consumer.ConsumeRetryLater
	if c.o.orderly {
		retry = consumer.SuspendCurrentQueueAMoment
		// The client's own default is -1 ms: an immediate retry in a tight loop.
		if oc, ok := primitive.GetOrderlyCtx(cbctx); ok {
			oc.SuspendCurrentQueueTimeMillis = int(c.o.orderlyRetry / time.Millisecond)
		}
	} else if cc, ok := primitive.GetConcurrentlyCtx(cbctx); ok {
		cc.DelayLevelWhenNextConsume = c.o.retryDelayLevel
	}

	r.gate.RLock()
	if r.stopping {
		r.gate.RUnlock()
		// Hold the message until the push consumer has dropped its queues: then the client
		// ignores this result, leaves the offset where it is and the message is redelivered
		// after a restart. Returning earlier would send it through the retry topic.
		<-r.stopped
		return retry, errors.New("rocketmq: consumer stopping")
	}
	r.inflight.Add(1)
	r.gate.RUnlock()
	defer r.inflight.Done()

	for _, m := range msgs {
		if err := c.handle(r.ctx, m); err != nil {
			c.failed.Add(1)
			c.m.retry.Inc()
			// Never ConsumeSuccess with an error: the client acknowledges by the result alone and only
			// logs the error, so (ConsumeSuccess, err) would acknowledge a failed message.
			return retry, err
		}
	}
	return consumer.ConsumeSuccess, nil
}

// handle applies one message; a nil error acknowledges it. Its log lines carry the message's
// span in their ctx.
func (c *Consumer) handle(runCtx context.Context, m *primitive.MessageExt) (err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), c.o.handlerTimeout)
	defer cancel()
	ctx, span := c.startConsume(ctx, m)
	defer func() { obs.EndSpan(span, err) }()

	if size := messageSize(m); size > c.o.maxMessageSize {
		perr := fmt.Errorf("%w: %d bytes of body and properties, more than %d", ErrPoison, size, c.o.maxMessageSize)
		c.poison.Add(1)
		c.m.poison.Inc()
		c.log.ErrorContext(ctx, "rocketmq: oversized message acknowledged without being applied",
			"mq_msg_id", m.MsgId, "queue_id", m.Queue.QueueId, "queue_offset", m.QueueOffset, "err", perr)
		failSpan(span, perr)
		return nil
	}
	msg, err := decode(m)
	if err != nil {
		perr := fmt.Errorf("%w: %w", ErrPoison, err)
		c.poison.Add(1)
		c.m.poison.Inc()
		c.log.ErrorContext(ctx, "rocketmq: undecodable message acknowledged without being applied",
			"mq_msg_id", m.MsgId, "keys", m.GetKeys(), "queue_id", m.Queue.QueueId, "queue_offset", m.QueueOffset,
			"err", perr)
		failSpan(span, perr)
		return nil
	}
	id := msg.ID.String()
	recording := span.IsRecording()
	if recording {
		span.SetAttributes(attribute.String("messaging.message.id", id))
	}

	start := time.Now()
	dup, err := c.apply(ctx, msg, id)
	c.m.handler.Observe(time.Since(start).Seconds())
	if recording {
		span.SetAttributes(attribute.Bool("txkit.duplicate", dup))
	}
	switch {
	case errors.Is(err, ErrPoison):
		c.poison.Add(1)
		c.m.poison.Inc()
		c.log.ErrorContext(ctx, "rocketmq: poison message acknowledged without being applied", "msg_id", msg.ID,
			"mq_msg_id", m.MsgId, "err", err)
		failSpan(span, err)
		return nil
	case err != nil:
		// One line per interval, with the count of those held back: while PostgreSQL or what the
		// handler calls is away, every message fails.
		c.fails.Log(ctx, c.log, "", slog.LevelWarn, "rocketmq: message failed, redelivering later", slog.String("msg_id", msg.ID.String()),
			slog.String("mq_msg_id", m.MsgId), slog.Int("reconsume_times", int(m.ReconsumeTimes)), slog.Any("err", err))
		return err
	case dup:
		c.duplicates.Add(1)
		c.m.duplicate.Inc()
		c.log.DebugContext(ctx, "rocketmq: duplicate acknowledged", "msg_id", msg.ID, "mq_msg_id", m.MsgId)
	default:
		c.applied.Add(1)
		c.m.handled.Inc()
	}
	return nil
}

// messageSize is the size of m's body plus its properties' names and values.
func messageSize(m *primitive.MessageExt) int {
	n := len(m.Body)
	for k, v := range m.GetProperties() {
		n += len(k) + len(v)
	}
	return n
}

// apply claims msg.ID and runs the handler in one transaction; the begin rides with the claim
// (idempotency.Store.ClaimTx), so the claim costs no round trip of its own.
func (c *Consumer) apply(ctx context.Context, msg message.Message, id string) (dup bool, err error) {
	tx, first, err := c.store.ClaimTx(ctx, c.pool, c.group, id)
	if err != nil {
		return false, fmt.Errorf("rocketmq: consumer %s: message %s: %w", c.group, msg.ID, err)
	}
	defer func() {
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = tx.Rollback(rctx) // a broken connection is closed by pgx; the server rolls back
		}
	}()
	if first {
		if err := c.callHandler(ctx, tx, msg); err != nil {
			return false, fmt.Errorf("rocketmq: consumer %s: message %s: handler: %w", c.group, msg.ID, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("rocketmq: consumer %s: message %s: commit: %w", c.group, msg.ID, err)
	}
	return !first, nil
}

// callHandler turns a panic into an error: the client would recover it itself but then neither
// acknowledge nor redeliver the message, which would hold its queue's offset back for good.
func (c *Consumer) callHandler(ctx context.Context, tx pgx.Tx, msg message.Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return c.handler(ctx, tx, msg)
}
