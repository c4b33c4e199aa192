// Package rocketmq feeds a notify.Notifier from a RocketMQ topic: each message becomes a
// notification, enqueued in the transaction in which the rocketmq Consumer has claimed the
// message's id, so a redelivered message enqueues nothing twice.
//
// Whoever can write to the topic chooses the receiver a message names, and the notifier signs
// what it delivers: so the intake accepts only the receivers it is told to ([WithReceivers]), and
// building it without saying which is refused, unless WithReceivers("*") says every receiver of
// the notifier is fair game. [WithProducerSecrets] requires, besides, that each message carries its
// producer's HMAC over the body ([SignMessage]), with a secret the producers share with the
// intake. A message that breaks either rule is poison: logged, acknowledged, never enqueued.
//
//	h, err := rocketmq.NewHandler(notifier, rocketmq.JSON, rocketmq.WithReceivers("shop"),
//		rocketmq.WithProducerSecrets(producerSecret))
//	c, err := obrocketmq.NewConsumer(nameservers, "notifier", "recharge-results", pool, store, h,
//		obrocketmq.WithCredentials(accessKey, secretKey), // the broker's ACL, where it is on
//		obrocketmq.WithLogger(log))
//	go c.Run(ctx)
//
// and a producer:
//
//	pub, err := obrocketmq.NewPublisher(ctx, nameservers, obrocketmq.WithCredentials(producerKey, producerSecretKey))
//	err = pub.Publish(ctx, rocketmq.SignMessage(producerSecret, message.Message{ID: uuid.New(),
//		Topic: "recharge-results", Body: []byte(`{"receiver":"shop","key":"order-42","payload":{"amount":100}}`)}))
//
// The consumer is the caller's: its options are obrocketmq's, so RocketMQ ACL credentials
// (obrocketmq.WithCredentials, for the Consumer as for the producers' Publisher or TxProducer)
// are passed like any other option. With ACL on, let only the producers that may ask for
// notifications write to the topic. The broker and name server network must be trusted all the
// same (docs/security.md): ACLs decide who may write to the topic, the allow-list and the
// producer's HMAC what a message may ask for.
//
// The messages' producers need not know the notifier's tables: they publish a result, and the
// notifier delivers it to the receiver on its schedule.
package rocketmq

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/signing"
	"github.com/txkit/txkit/message"
	"github.com/txkit/txkit/notify"
	obrocketmq "github.com/txkit/txkit/rocketmq"
)

// HeaderSignature is the message header that carries the producer's signature of the body
// ([SignMessage]) when the intake requires one ([WithProducerSecrets]).
const HeaderSignature = "notify-signature"

// Decode turns a message into the notification to enqueue.
type Decode func(msg message.Message) (notify.Notification, error)

