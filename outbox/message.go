package outbox

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Message is one message in the outbox: recorded in the caller's transaction by Enqueue, then
// delivered at least once by the Relay through a [Publisher].
type Message struct {
	// ID identifies the message everywhere: the outbox row, the broker's message key, the
	// consumer's idempotency key. Enqueue assigns it when it is zero. Duplicates carry the same ID.
	ID uuid.UUID
	// Topic is the broker topic the message goes to.
	Topic string
	// Key orders and groups messages: messages with the same key are delivered in the order they
	// were enqueued, and go to the same broker queue. Empty means no ordering.
	Key string
	// Body is the payload, delivered as is.
	Body []byte
	// Headers are delivered as message properties.
	Headers map[string]string
}

// Publisher delivers messages to a broker. Publish blocks until the broker has acknowledged msg
// (then it returns nil) or the send failed or ctx ended (then the message may or may not have
// been delivered: the relay will send it again, with the same ID). An error wrapping
// [ErrInvalidMessage] says the broker can never carry msg (a topic name it does not allow, say):
// the relay makes the message dead at once instead of retrying it. Implementations must be safe
// for concurrent use. Package github.com/txkit/txkit/rocketmq provides the RocketMQ one.
type Publisher interface {
	Publish(ctx context.Context, msg Message) error
}

// DBTX is what Enqueue and the operator functions need from the database: satisfied by pgx.Tx,
// *pgx.Conn and *pgxpool.Pool, so they run in the caller's transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
