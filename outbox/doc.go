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
// Split into partitions, so that every replica relays a share (see Partitions below), the outbox
// gets [WithPartitions] and the relay one election per partition:
//
//	ob, err := outbox.New(pool, outbox.WithSchema("orders"), outbox.WithPartitions(12))
//	// ...
//	paths := make([]string, 12)
//	for p := range paths {
//		paths[p] = fmt.Sprintf("/orders/outbox-relay/p%d", p)
//	}
//	relay, err := outbox.NewRelay(ob, pub, outbox.WithElectors(func(p int) (lock.Elector, error) {
//		return lock.NewElector(sess, paths[p], hostname)
//	}), outbox.WithBalance(sess.Inspector(), paths...))
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
//	where status = 'pending' and next_attempt_at <= now() and partition = $p
//	  and id not in (the rows the relay holds)
//	  and not exists (select 1 from blocked b where b.key = t.key and b.first < t.id)
//	order by id limit $batch
//
// and of those, the first ones up to [DefaultBatchBytes] bytes (always at least one), so a batch
// of large messages does not hold [WithBatchSize] of them in memory at once.
//
// # The pipeline
//
// The relay does not wait for a batch's slowest publish before it reads the next: publishes stay
// in flight across batches. One goroutine reads: whenever a whole batch fits under
// twice the batch size plus twice the concurrency, it reads the next
// due rows that the relay does not hold already — their ids are left out of the read — and queues
// each on its key. One sender per key publishes the key's rows one after the other, each only
// once the broker acknowledged the previous one, at most [WithConcurrency] keys at a time. A
// recorder writes the results as they come, in fenced transactions each covering every result
// that finished while the previous one ran: it deletes the acknowledged rows and records the
// failures — only what was acknowledged is deleted. A row stays held, and out of every read,
// until its result is committed.
//
// Per-key order holds across batches: a key's row read in a later batch waits in the key's queue
// behind the earlier ones. When a publish fails, the key stops: its queued rows, and the rows of
// the key read until the failure is committed, are dropped (neither published nor written) and
// held until then; from the commit on, the read itself holds them back behind the failed row
// waiting out its backoff. A drain ends when a read comes back short and every held row is
// recorded; a wake-up meanwhile (a NOTIFY, the schedule) makes it read again instead. Any error —
// ctx ending with the leadership, the fence refusing, a failed write — abandons the drain: the
// rows not recorded stay pending, and the next drain or leader publishes them again with the same
// IDs.
//
// Dead messages do not hold their key back: a poison message would otherwise stop its key for
// good. A dead message that is requeued goes out after the key's later messages. Only failed rows
// can be waiting (Enqueue and Requeue make rows due at once), so "blocked" reads a small partial
// index on the failed rows (which Enqueue never touches), and the main scan walks the pending
// rows' index (partition, id) in id order and stops at the limit.
//
// Sent rows are deleted, not marked sent. The table then holds only the backlog — small, its
// indexes in memory, vacuum cheap — however many messages went through it; a mark-sent table
// grows without bound and needs a janitor and a partial index to stay fast. The record of what was
// sent belongs to the broker and the consumers, who keep it anyway; a row is gone only once the
// broker acknowledged its message.
//
// A failed publish raises the row's attempts, stores the error, and sets next_attempt_at to now()
// plus an exponential backoff with jitter computed by PostgreSQL ([WithRetry]) — except that
// after an outage (publishes of several keys failed and none succeeded), the first acknowledged
// publish makes the messages that failed during it due at once; after
// the attempts of [WithRetry] the row becomes [StatusDead], and so does at once a message whose
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
// "txkit_fence" in the outbox's schema, which [Outbox.Migrate] creates. The
// relay passes it as soon as it leads and relays nothing until it has; fenced out, it waits a
// second and campaigns again.
//
// # Partitions
//
// One leader caps the relay at what one process publishes. [WithPartitions](P) splits the outbox
// into P partitions: [Outbox.Enqueue] stores each message's partition (column partition, a stable
// hash of its key, of its ID without a key: [Outbox.Partition]), and a relay built with
// [WithElectors] campaigns in one election per partition and runs the drain loop above for each
// partition it leads, with that partition's fencing token on its own fence resource
// ("outbox:<table>/p<i>"). With [WithBalance] the relays count each other (the contenders of the
// partitions' elections) and each leads at most ceil(P/N) partitions, giving up the rest to the
// others; when one dies, its partitions go to the waiting candidates as soon as its ZooKeeper
// session expires (measured: 1.8–2.5 s with a 2 s session timeout). A relay giving a partition up
// to the others reads nothing more of it, lets its publishes in flight finish and records them,
// then resigns (at the latest after the publish timeout + 5 s), so the next leader publishes none
// of them again. A key's messages are all in
// one partition, so per-key order holds across moves: a partition's new leader starts from the
// rows still pending, after the old leader's fenced writes — or, if the old one was deposed
// mid-write, its write is refused and the rows are sent again (same IDs).
//
// P is stored with the table (table "<table>_parts", by the first [Outbox.Migrate]) and cannot
// change: Migrate, Enqueue and [Relay.Run] refuse an outbox with another P (an error wrapping
// [ErrInvalidOption]), since a key moved to another partition while its earlier messages are
// pending in the old one would be published by two relays in no order; see [WithPartitions].
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
