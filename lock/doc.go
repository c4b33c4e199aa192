// Package lock is txkit's coordination contract: the interfaces every txkit component depends on
// for mutual exclusion and leader election — [Locker] (Lock, TryLock, Unlock), [Lease] (a hold
// with its fencing [Token], Done and Context), [Elector] and [Leadership] — the one elector built
// on any Locker ([Election]), an [Inspector] that reads who holds a lock and who waits, the
// sentinel errors, metrics ([Instrument]) and the pieces backends share ([Hold], [Reentrant],
// [Backoff]). It links no backend. The backends live beside it: lock/zklock (ZooKeeper: a fair,
// Curator-compatible lock, and the default of every txkit coordinator), lock/pglock (PostgreSQL
// lease rows, or advisory locks) and lock/redislock (Redis SET NX PX with a watchdog, and
// Redlock); lock/locktest is the conformance suite all of them pass. The PostgreSQL fence that
// refuses the writes of a deposed holder is package fence.
//
// A lock can be lost at any time. Run the work that needs it under [Lease.Context] (or
// [Leadership.Context]) and send [Lease.Token] along with every write it makes, so that the store
// can refuse a holder that was deposed while it was still writing:
//
//	el, err := zklock.NewElector(sess, "/myapp/relay/leader", hostname) // or pglock, redislock
//	if err != nil {
//		return err
//	}
//	return el.RunWhileLeader(ctx, func(ctx context.Context, l lock.Leadership) error {
//		return recoverLoop(ctx, l.Token()) // ctx ends the moment leadership is lost
//	})
//
// [Instrument] wraps any [Locker] to count acquisitions, their wait and holds lost before Unlock;
// [WithElectionRegisterer] makes an election expose whether it leads (docs/metrics.md has the
// table).
package lock
