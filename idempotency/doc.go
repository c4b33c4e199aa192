// Package idempotency makes effects happen once under at-least-once delivery. A consumer claims a
// key — (scope, key), e.g. ("points", message id) — in the same PostgreSQL transaction as its
// effect, so the claim and the effect commit or roll back together: a redelivered message finds
// its key claimed and does nothing, and a handler that failed half-way left no key behind.
//
// The keys live in a table next to the business data (not in ZooKeeper), created by
// [Store.Migrate]. [Store.Claim] is a single INSERT ... ON CONFLICT DO NOTHING; [Store.Begin] and
// [Store.Complete] add the HTTP Idempotency-Key flow, storing the request's fingerprint and its
// result so that a retry gets the first answer back. [Store.Run] purges expired keys on a cron
// schedule; [Store.Purge] does one pass.
//
// A consumer's handler:
//
//	store, err := idempotency.New(pool, idempotency.WithRetention(72*time.Hour, "@every 1m"))
//	if err != nil { return err }
//	if err := store.Migrate(ctx); err != nil { return err }
//	g.Go(func() error { return store.Run(ctx) }) // purge expired keys until ctx ends
//
//	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		first, err := store.Claim(ctx, tx, "points", msg.ID)
//		if err != nil || !first {
//			return err // a duplicate: its points were already added
//		}
//		_, err = tx.Exec(ctx, `update accounts set points = points + $1 where id = $2`, msg.Points, msg.Account)
//		return err
//	})
//
// Metrics: [WithRegisterer] registers txkit_idempotency_claims_total{result="first"|"duplicate"}
// on the caller's Prometheus registry.
//
// Keys are transaction-scoped. While one transaction holds an uncommitted claim, another claimer of
// the same key blocks on it until the first transaction ends, then sees the outcome: a duplicate if
// it committed, a fresh claim if it rolled back. Run the transactions at READ COMMITTED (the
// default); under REPEATABLE READ the blocked claimer gets a serialization failure to retry.
package idempotency
