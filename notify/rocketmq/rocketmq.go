// Package rocketmq feeds a notify.Notifier from a RocketMQ topic: each message becomes a
// notification, enqueued in the transaction in which the outbox/rocketmq Consumer has claimed the
// message's id, so a redelivered message enqueues nothing twice.
//
//	c, err := obrocketmq.NewConsumer(nameservers, "notifier", "recharge-results", pool, store,
//		rocketmq.Handler(notifier, rocketmq.JSON))
//	go c.Run(ctx)
//
// The messages' producers need not know the notifier's tables: they publish a result, and the
// notifier delivers it to the receiver on its schedule.
package rocketmq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/notify"
	"github.com/txkit/txkit/outbox"
	obrocketmq "github.com/txkit/txkit/outbox/rocketmq"
)

// Decode turns a message into the notification to enqueue.
type Decode func(msg outbox.Message) (notify.Notification, error)

// JSON decodes a message whose body is {"receiver": ..., "key": ..., "payload": {...}}. The
// notification's id is the message's id, so the notification can be traced to the message.
func JSON(msg outbox.Message) (notify.Notification, error) {
	var b struct {
		Receiver string          `json:"receiver"`
		Key      string          `json:"key"`
		Payload  json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(msg.Body, &b); err != nil {
		return notify.Notification{}, fmt.Errorf("notify/rocketmq: message %s: %w", msg.ID, err)
	}
	return notify.Notification{ID: msg.ID, Receiver: b.Receiver, Key: b.Key, Payload: b.Payload}, nil
}

// Handler returns the Consumer handler that enqueues each message's notification with n, in the
// consumer's transaction. A message that does not decode, or decodes to a notification n refuses
// (unknown receiver, bad key or payload), wraps obrocketmq.ErrPoison: it is logged and
// acknowledged, never retried. Any other failure rolls back and the message is redelivered.
func Handler(n *notify.Notifier, decode Decode) obrocketmq.Handler {
	return func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
		nt, err := decode(msg)
		if err != nil {
			return fmt.Errorf("%w: %w", obrocketmq.ErrPoison, err)
		}
		if _, err := n.Enqueue(ctx, tx, nt); err != nil {
			if errors.Is(err, notify.ErrInvalidNotification) {
				return fmt.Errorf("%w: %w", obrocketmq.ErrPoison, err)
			}
			return err
		}
		return nil
	}
}
