// Package redislock is txkit's lock and leader election on Redis: [Client] on one server and
// [Redlock] on several independent ones, both behind [lock.Locker] and [lock.Elector] so that
// every txkit coordinator can lead on Redis instead of ZooKeeper. It uses go-redis v9; the caller
// makes and closes the go-redis clients. [Client.Inspector] and [Redlock.Inspector] tell who holds
// a lock (or leads an election), with its token, for operators (the admin API).
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
// # The recipe
//
// The older recipe, SETNX key <expiry time> and, when the stored expiry has passed, GETSET key
// <new expiry time>, breaks three ways. The expiry is computed by the clients' clocks, so a client
// whose clock runs ahead takes a lock that has not expired. GETSET overwrites whatever is there:
// two clients that both see the expired value both GETSET it, and the loser has already replaced
// the winner's expiry with its own, so the key no longer says whose it is. And the release is a
// plain DEL, with no check of the owner: a holder that was paused past its expiry deletes the next
// holder's lock.
//
// This package takes the lock with one command, SET key <value> NX PX <ttl>: the expiry is the
// server's, and the value is a random uuid per hold, a space, and the holder data (such as an
// elector's candidate id): everything after the first space, since a uuid has none. Release and extension
// are Lua scripts that compare the value first (compare-and-delete, compare-and-PEXPIRE), so only
// the hold that set the key ever removes or extends it. The acquisition is one script too: when,
// and only when, the SET succeeded, it advances the lock's fencing counter (key "<prefix>{name}:fence",
// no TTL) and returns it; the hold's [lock.Token] is {Seq: counter} (Epoch is always 0). Keys are "<prefix>{name}" and
// "<prefix>{name}:fence": the braces keep both in one Redis Cluster slot.
//
// A watchdog (Redisson's) renews the TTL every third of the TTL
// while the lock is held. The holder learns of a loss at once: a renewal that finds the key gone
// or not ours ends the hold; so does its local deadline — the monotonic time when the last
// successful SET or PEXPIRE was sent, plus the TTL, minus the clock drift allowance
// (1% of the TTL + 2 ms) — passing without a successful renewal. Redis counts the TTL from when the
// command arrived, later than when it was sent, so the holder stops before anyone else can take
// the key, as long as the server's clock does not run faster than the holder's by more than the
// allowance. Its lease's Done is closed and its Context cancelled with a cause wrapping
// [lock.ErrLockLost].
//
// Waiters do not spin. Each [Client] has one subscription to the release channel
// ("<prefix>released", whose messages carry the lock's name); the release script publishes
// there. A waiter queues before its attempt, then sleeps until a release message for its lock,
// the expiry of the holder's key (the failed attempt returns its PTTL), or the fallback check
// (every second, for messages lost while the subscription reconnects), whichever is first.
// A release message wakes one waiter per Client — the one of that lock that has waited longest —
// not all of them, so a release sets off one attempt per process rather than a herd. Waiters are
// not served in order across Clients: after a release, whoever's SET arrives first wins, and a new
// contender can beat one that has waited long. Use the ZooKeeper lock when you need FIFO.
//
// A command whose connection drops before its reply is repeated by go-redis (Options.MaxRetries):
// a repeated acquisition finds its own value in the key and answers as the first run did, a
// repeated release or extension finds the work done.
//
// # Eviction: maxmemory-policy noeviction is required
//
// Every server (the [Client]'s, each of a [Redlock]'s instances) must run with maxmemory-policy
// noeviction. Lock keys carry a TTL, so the volatile-* policies evict them as readily as the
// allkeys-* ones, and an evicted key hands the lock to a second holder. Lock and TryLock read the
// policy (CONFIG GET maxmemory-policy) of every server that has not yet answered noeviction; any
// other policy makes them return an error wrapping [ErrEvictionPolicy] at once, and they keep
// refusing until the server's policy is noeviction (CONFIG SET heals it, no restart needed). Where
// CONFIG GET is refused (an ACL without +config, a renamed command, a managed service) the lock is
// taken and a warning is logged once per server: check the policy by hand there. A server that
// does not answer is asked again at the next Lock or TryLock.
//
// # Fencing tokens and failover
//
// Redis replicates asynchronously. If the primary fails after granting a lock and before the
// replica received that write, the promoted replica does not know the lock is held, and grants it
// to a second client: two holders at once (the test TestIntegrationDisruptiveRedisFailoverTwoHolders
// shows it). Nothing in the lock prevents this; the fencing token makes it harmless where the
// writes go through a store that checks it (package fence refuses a token below the highest it has
// seen).
//
// The token must therefore rise across such a failover although the promoted replica also missed
// the counter's last increments. The script makes the counter a hybrid logical clock:
// n = max(counter + 1, the server's TIME in microseconds). On one server it rises strictly on
// every acquisition. After a failover that lost increments, the new primary hands out at least its
// own clock's time, which is above the lost counter as long as the new primary's clock is not
// behind the old primary's by more than the time between the two acquisitions (and the old
// counter was itself made of time, not of many increments per microsecond). That is the
// assumption: the servers' clocks agree, within the failover time, such as NTP keeps them. A
// clock stepped backwards on a single server does no harm (the counter's + 1 wins).
//
// # Redlock
//
// [Redlock] runs antirez's algorithm over N independent instances: send SET NX PX to all in
// parallel, each with an instance timeout much smaller than the TTL (a tenth of it, at most
// 1 s); the lock is held when a majority (N/2+1) took it and its validity, TTL − elapsed − drift,
// is positive; otherwise release on all and retry after a random pause or a release message. A
// step stops waiting as soon as a majority has answered either way. Renewals go to all with the
// same majority rule, release to all, and Unlock waits for every instance's answer (bounded by
// the instance timeout, at least 1 s), so that the next owner's attempt finds no key left behind.
//
// A Redlock hold's token is the highest counter among the majority that granted it, and before the
// hold counts (before Lock returns) that token is written back to the instances whose counter is
// lower, until a majority has it (one more round trip, to the instances that answered first; a
// hold whose write-back does not reach a majority within its validity is released and retried, as
// an attempt with too few instances is). Any later majority shares an instance with that one, and
// that instance's counter never falls, so the next holder's token is above it: the tokens rise from
// holder to holder whatever the instances' clocks say.
//
// Without the write-back a clock step broke them. An instance whose clock was stepped forward, even
// for a moment, keeps the time it handed out in its counter; a holder whose majority included it
// got a token from the future, and a later holder whose majority lacked it got a lower one, so a
// fence refused the new holder and accepted the deposed one. Now the future token is written to a
// majority, and the tokens after it rise by one per hold until the clocks catch up. What remains of
// the clock-step hazard: an instance that loses its counter (restarted without persistence) hands
// out its clock's time again, and if the token written back earlier came from a stepped clock and
// this instance is the only one a later majority shares with it, the next token can be lower. Keep
// NTP slewing rather than stepping, restart instances with their data, and watch
// txkit_fence_refused_total (package fence): a write refused for a token below the fence's value
// is a deposed holder, or tokens that fell.
//
// Redlock's safety rests on timing assumptions (Martin Kleppmann's "How to do distributed
// locking", and antirez's answer): bounded network delay, bounded process pauses, and clocks
// that advance at about the same rate. A process paused (GC, swap, SIGSTOP) after its lock
// expired still believes it holds it until the local deadline check runs; only a fencing token
// checked by the store protects against it, which is why every txkit leader sends one. An
// instance restarted without persistence (or with everysec fsync that lost the last second)
// forgets the keys it held, and a majority can then form for a second holder: restart such an
// instance only after a TTL has passed (a delayed restart), or run it with appendfsync always.
//
// Each Mutex, Client and Redlock is safe for concurrent use by multiple goroutines.
package redislock
