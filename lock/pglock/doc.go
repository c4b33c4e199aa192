// Package pglock is txkit's distributed lock on PostgreSQL (pgx): a lease [Mutex] with fencing
// tokens, renewed in the background and released with a notification to the waiters; a session
// [AdvisoryMutex] on pg_advisory_lock for those who want the simplest form; and leader election
// on the lease lock ([Client.NewElector]). Both locks implement [lock.Locker], and the elector is
// a [lock.Election], so every txkit coordinator, the outbox relay and the notifier can run on
// PostgreSQL instead of ZooKeeper. [Client.Inspector] tells who holds a lease lock (or leads an
// election), with its token, for operators (the admin API).
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
// # The lease recipe
//
// One row per lock name in txkit_locks: name (the primary key), holder (a uuid per hold), data
// (the elector's candidate id), token, and expires_at. An attempt is one round trip and one
// transaction (a pgx batch): it reads how long the current row has left, runs
//
//	insert ... values (name, holder, data, 0, now() + ttl)
//	on conflict (name) do update set holder = ..., expires_at = ... where txkit_locks.expires_at < now()
//
// which takes the row when it is absent or expired, and then, only if the row is now ours, sets
// token = nextval('txkit_lock_tokens'). Expiry is decided by PostgreSQL's clock (now()), never by
// a client's. The token is drawn after the row is won, under its row lock, so that it is higher
// than every earlier holder's: a value drawn before the insert could be lower than that of a
// holder who took and released the row while the insert was held up. A sequence never goes back,
// so tokens rise strictly across holders and across the row's deletion ([lock.Token]{Seq: n},
// Epoch 0). Dropping and re-creating the sequence restarts it: reset package fence's entries then,
// as for a rebuilt ZooKeeper ensemble.
//
// The holder renews its row in the background every third of the TTL: update
// expires_at = now() + ttl where name and holder match. It keeps a local deadline: the monotonic
// time at which the last successful acquire or renew statement was sent, plus the TTL minus a
// safety margin of TTL/10. PostgreSQL computed the row's expiry from its own now(), which is later
// than the sending, so when the deadline passes without a successful renewal (the server down,
// the connection cut, the process paused) the lease ends — [lock.Lease.Done] closed,
// [lock.Lease.Context] cancelled with a cause wrapping [lock.ErrLockLost] — before another holder
// can get in. This assumes that the server's clock and the holder's run at about the same rate
// (a step forward of PostgreSQL's clock by more than the margin could let the next holder in
// early). A renewal that finds the row gone or taken ends the lease at once.
//
// Failover: with asynchronous replication, a promoted replica may lack the last acquisitions and
// sequence values of the old primary. A holder whose row was lost that way learns it at its next
// renewal (the update finds no row: the lease ends at once), but until then another owner can take
// the lock, and its token may repeat one already handed out — and so may be refused, or worse
// accepted, by a fence that lives elsewhere. Use synchronous replication (or keep the fence in the
// same database, whose lost writes go with the lost tokens) where that matters.
//
// Unlock deletes the row where name and holder match and, in the same statement, calls pg_notify
// on the Client's channel (the schema-qualified table's, as package notify names its channels)
// with the lock name as payload.
//
// Waiters do not poll one another's rows. Each Client has one connection that LISTENs on the
// channel (opened at the first wait, kept until Close, shared by all its locks, re-opened after a
// failure). A release wakes, in each Client that has waiters on the name, the one that has waited
// there longest; it tries again, and if it gives up (ctx) the wake-up passes to the next. A waiter
// also tries again at the current holder's expiry (a crashed holder) and at the fallback interval
// (1 s, for a notification missed while the listening connection was
// down; when it fails and again when it has reconnected, every waiter tries once). So a release
// costs one attempt per waiting process, not one per waiter.
//
// The order is not fair, and not FIFO: after a release, whichever attempt PostgreSQL runs first
// wins — the woken waiter of any process, or a newcomer's Lock or TryLock — and a waiter can be
// overtaken any number of times. Use the ZooKeeper lock (package lock) when waiters must be served
// in order.
//
// Lock with a ctx that ends leaves nothing behind. An attempt already sent is not cut off (a cut
// connection could let the server commit the insert after a clean-up ran): its answer is awaited,
// one round trip, and a row it took is deleted with a fresh, bounded context before ctx's error is
// returned. Only when the connection itself fails mid-attempt can such a row remain, until its
// TTL.
//
// # The session recipe (advisory locks)
//
// [AdvisoryMutex] takes a pool connection for the whole hold and runs pg_advisory_lock on a 64-bit
// key derived from the name ([AdvisoryKey]); its token is drawn from the same sequence right after
// the lock is granted. It is simpler and needs no table for the exclusion, but know its limits:
//
//   - The hold is lost with its connection (a network cut, a server restart, pg_terminate_backend).
//     The server releases the lock at once then, and the holder learns of it only at its next check
//     of the connection (every third of the TTL), so another holder can get in before the old one
//     is told: fence every write with the token. The other way round, when the network between
//     them goes silent, the holder's check fails within two check intervals (it then closes its
//     side), and the server would keep the lock until TCP told it the connection was dead — hours,
//     by default. So each hold sets its session's tcp_keepalives_idle/interval/count and
//     tcp_user_timeout (PostgreSQL 12 or later; TCP connections only, a Unix socket ignores them)
//     so that the server gives up no sooner than three check intervals + 1 s after the last packet
//     it got — after the holder — and not much later; Unlock resets them.
//   - It breaks behind a transaction-pooling proxy (PgBouncer in transaction mode): the session that
//     holds the lock is not the one the next statement runs on. Connect the pool directly to
//     PostgreSQL, or through a session-pooling proxy.
//   - Waiters are queued by PostgreSQL's lock manager; txkit promises no order.
//   - Every hold keeps a pool connection busy: size the pool for the holds plus the work.
//   - Names share one key space per database with every other advisory lock user; see
//     [AdvisoryKey] for the collisions.
//
// # Bad input
//
// Names are 1 to [MaxNameLen] (255) bytes of valid UTF-8 without NUL. [New] refuses a nil pool, a
// TTL under 1 ms, a renewal interval that is not shorter than 9/10 of the TTL, a non-positive
// fallback interval and a bad schema name; [Client.NewElector] an empty id. Each returns an error
// wrapping [lock.ErrInvalidOption].
package pglock
