// Package outbox is txkit's transactional outbox: a message is written into a PostgreSQL table in
// the same transaction as the business change that causes it ([Outbox.Enqueue]), so it exists if
// and only if the change committed, and a [Relay] publishes it to a broker afterwards, at least
// once, with the same [Message.ID] every time (consumers deduplicate on it, see the idempotency
// package).
//
// Enqueue checks every field against a limit ([MaxTopicLen], [MaxKeyLen], [MaxHeaders],
// [MaxHeaderNameLen], [MaxHeaderValueLen], [MaxHeadersSize], [WithMaxBodySize]) and refuses a
// message over one with an error wrapping [ErrTooLarge], before it writes anything. The limits
// keep every accepted message within what RocketMQ carries; topics are at most 127 bytes.
//
// The recipe: migrate once, enqueue in the business transaction, run one relay per process — they
// elect a leader in ZooKeeper, and only the leader publishes.
//
//	ob, err := outbox.New(pool, outbox.WithSchema("orders"))
//	if err != nil {
//		return err
//	}
//	if err := ob.Migrate(ctx); err != nil {
//		return err
//	}
//	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, `insert into orders.orders (id, total) values ($1, $2)`, id, total); err != nil {
//			return err
//		}
//		_, err := ob.Enqueue(ctx, tx, outbox.Message{Topic: "order-created", Key: id.String(), Body: body})
//		return err
//	})
//
//	// In every replica; pub is a Publisher, e.g. from package rocketmq (github.com/txkit/txkit/rocketmq).
//	el, err := lock.NewElector(sess, "/orders/outbox-relay", hostname)
//	if err != nil {
//		return err
//	}
//	relay, err := outbox.NewRelay(ob, pub, outbox.WithElector(el), outbox.WithLogger(log))
//	if err != nil {
//		return err
//	}
//	return relay.Run(ctx) // blocks until ctx ends
//
// Metrics: [WithRegisterer] registers the relay's Prometheus metrics on the caller's registry —
// the backlog and the age of the oldest pending message (gauges the leader sets each drain),
// messages published, failed attempts and dead messages (counters), the batch size and the
// commit-to-publish latency (histograms), all named txkit_outbox_*.
//
// # How the relay works
//
// Enqueue issues pg_notify on the outbox's channel in the same statement as the insert;
// PostgreSQL delivers the notification at commit (never on rollback), once per transaction. The
// leading relay LISTENs on a dedicated connection and also polls on a robfig/cron schedule, the
// safety net for notifications missed while that connection was down and the clock for retries.
// Both only wake one drain loop, so drains never overlap.
//
// A drain reads the due pending rows in id order (the bigserial primary key), publishes them and
// deletes the sent ones. Messages with the same [Message.Key] are published in id order, one at a
// time; different keys in parallel. The read keeps per-key order with one condition: a row is
// skipped while its key has an earlier pending row that is not yet due (it failed and is waiting
// out its backoff):
//
//	with blocked as (select key, min(id) as first from t
//	                 where status = 'pending' and attempts > 0 and next_attempt_at > now()
//	                 group by key)
//	select ... from t
//	where status = 'pending' and next_attempt_at <= now()
//	  and not exists (select 1 from blocked b where b.key = t.key and b.first < t.id)
//	order by id limit $batch
//
// and of those, the first ones up to [WithBatchBytes] bytes (always at least one), so a batch
// of large messages does not hold [WithBatchSize] of them in memory at once.
//
// An earlier pending row of the key that is due has a smaller id, so it is in the same batch; the
// relay publishes it first and leaves the rest of the key for later if it fails. So a key's
// backlog goes out a batch at a time, not one message per round trip, and a failed message holds
// back only its own key. Only failed rows can be waiting (Enqueue and Requeue make rows due at
// once), so "blocked" reads a small partial index on the failed rows (which Enqueue never
// touches), and the main scan walks the pending rows' index in id order and stops at the limit.
// With statistics that underestimate the backlog PostgreSQL may sort all pending rows instead, but
// it never runs a subquery per row over each key's earlier rows. Dead messages do not hold
// their key back: a poison message would otherwise stop its key for good. A dead message that is
// requeued goes out after the key's later messages.
//
// Sent rows are deleted, not marked sent. The table then holds only the backlog — small, its
// indexes in memory, vacuum cheap — however many messages went through it; a mark-sent table
// grows without bound and needs a janitor and a partial index to stay fast. The record of what was
// sent belongs to the broker and the consumers, who keep it anyway; a row is gone only once the
// broker acknowledged its message.
//
// A failed publish raises the row's attempts, stores the error, and sets next_attempt_at to now()
// plus an exponential backoff with jitter computed by PostgreSQL ([WithBackoff]) — except that
// after an outage (publishes of several keys failed and none succeeded), the first acknowledged
// publish makes the messages that failed during it due at once; after
// [WithMaxAttempts] failures the row becomes [StatusDead], and so does at once a message whose
// publish error wraps [ErrInvalidMessage] (the broker can never carry it: a topic name RocketMQ
// does not allow, say). [Outbox.ListDead], [Outbox.Requeue] and
// [Outbox.Backlog] (and the txkit command's "outbox" subcommands) are for operators.
//
// # Leadership and fencing
//
// The relay publishes only while its [lock.Elector] leads, under the leadership's context: when
// the leadership is lost the relay stops at once, and the batch in hand is neither deleted nor
// marked failed, so the next leader publishes it again (duplicates, same IDs — never a loss). A
// relay can be deposed without learning it in time (a long GC pause, a partition), so its deletes
// and updates run in a transaction that first passes a [fence.Fence] with its fencing token: once
// the new leader has written, the old one can no longer change the table. The fence is the table
// "txkit_fence" in the outbox's schema, which [Outbox.Migrate] creates, or [WithFence]'s. The
// relay passes it as soon as it leads and relays nothing until it has; fenced out, it waits a
// second and campaigns again.
//
// # Tracing
//
// [Outbox.Enqueue] stores the W3C trace context of its ctx with the row (column trace_context,
// added by [Outbox.Migrate] to existing tables). The relay publishes the message under a span
// "outbox relay publish" that is a CHILD of that stored context, and passes the span to the
// [Publisher] in ctx ([WithTracerProvider]). The message belongs to the request that wrote it,
// not to the relay pass that happens to carry it later (on whichever process leads): as a child,
// the request's trace continues through the broker to the consumers (package rocketmq
// propagates it in the message's traceparent and tracestate properties). A relay ctx that itself
// carries a span is linked from the publish span, not its parent.
package outbox
