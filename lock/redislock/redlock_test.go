package redislock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/obs/obstest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/redislock"
)

// newRedlock returns a Redlock on a go-redis client per address, closed when the test ends.
func newRedlock(t testing.TB, addrs []string, opts ...redislock.Option) (*redislock.Redlock, []*redis.Client) {
	t.Helper()
	rdbs := make([]*redis.Client, len(addrs))
	clients := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		rdbs[i] = newRedis(t, a)
		clients[i] = rdbs[i]
	}
	r, err := redislock.NewRedlock(clients, append([]redislock.Option{redislock.WithLogger(testenv.Logger(t))}, opts...)...)
	if err != nil {
		t.Fatalf("NewRedlock: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, rdbs
}

func newRedlockMutex(t testing.TB, r *redislock.Redlock, name string) *redislock.RedlockMutex {
	t.Helper()
	m, err := r.NewMutex(name)
	if err != nil {
		t.Fatalf("NewMutex(%s): %v", name, err)
	}
	return m
}

// proxied puts a proxy in front of each address and returns the proxies.
func proxied(t testing.TB, addrs []string) ([]*testenv.Proxy, []string) {
	ps := make([]*testenv.Proxy, len(addrs))
	via := make([]string, len(addrs))
	for i, a := range addrs {
		ps[i] = testenv.NewRawProxy(t, a)
		via[i] = ps[i].Addr()
	}
	return ps, via
}

// TestIntegrationRedlockAcquireRelease: a hold sets the same value on all three instances, its
// token is the highest counter of the majority that granted it, and Unlock deletes the key on all
// three.
func TestIntegrationRedlockAcquireRelease(t *testing.T) {
	t.Parallel()
	addrs := testenv.Redlock(t)
	r, rdbs := newRedlock(t, addrs)
	name := lockName(t)
	a, b := newRedlockMutex(t, r, name), newRedlockMutex(t, r, name)
	ctx := t.Context()
	l, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Lock returned once a majority granted it; the third SET may still be on its way, and is kept.
	values := make([]string, len(rdbs))
	testenv.Eventually(t, 5*time.Second, 5*time.Millisecond, func() bool {
		for i, rdb := range rdbs {
			values[i], _ = rdb.Get(ctx, key(name)).Result()
		}
		return values[0] != "" && values[1] == values[0] && values[2] == values[0]
	}, "the same value on the three instances")
	var counters []int64
	for i, rdb := range rdbs {
		n, err := rdb.Get(ctx, key(name)+":fence").Int64()
		if err != nil {
			t.Fatalf("instance %d counter: %v", i, err)
		}
		counters = append(counters, n)
	}
	// The token is the highest counter of the majority that answered first: one of the three, at
	// least the median.
	slices.Sort(counters)
	if !slices.Contains(counters, l.Token().Seq) || l.Token().Seq < counters[1] {
		t.Errorf("token %s, want the highest counter of a majority of %v", l.Token(), counters)
	}
	if _, err := b.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryLock while held: %v, want ErrLocked", err)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Unlock returns once a majority released; the third release may still be on its way.
	for i, rdb := range rdbs {
		testenv.Eventually(t, 5*time.Second, 5*time.Millisecond, func() bool {
			n, err := rdb.Exists(ctx, key(name)).Result()
			return err == nil && n == 0
		}, "the key to be gone from instance %d after Unlock", i)
	}
	lb, err := b.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Token().Less(lb.Token()) {
		t.Errorf("token %s after %s", lb.Token(), l.Token())
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationRedlockOneOfThreeDown: with one instance of three cut off, a hold survives its
// renewals, contenders exclude one another with rising tokens, and the elector reports the leader.
func TestIntegrationRedlockOneOfThreeDown(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	ps, via := proxied(t, testenv.Redlock(t))
	r, _ := newRedlock(t, via, redislock.WithTTL(ttl))
	name := lockName(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	// A hold taken on three keeps going when one goes down.
	holder := newRedlockMutex(t, r, name)
	l, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ps[1].Down()
	select {
	case <-l.Done():
		t.Fatalf("hold lost with one instance of three down: %v", l.Err())
	case <-time.After(3 * ttl):
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Logf("Unlock with one instance down: %v", err)
	}

	tokens := mustContend(t, 4, 10, func() (lock.Locker, error) { return r.NewMutex(name) })
	if !l.Token().Less(tokens[0]) {
		t.Errorf("tokens fell: %s after %s", tokens[0], l.Token())
	}

	e, err := r.NewElector(name+"-election", "candidate-1")
	if err != nil {
		t.Fatal(err)
	}
	lead, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := e.Leader(ctx); err != nil || id != "candidate-1" {
		t.Errorf("Leader with one instance down = %q, %v; want candidate-1", id, err)
	}
	if err := lead.Resign(ctx); err != nil {
		t.Logf("Resign with one instance down: %v", err)
	}
}

// TestIntegrationRedlockTwoOfThreeDown: with two instances of three cut off, no lock can be taken
// (TryLock fails, Lock waits until its ctx ends), and a hold taken before is lost before its TTL
// could have let anyone else in.
func TestIntegrationRedlockTwoOfThreeDown(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	ps, via := proxied(t, testenv.Redlock(t))
	r, _ := newRedlock(t, via, redislock.WithTTL(ttl))
	name := lockName(t)
	ctx := t.Context()
	holder, other := newRedlockMutex(t, r, name), newRedlockMutex(t, r, name)
	l, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	ps[0].Down()
	ps[2].Down()
	select {
	case <-l.Done():
		if d := time.Since(cut); d > ttl {
			t.Errorf("hold lost %v after the cut, want within the TTL %v", d, ttl)
		}
		if !errors.Is(l.Err(), lock.ErrLockLost) {
			t.Errorf("lease ended with %v, want ErrLockLost", l.Err())
		}
	case <-time.After(5 * ttl):
		t.Fatal("hold not lost with two instances of three down")
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Logf("Unlock with two instances down: %v", err)
	}
	_, err = other.TryLock(ctx)
	if err == nil {
		t.Fatal("TryLock succeeded with two instances of three down")
	}
	t.Logf("TryLock with two instances down: %v", err)
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := other.Lock(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with two instances down: %v, want DeadlineExceeded", err)
	}
}

// TestIntegrationRedlockClockStep: one instance's clock stepped forward for a while, so its
// fencing counter ran ahead (set directly here). H1 takes the lock on a majority that includes it
// and gets a token from the future; H1 is then cut off (deposed), and H2 takes the lock on the
// other two instances. H2's token must be above H1's, so that the fence refuses H1's late write
// and keeps taking H2's: the token was written back to a majority before H1's hold counted.
func TestIntegrationRedlockClockStep(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	addrs := testenv.Redlock(t)
	db := testenv.PG(t)
	name := lockName(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	// Instance 2's clock ran an hour ahead; its counter keeps the time it handed out then.
	ahead := time.Now().Add(time.Hour).UnixMicro()
	if err := newRedis(t, addrs[2]).Set(ctx, key(name)+":fence", ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}

	// H1 reaches instances 1 and 2 only: its majority includes the instance that ran ahead.
	ps1, via1 := proxied(t, addrs)
	r1, _ := newRedlock(t, via1, redislock.WithTTL(ttl))
	ps1[0].Down()
	l1, err := newRedlockMutex(t, r1, name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l1.Token().Seq <= ahead {
		t.Fatalf("H1's token %s is not above the counter that ran ahead (%d)", l1.Token(), ahead)
	}
	// H1 is cut off and its keys expire; H2 reaches instances 0 and 1 only.
	ps1[1].Down()
	ps1[2].Down()
	ps2, via2 := proxied(t, addrs)
	ps2[2].Down()
	r2, _ := newRedlock(t, via2, redislock.WithTTL(ttl))
	m2 := newRedlockMutex(t, r2, name)
	l2, err := m2.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("H1 (deposed) holds token %s, H2 token %s", l1.Token(), l2.Token())

	reg := prometheus.NewRegistry()
	f, err := fence.New(db.Pool, fence.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	write := func(tok lock.Token) error {
		return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return f.Check(ctx, tx, "redlock-clock-step", tok) })
	}
	if err := write(l2.Token()); err != nil {
		t.Fatalf("H2's write: %v", err)
	}
	if err := write(l1.Token()); !errors.Is(err, lock.ErrFenced) {
		t.Fatalf("deposed H1's write after H2's: %v, want an error wrapping lock.ErrFenced (H1 %s, H2 %s)", err, l1.Token(), l2.Token())
	}
	if err := write(l2.Token()); err != nil {
		t.Fatalf("H2's next write: %v", err)
	}
	if got := obstest.Value(t, reg, "txkit_fence_refused_total", "cause", "seq"); got != 1 {
		t.Errorf("txkit_fence_refused_total{cause=\"seq\"} = %v, want 1 (H1's write)", got)
	}
	if err := m2.Unlock(ctx); err != nil {
		t.Logf("H2's Unlock with one instance cut off: %v", err)
	}
}
