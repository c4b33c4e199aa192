// Package rocketmq is txkit's RocketMQ adapter (rocketmq-client-go v2.1.2, the Remoting protocol
// of RocketMQ 4.x and 5.x brokers): it carries messages over RocketMQ and applies them exactly
// once on the other side.
//
//   - [Publisher] is the [outbox.Publisher] the relay sends through: synchronous sends, the same
//     queue for the same key.
//   - [Consumer] applies a topic's messages to PostgreSQL, each in a transaction that first claims
//     the message's ID in an [idempotency.Store]: duplicates are acknowledged without effect,
//     failures redelivered, then dead-lettered to %DLQ%<group>.
//   - [TxProducer] sends transactional (half) messages tied to a local PostgreSQL transaction,
//     the alternative to an outbox table; the broker's check-backs are answered from that table.
//
// A message's identity is its txkit ID ([message.Message].ID, sent as the RocketMQ KEYS and the
// [PropertyID] property), never the broker's msgId, which changes when a message is sent again.
//
//	pub, err := rocketmq.NewPublisher(ctx, nameservers)
//	if err != nil { return err }
//	defer pub.Close()
//	relay, err := outbox.NewRelay(ob, pub, outbox.WithElector(el))
//
//	c, err := rocketmq.NewConsumer(nameservers, "points-award", "user-registered", pool, store,
//		func(ctx context.Context, tx pgx.Tx, msg message.Message) error {
//			_, err := tx.Exec(ctx, `update accounts set points = points + 100 where id = $1`, msg.Key)
//			return err // nil commits the claim and the update together; an error redelivers
//		})
//	if err != nil { return err }
//	g.Go(func() error { return c.Run(ctx) })
//
// A program's main sets the client's process-wide logger and panic hook ([SetClientLogger]); the
// package never does. Topics, instance names, ACL, the servers that must be trusted, transactional
// messages, metrics and tracing: docs/outbox.md, docs/security.md, docs/metrics.md,
// docs/tracing.md.
package rocketmq
