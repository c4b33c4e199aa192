package rocketmq

import (
	"context"
	"log/slog"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/jackc/pgx/v5/pgxpool"
)

// NewWithheldTxProducer returns a TxProducer that commits the local transaction and then answers
// UNKNOW instead of COMMIT, so that the broker delivers the message only after a check-back. For
// tests of the check-back path; production code has no such switch.
func NewWithheldTxProducer(ctx context.Context, nameservers []string, group string, pool *pgxpool.Pool, opts ...TxProducerOption) (*TxProducer, error) {
	return newTxProducer(ctx, nameservers, group, pool, func(l primitive.TransactionListener) primitive.TransactionListener {
		return withheldListener{l}
	}, opts)
}

type withheldListener struct{ primitive.TransactionListener }

func (l withheldListener) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	if s := l.TransactionListener.ExecuteLocalTransaction(m); s != primitive.CommitMessageState {
		return s
	}
	return primitive.UnknowState
}

// Encode and Decode expose the codec to the external test package.
var (
	Encode = encode
	Decode = decode
)

// NewKeySelector returns the queue selector Publisher and TxProducer use.
func NewKeySelector() interface {
	Select(*primitive.Message, []*primitive.MessageQueue, string) *primitive.MessageQueue
} {
	return &keySelector{}
}

// ProbeProperty marks a message keySelector refuses to place.
const ProbeProperty = probeProperty

// NewRlogAdapterAt returns the adapter of NewRlogAdapter reading the time from now, so that a
// test can end the interval of its repeated lines.
func NewRlogAdapterAt(l *slog.Logger, level slog.Level, now func() time.Time) rlog.Logger {
	return newRlogAdapter(l, level, now)
}

// MaxMessageSizeForTest sets the largest message a Consumer accepts (default MaxMessageSize).
func MaxMessageSizeForTest(n int) ConsumerOption {
	return consumerOption(func(o *consumerOptions) { o.maxMessageSize = n })
}

// GroupForTest sets a Publisher's producer group (production uses "txkit-outbox").
func GroupForTest(name string) PublisherOption {
	return publisherOption(func(o *publisherOptions) { o.group = name })
}

// HandlerTimeoutForTest sets the bound of a Consumer's per-message transaction (production: 1 min).
func HandlerTimeoutForTest(d time.Duration) ConsumerOption {
	return consumerOption(func(o *consumerOptions) { o.handlerTimeout = d })
}

// CheckGraceForTest sets the age after which a TxProducer's check-back rolls back a half message
// without a committed local transaction (production: 10 s), so that tests see it sooner.
func CheckGraceForTest(d time.Duration) TxProducerOption {
	return txProducerOption(func(o *txProducerOptions) { o.checkGrace = d })
}

// TableForTest sets a TxProducer's table of transaction ids (production: "txkit_rmq_tx").
func TableForTest(name string) TxProducerOption {
	return txProducerOption(func(o *txProducerOptions) { o.table = name })
}

// QueuesForTest sets the queues EnsureTopic gives a topic it creates (production:
// DefaultTopicQueues).
func QueuesForTest(n int) TopicOption {
	return topicOption(func(o *topicOptions) { o.queues = n })
}

// HandleForTest applies m as the push consumer's callback would, without a running push consumer.
func (c *Consumer) HandleForTest(ctx context.Context, m *primitive.MessageExt) error {
	return c.handle(ctx, m)
}
