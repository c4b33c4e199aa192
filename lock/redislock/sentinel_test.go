package redislock_test

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/redislock"
)

// TestIntegrationDisruptiveSentinelFailoverTwoHolders is TestIntegrationDisruptiveRedisFailoverTwoHolders
// under a real Sentinel failover (deploy/local/redis-sentinel: a primary, its replica, three
// Sentinels), with both holders on go-redis failover clients, as an application runs them: holder
// A takes the lock on the primary at a moment its replica has not received the write (the replica
// is stopped and its replication connection closed first, so that it cannot fetch the write again),
// the primary is killed (SIGKILL), the Sentinels promote the replica, and holder B, through its
// failover client, takes the same lock on the promoted replica while A's lease still runs: two
// holders at once, which Sentinel cannot prevent. The fencing token saves the store: B's token is
// above A's, and a PostgreSQL fence accepts B's write and refuses A's late one.
//
// It kills the Sentinel set's primary, which drills/stock and examples/exapp use too: it runs in
// make test's serial Disruptive pass. Its cleanup restarts it (deploy/local/redis-sentinel start:
// it comes back as the new primary's replica).
func TestIntegrationDisruptiveSentinelFailoverTwoHolders(t *testing.T) {
	sentinels, master := testenv.RedisSentinel(t)
	db := testenv.PG(t)
	ctx := t.Context()
	script := deployScript(t, "redis-sentinel", "start") // its cleanup runs last: the set whole again

	sen := redis.NewSentinelClient(&redis.Options{Addr: sentinels[0], DialTimeout: time.Second, ReadTimeout: time.Second})
	t.Cleanup(func() { _ = sen.Close() })
	addr, err := sen.GetMasterAddrByName(ctx, master).Result()
	if err != nil {
		t.Fatal(err)
	}
	primary := net.JoinHostPort(addr[0], addr[1])
	replicas, err := sen.Replicas(ctx, master).Result()
	if err != nil || len(replicas) != 1 {
		t.Fatalf("SENTINEL REPLICAS %s: %v (%v), want one", master, replicas, err)
	}
	replica := net.JoinHostPort(replicas[0]["ip"], replicas[0]["port"])
	t.Logf("Sentinels %v name primary %s; its replica is %s", sentinels, primary, replica)

	const ttl = 30 * time.Second // A's lease outlives the failover (2-5 s) with room to spare
	rdbA, rdbB := newFailover(t, sentinels, master), newFailover(t, sentinels, master)
	ca := newClient(t, rdbA, redislock.WithTTL(ttl))
	cb := newClient(t, rdbB, redislock.WithTTL(ttl))
	name := sentinelLockName(t, sentinels, master)
	pri, rep := newRedis(t, primary), newRedis(t, replica)

	// An earlier hold, replicated: the replica's counter is not empty.
	holdReplicated(t, ca, rep, name)

	// The replica stops and loses its replication connection; A takes the lock on the primary,
	// which has no replica to send the write to; the primary dies; the replica runs again and
	// finds nothing to reconnect to.
	repPID, priPID := scriptPID(t, script, portOf(replica)), scriptPID(t, script, portOf(primary))
	if err := syscall.Kill(repPID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(repPID, syscall.SIGCONT) })
	if err := pri.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		_ = syscall.Kill(repPID, syscall.SIGCONT)
		t.Fatal(err)
	}
	a := newMutex(t, ca, name)
	la, err := a.Lock(ctx)
	if err != nil {
		_ = syscall.Kill(repPID, syscall.SIGCONT)
		t.Fatalf("A on the primary: %v", err)
	}
	if v, err := pri.Get(ctx, key(name)).Result(); err != nil || v == "" {
		_ = syscall.Kill(repPID, syscall.SIGCONT)
		t.Fatalf("A's key on the primary %s: %q, %v", primary, v, err)
	}
	killed := time.Now()
	if err := syscall.Kill(priPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(repPID, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	// The Sentinels promote the replica; B's failover client follows and takes the lock there.
	b := newMutex(t, cb, name)
	var lb lock.Lease
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if lb, err = b.TryLock(ctx); err == nil {
			break
		}
		if errors.Is(err, lock.ErrLocked) {
			t.Fatalf("B finds the lock taken on %s: A's write reached the replica; the test wanted it lost", replica)
		}
		if time.Now().After(deadline) {
			t.Fatalf("B did not take the lock through its failover client within 30 s of the primary's SIGKILL: %v", err)
		}
	}
	t.Logf("failover: B holds the lock %v after the primary's SIGKILL", time.Since(killed).Round(time.Millisecond))
	// B's client followed the Sentinel that announced the promotion first; the one asked here
	// may learn it a moment later (the Sentinels tell each other through their hello messages).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, err := sen.GetMasterAddrByName(ctx, master).Result()
		if err == nil && net.JoinHostPort(got[0], got[1]) == replica {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Sentinels name %v (%v) as primary 10 s after B took the lock, want the promoted replica %s", got, err, replica)
		}
	}
	if err := la.Err(); err != nil {
		t.Fatalf("A's lease ended (%v): the test wanted two holders at once", err)
	}
	t.Logf("two holders at once: A with token %s on the dead primary, B with token %s on the promoted replica", la.Token(), lb.Token())
	if !la.Token().Less(lb.Token()) {
		t.Fatalf("B's token %s is not above A's %s: the fence could not tell them apart", lb.Token(), la.Token())
	}

	// The store refuses A's late write.
	checkFenced(t, db, "redis-sentinel-failover", la.Token(), lb.Token())
	// A's renewal now reaches the promoted replica through A's failover client, finds B's value
	// and ends A's lease: the stale holder learns it, but only at its next renewal.
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// newFailover returns a go-redis failover client (Sentinel) for master, closed when the test ends,
// with the short timeouts of newRedis.
func newFailover(t testing.TB, sentinels []string, master string) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            master,
		SentinelAddrs:         sentinels,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sentinelLockName is lockName for the Sentinel set: the test's keys are deleted from its primary
// when the test ends.
func sentinelLockName(t testing.TB, sentinels []string, master string) string {
	name := "test-" + testenv.Name(t)
	t.Cleanup(func() {
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: sentinels,
			DialTimeout: time.Second, ReadTimeout: time.Second})
		defer rdb.Close() //nolint:errcheck // cleanup
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = rdb.Del(ctx, key(name), key(name)+":fence").Err()
	})
	return name
}
