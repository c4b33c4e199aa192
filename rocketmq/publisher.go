package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/txkit/txkit/message"
	"github.com/txkit/txkit/outbox"
)

// Publisher is the RocketMQ [outbox.Publisher]: it sends each message synchronously and returns
// once the broker has stored it. Messages with the same [message.Message].Key go to the same queue
// (by hash of the key over the topic's queues), also while that queue's broker group is away (a
// dead master of a multi-master cluster): its sends fail until the group is back, so that no key
// moves and per-key order holds (docs/production.md, "Brokers"); messages without a key are spread
// round robin over the queues of the current route. The message's ID becomes its RocketMQ key and the [PropertyID] property, its key
// the [PropertyKey] property, and each header a property of its own name ([PropertyHeaders] lists
// them). Headers may not use RocketMQ's reserved property names or the txkit_ prefix.
//
// Each Publisher runs its own rocketmq-client-go client (a unique instance name), so Publishers,
// [Consumer]s and [TxProducer]s in one process never share one. A Publisher is safe for
// concurrent use by multiple goroutines.
type Publisher struct {
	p      rmq.Producer
	o      publisherOptions
	log    *slog.Logger
	closed atomic.Bool
	once   sync.Once
	firsts firstSends // each topic's first send goes alone (firstsend.go)
}

var _ outbox.Publisher = (*Publisher)(nil)

// NewPublisher starts a producer on the name servers (host:port each) and returns the Publisher.
// It does not block on the network: the producer fetches a topic's route on the first Publish to
// it. ctx is checked but not kept. It returns an error wrapping [ErrInvalidOption] for bad
// arguments or options. Call [Publisher.Close] to stop the producer.
func NewPublisher(ctx context.Context, nameservers []string, opts ...PublisherOption) (*Publisher, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("rocketmq: new publisher: %w", err)
	}
	if err := checkNameservers(nameservers); err != nil {
		return nil, err
	}
	o, err := buildPublisherOptions(opts)
	if err != nil {
		return nil, err
	}
	p, err := rmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver(nameservers)),
		producer.WithGroupName(o.group),
		producer.WithInstanceName(instanceName("pub")),
		producer.WithRetry(o.retries),
		producer.WithSendMsgTimeout(o.sendTimeout),
		producer.WithQueueSelector(&keySelector{}),
		producer.WithCredentials(o.credentials),
	)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: new producer in group %s: %w", o.group, err)
	}
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("rocketmq: start producer in group %s: %w", o.group, err)
	}
	return &Publisher{p: p, o: o, log: o.log.With("group", o.group)}, nil
}

// Publish sends msg and blocks until the broker has stored it (nil), the send failed, or ctx or
// the [WithRetries] timeout ended. After an error the message may or may not have been stored:
// publish it again (consumers deduplicate by ID). Errors wrap [outbox.ErrInvalidMessage] for a
// message RocketMQ cannot carry (zero ID, bad topic name, reserved or malformed header),
// [ErrSendStatus] for a stored message whose status was not SEND_OK, [ErrClosed] after Close,
// and ctx's error when ctx ended. When ctx carries a span, its trace context travels in the
// [PropertyTraceParent] and [PropertyTraceState] properties. Publish is safe for concurrent use.
func (p *Publisher) Publish(ctx context.Context, msg message.Message) error {
	if p.closed.Load() {
		return fmt.Errorf("rocketmq: publish %s to %s: %w", msg.ID, msg.Topic, ErrClosed)
	}
	m, err := encode(msg)
	if err != nil {
		return err
	}
	injectTrace(ctx, m)
	return p.firsts.do(ctx, msg.Topic, func() error {
		return send(ctx, "publish", p.o.sendTimeout, msg, func(ctx context.Context) (*primitive.SendResult, error) {
			return p.p.SendSync(ctx, m)
		})
	})
}

// send runs one synchronous send bounded by timeout, and maps its outcome to an error. It never
// formats the client's SendResult with String(), which in rocketmq-client-go v2.1.2 panics on a nil
// or partial result (fixed upstream after that release).
func send(ctx context.Context, op string, timeout time.Duration, msg message.Message,
	fn func(context.Context) (*primitive.SendResult, error)) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("rocketmq: %s %s to %s: %w", op, msg.ID, msg.Topic, err)
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := fn(sctx)
	if err != nil {
		// The client reports a cancelled or expired ctx as its own "request timeout"; keep both.
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("rocketmq: %s %s to %s: %w: %w", op, msg.ID, msg.Topic, cerr, err)
		}
		if errors.Is(sctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("rocketmq: %s %s to %s: send timeout %v: %w: %w", op, msg.ID, msg.Topic, timeout, context.DeadlineExceeded, err)
		}
		return fmt.Errorf("rocketmq: %s %s to %s: %w", op, msg.ID, msg.Topic, err)
	}
	if res == nil {
		return fmt.Errorf("rocketmq: %s %s to %s: the client returned no result", op, msg.ID, msg.Topic)
	}
	if res.Status != primitive.SendOK {
		return fmt.Errorf("rocketmq: %s %s to %s: status %s: %w", op, msg.ID, msg.Topic, sendStatus(res.Status), ErrSendStatus)
	}
	return nil
}

func sendStatus(s primitive.SendStatus) string {
	switch s {
	case primitive.SendOK:
		return "SEND_OK"
	case primitive.SendFlushDiskTimeout:
		return "FLUSH_DISK_TIMEOUT"
	case primitive.SendFlushSlaveTimeout:
		return "FLUSH_SLAVE_TIMEOUT"
	case primitive.SendSlaveNotAvailable:
		return "SLAVE_NOT_AVAILABLE"
	case primitive.SendUnknownError:
		return "UNKNOWN_ERROR"
	}
	return "SendStatus(" + strconv.Itoa(int(s)) + ")"
}

// Close stops the producer. It is idempotent and always returns nil (the client's Shutdown reports
// nothing). Publish calls after Close return [ErrClosed]; calls in flight fail or complete.
// rocketmq-client-go v2.1.2 leaves some goroutines running after Shutdown (its issue #1147).
func (p *Publisher) Close() error {
	p.once.Do(func() {
		p.closed.Store(true)
		if err := p.p.Shutdown(); err != nil {
			p.log.Warn("rocketmq: producer shutdown", "err", err)
		}
	})
	return nil
}
