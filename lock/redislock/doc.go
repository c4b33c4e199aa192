// Package redislock is txkit's lock and leader election on Redis: [Client] on one server and
// [Redlock] on several independent ones, both behind [lock.Locker] and [lock.Elector] so that
// every txkit coordinator can lead on Redis instead of ZooKeeper. It uses go-redis v9; the caller
// makes and closes the go-redis clients. [Client.Inspector] and [Redlock.Inspector] tell who holds
// a lock (or leads an election), with its token.
//
// A hold is one SET NX PX with a random value, renewed by a watchdog; release and renewal compare
// the value first. Tokens come from a per-lock counter that the acquiring script advances as a
// hybrid logical clock, max(counter + 1, the server's time in µs), so they keep rising across a
// failover that lost increments ([lock.Token]{Seq: n}, Epoch 0); a Redlock hold writes its token
// back to a majority before it counts. Every server must run with maxmemory-policy noeviction
// (else [ErrEvictionPolicy]).
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	defer rdb.Close()
//	locks, err := redislock.New(rdb, redislock.WithTTL(10*time.Second))
//	if err != nil {
//		return err
//	}
//	defer locks.Close()
//	el, err := locks.NewElector("orders-recovery", hostname)
//	if err != nil {
//		return err
//	}
//	return el.RunWhileLeader(ctx, func(ctx context.Context, l lock.Leadership) error {
//		return recoverLoop(ctx, l.Token()) // ctx ends the moment the hold is lost; fence writes with the token
//	})
//
// The recipe and why not SETNX + GETSET, waiters, failover and its clock assumption, Redlock and
// its caveats, eviction: docs/lock.md ("Redis").
//
// Each Mutex, Client and Redlock is safe for concurrent use by multiple goroutines.
package redislock
