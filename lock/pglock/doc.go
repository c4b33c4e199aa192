// Package pglock is txkit's distributed lock on PostgreSQL (pgx): a lease [Mutex] with fencing
// tokens, renewed in the background and released with a notification to the waiters; a session
// [AdvisoryMutex] on pg_advisory_lock for those who want the simplest form; and leader election
// on the lease lock ([Client.NewElector]). Both locks implement [lock.Locker], and the elector is
// a [lock.Election], so every txkit coordinator, the outbox relay and the notifier can run on
// PostgreSQL instead of ZooKeeper. [Client.Inspector] tells who holds a lease lock, with its token.
//
// Taking a lease is one statement and one commit (an upsert that draws the token), and so is its
// release (which frees the row and notifies); an attempt that finds the lock held writes nothing.
// Tokens come from a PostgreSQL sequence, drawn after a lease row is won, so they rise strictly
// from one holder to the next ([lock.Token]{Seq: n}, Epoch 0). Expiry is decided by PostgreSQL's
// clock; the holder ends its lease by its own monotonic deadline before the row can expire. Waiters
// are woken by LISTEN/NOTIFY (those of the releasing Client directly), in no fair order.
// [Mutex.Do] runs work under the lock in one transaction that takes the lease row and releases it
// at its end — one commit in all, and the next Do waiting on the row is handed the lock by that
// commit — with tokens from the same sequence, excluding Lock holders and excluded by them.
//
//	c, err := pglock.New(pool, pglock.WithTTL(10*time.Second))
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//	if err := c.Migrate(ctx); err != nil { // once: table txkit_locks, sequence txkit_lock_tokens
//		return err
//	}
//	el, err := c.NewElector("myapp/relay", hostname)
//	if err != nil {
//		return err
//	}
//	return el.RunWhileLeader(ctx, func(ctx context.Context, l lock.Leadership) error {
//		return recoverLoop(ctx, l.Token()) // ctx ends the moment leadership is lost
//	})
//
// The lease and session recipes, their clock and replication assumptions, the advisory lock's
// limits and the bad input refused: docs/lock.md ("PostgreSQL").
package pglock
