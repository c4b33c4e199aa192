// Package outbox is txkit's transactional outbox: [Outbox.Enqueue] writes a message into a
// PostgreSQL table in the caller's transaction, so it exists if and only if the business change
// committed, and a [Relay] publishes it to a broker afterwards, at least once, with the same
// [Message.ID] every time (consumers deduplicate on it: package idempotency). Messages of one
// [Message.Key] are published in order. The relay publishes only while its [lock.Elector] leads,
// and fences its writes with the leadership's token ([fence.Fence]).
//
// Migrate once, enqueue in the business transaction, run one relay in every replica:
//
//	ob, err := outbox.New(pool, outbox.WithTable("orders", ""))
//	if err != nil {
//		return err
//	}
//	if err := ob.Migrate(ctx); err != nil {
//		return err
//	}
//	err = ob.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, `insert into orders.orders (id, total) values ($1, $2)`, id, total); err != nil {
//			return err
//		}
//		_, err := ob.Enqueue(ctx, tx, outbox.Message{Topic: "order-created", Key: id.String(), Body: body})
//		return err
//	})
//
//	// pub is a Publisher, e.g. from package rocketmq; el an Elector of any lock backend.
//	relay, err := outbox.NewRelay(ob, pub, outbox.WithElector(el), outbox.WithLogger(log))
//	if err != nil {
//		return err
//	}
//	return relay.Run(ctx) // blocks until ctx ends
//
// [Outbox.Do] commits and then hands the messages to this process's relay when it leads their
// partition (no NOTIFY in the transaction); [Outbox.Enqueue] in a transaction of the caller's own
// wakes the relay with a NOTIFY at its commit. How the relay reads, pipelines, retries, fences and splits into partitions ([WithPartitions],
// [WithElectors], [ContenderCount]), the message limits, metrics and tracing: docs/outbox.md,
// docs/metrics.md and docs/tracing.md.
package outbox