// JSON decodes a message whose body is {"receiver": ..., "key": ..., "payload": {...}}. The
// notification's id is the message's id, so the notification can be traced to the message.
func JSON(msg message.Message) (notify.Notification, error) {
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

// Option configures the handler [NewHandler] builds.
type Option func(*options)

type options struct {
	receivers map[string]bool
	any       bool
	secrets   []string
}

// WithReceivers allows messages to name these receivers (and no other); it may be given more than
// once. A receiver must also be one of the notifier's. The name "*", alone, allows any receiver of
// the notifier: whoever can write to the topic can then have any of them told anything. Give it
// only when that is true of the topic (its ACL lets trusted producers write, or
// [WithProducerSecrets] is set).
func WithReceivers(names ...string) Option {
	return func(o *options) {
		for _, n := range names {
			if n == "*" {
				o.any = true
				continue
			}
			if o.receivers == nil {
				o.receivers = map[string]bool{}
			}
			o.receivers[n] = true
		}
	}
}

// WithProducerSecrets requires every message to carry, in [HeaderSignature], its producer's
// signature of the body ([SignMessage]) with one of secrets (two during a key rotation; each at
// least 16 bytes).
func WithProducerSecrets(secrets ...string) Option {
	return func(o *options) { o.secrets = append([]string(nil), secrets...) }
}

// SignMessage returns msg with its body's signature, keyed by secret, in [HeaderSignature]: what a
// producer publishes to an intake built [WithProducerSecrets]. msg's headers are copied, not
// changed.
func SignMessage(secret string, msg message.Message) message.Message {
	h := make(map[string]string, len(msg.Headers)+1)
	maps.Copy(h, msg.Headers)
	h[HeaderSignature] = signBody(secret, msg.Body)
	msg.Headers = h
	return msg
}

// signBody is the HMAC-SHA256 of body under secret, in a domain of its own (no HTTP request or
// answer signs the same way).
func signBody(secret string, body []byte) string {
	return signing.Sign(secret, 0, "MESSAGE", "notify/rocketmq", body)
}

func (o options) verify(msg message.Message) error {
	if len(o.secrets) == 0 {
		return nil
	}
	got := msg.Headers[HeaderSignature]
	for _, s := range o.secrets {
		if hmac.Equal([]byte(got), []byte(signBody(s, msg.Body))) {
			return nil
		}
	}
	return fmt.Errorf("notify/rocketmq: message %s: no valid %s: %w", msg.ID, HeaderSignature, ErrUnauthorized)
}

// NewHandler returns the Consumer handler that enqueues each message's notification with n, in
// the consumer's transaction. The receivers a message may name must be given ([WithReceivers]), or
// every receiver allowed explicitly (WithReceivers("*")): without either, or with both, or with an
// empty name or a short secret, it returns an error wrapping [ErrInvalidOption].
//
// A message that does not decode, names a receiver not allowed ([ErrNotAllowed]), lacks a valid
// producer signature when one is required ([ErrUnauthorized]), or decodes to a notification n
// refuses (unknown receiver, bad or oversized key or payload) wraps obrocketmq.ErrPoison: it is
// logged and acknowledged, never enqueued nor retried. Any other failure rolls back and the
// message is redelivered. The handler is safe for concurrent use.
func NewHandler(n *notify.Notifier, decode Decode, opts ...Option) (obrocketmq.Handler, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case n == nil || decode == nil:
		return nil, fmt.Errorf("notify/rocketmq: nil notifier or decode: %w", ErrInvalidOption)
	case o.any && o.receivers != nil:
		return nil, fmt.Errorf("notify/rocketmq: both named receivers and WithReceivers(\"*\"): %w", ErrInvalidOption)
	case !o.any && len(o.receivers) == 0:
		return nil, fmt.Errorf("notify/rocketmq: no receiver allowed: say which (WithReceivers) or allow any explicitly (WithReceivers(\"*\")): %w", ErrInvalidOption)
	case o.receivers[""]:
		return nil, fmt.Errorf("notify/rocketmq: empty receiver name: %w", ErrInvalidOption)
	}
	if o.secrets != nil {
		if err := signing.CheckSecrets(o.secrets); err != nil {
			return nil, fmt.Errorf("notify/rocketmq: producer secrets: %w: %w", err, ErrInvalidOption)
		}
	}
	return func(ctx context.Context, tx pgx.Tx, msg message.Message) error {
		if err := o.verify(msg); err != nil {
			return fmt.Errorf("%w: %w", obrocketmq.ErrPoison, err)
		}
		nt, err := decode(msg)
		if err != nil {
			return fmt.Errorf("%w: %w", obrocketmq.ErrPoison, err)
		}
		if !o.any && !o.receivers[nt.Receiver] {
			return fmt.Errorf("%w: notify/rocketmq: message %s names receiver %.64q, not one of %q: %w",
				obrocketmq.ErrPoison, msg.ID, nt.Receiver, slices.Sorted(maps.Keys(o.receivers)), ErrNotAllowed)
		}
		if _, err := n.Enqueue(ctx, tx, nt); err != nil {
			if errors.Is(err, notify.ErrInvalidNotification) {
				return fmt.Errorf("%w: %w", obrocketmq.ErrPoison, err)
			}
			return err
		}
		return nil
	}, nil
}
