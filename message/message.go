// Package message holds [Message], the message txkit sends through a broker, shared by the
// patterns that send one: the outbox (outbox.Outbox.Enqueue records it, its relay publishes it),
// transactional messages (rocketmq.TxProducer.Send) and the consumers that apply it
// (rocketmq.Consumer, notify/rocketmq). It lives in a package of its own so that none of those
// patterns owns it and none has to import another to name it; outbox.Message is an alias of it.
//
// The package has no dependencies beyond uuid and holds no behaviour: each sender validates a
// message against what its own store and broker can carry.
package message

import "github.com/google/uuid"

// Message is one message: recorded by a sender, delivered at least once, applied once by
// consumers that de-duplicate by [Message].ID.
type Message struct {
	// ID identifies the message everywhere: the outbox row, the broker's message key (RocketMQ's
	// KEYS and the txkit_id property), the consumer's idempotency key. Duplicates — a message
	// published again after a relay failover or a send retry — carry the same ID, while the
	// broker gives each copy a new message id of its own: consumers de-duplicate by ID, never by
	// the broker's message id. The outbox assigns it when it is zero.
	ID uuid.UUID
	// Topic is the broker topic the message goes to.
	Topic string
	// Key orders and groups messages: messages with the same key are delivered in the order they
	// were enqueued, and go to the same broker queue. Empty means no ordering.
	Key string
	// Tags is the message's RocketMQ tag (TAGS), the broker's server-side filter: a consumer
	// subscribed with a tag expression receives only the messages whose tag it names. Empty means
	// no tag. One tag per message, as RocketMQ has; it may not contain "||" (the expression
	// separator), bytes 0x01 or 0x02, nor begin or end with white space.
	Tags string
	// Body is the payload, delivered as is.
	Body []byte
	// Headers are delivered as message properties.
	Headers map[string]string
}
