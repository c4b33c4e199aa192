package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/locktest"
	"github.com/txkit/txkit/lock/redislock"
)

// TestIntegrationReentrant: a Mutex value counts its holds and releases on the last Unlock; the
// key holds the hold's uuid and the holder data.
func TestIntegrationReentrant(t *testing.T) {
	t.Parallel()
	rdb := newRedis(t, testenv.Redis(t))
	c := newClient(t, rdb)
	name := lockName(t)
	m := newMutex(t, c, name, redislock.WithData("holder-1"))
	other := newMutex(t, c, name)
	ctx := t.Context()

	l1, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l1 != l2 {
		t.Fatal("a second hold of one value returned another lease")
	}
	v, err := rdb.Get(ctx, key(name)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 36+1+len("holder-1") || v[36:] != " holder-1" {
		t.Errorf("key value %q, want <uuid> holder-1", v)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l1.Err() != nil {
		t.Fatalf("the first Unlock of two holds ended the lease: %v", l1.Err())
	}
	if _, err := other.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryLock while held once more: %v, want ErrLocked", err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l1.Err(), lock.ErrNotHeld) {
		t.Fatalf("lease after the last Unlock: %v, want ErrNotHeld", l1.Err())
	}
	select {
	case <-l1.Done():
	default:
		t.Fatal("Done not closed after the last Unlock")
	}
	if n, _ := rdb.Exists(ctx, key(name)).Result(); n != 0 {
		t.Fatal("the key is still there after the last Unlock")
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of a Mutex that holds nothing: %v", err)
	}
}

// TestIntegrationTryLock: a hand-over between two values (locktest.Handoff: refused with
// ErrLocked while the other holds, taken with a higher token once it is released); the fencing
// counter key stays afterwards, with no TTL.
func TestIntegrationTryLock(t *testing.T) {
	t.Parallel()
	rdb := newRedis(t, testenv.Redis(t))
	c := newClient(t, rdb)
	name := lockName(t)
	locktest.Handoff(t, newMutex(t, c, name), newMutex(t, c, name))
	ttl, err := rdb.PTTL(t.Context(), key(name)+":fence").Result()
	if err != nil || ttl != -1 {
		t.Errorf("fencing counter PTTL %v (%v), want -1 (no TTL)", ttl, err)
	}
}

// TestIntegrationCancelLeavesNothing: a Lock whose ctx ends while it waits returns ctx's error,
// and leaves no key or subscription waiter behind: the next contender takes the lock at once.
func TestIntegrationCancelLeavesNothing(t *testing.T) {
	t.Parallel()
	rdb := newRedis(t, testenv.Redis(t))
	c := newClient(t, rdb)
	name := lockName(t)
	a, b, x := newMutex(t, c, name), newMutex(t, c, name), newMutex(t, c, name)
	ctx := t.Context()
	if _, err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := b.Lock(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with an ending ctx: %v, want DeadlineExceeded", err)
	}
	// A ctx cancelled before the call: nothing happens.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := b.Lock(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with a cancelled ctx: %v, want Canceled", err)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(ctx, key(name)).Result(); n != 0 {
		t.Fatal("a key is left after the cancelled Lock and the holder's Unlock")
	}
	if _, err := x.TryLock(ctx); err != nil {
		t.Fatalf("TryLock after the cancelled waiter: %v", err)
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the cancelled Mutex: %v", err)
	}
	if err := x.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationDisruptiveCancelDuringAttempt: a Lock whose ctx ends while its SET is on the wire (the
// server is paused by CLIENT PAUSE) undoes the SET once the server answers: no key is left.
func TestIntegrationDisruptiveCancelDuringAttempt(t *testing.T) {
	rdb := newRedis(t, testenv.Redis(t))
	admin := newRedis(t, testenv.Redis(t))
	c := newClient(t, rdb)
	name := lockName(t)
	m := newMutex(t, c, name)
	ctx := t.Context()
	if err := rdb.Ping(ctx).Err(); err != nil { // a pooled connection, so the SET waits in the server
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "300", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := m.Lock(wctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock during CLIENT PAUSE: %v, want DeadlineExceeded", err)
	}
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool {
		n, err := rdb.Exists(ctx, key(name)).Result()
		return err == nil && n == 0
	}, "no key left by the cancelled attempt")
}

// TestIntegrationTokensIncrease: 8 goroutines with a Mutex each make 200 holds; never two at once,
// and every token is above the one before.
func TestIntegrationTokensIncrease(t *testing.T) {
	t.Parallel()
	rdb := newRedis(t, testenv.Redis(t))
	c := newClient(t, rdb)
	name := lockName(t)
	mustContend(t, 8, 25, func() (lock.Locker, error) { return c.NewMutex(name) })
}

// TestIntegrationWokenByRelease: with the fallback check at 30 s, a waiter takes the lock within a
// few hundred milliseconds of the release: the release message woke it.
func TestIntegrationWokenByRelease(t *testing.T) {
	t.Parallel()
	addr := testenv.Redis(t)
	a, waiter := holderAndWaiter(t, addr, addr)
	rel := time.Now()
	if err := a.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	d := waiter.took(t, "the release").Sub(rel)
	t.Logf("waiter took the lock %v after the release", d.Round(time.Microsecond))
	if d > 500*time.Millisecond {
		t.Errorf("waiter took the lock %v after the release, want within 500ms", d)
	}
}

// TestIntegrationWokenAfterResubscribe: the release message is lost while the waiter's
// connections are cut; when its subscription comes back, go-redis subscribes again and the waiter
// tries at once, long before its 30 s fallback check.
func TestIntegrationWokenAfterResubscribe(t *testing.T) {
	t.Parallel()
	addr := testenv.Redis(t)
	p := testenv.NewRawProxy(t, addr)
	a, waiter := holderAndWaiter(t, addr, p.Addr())
	p.Down()
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		sub, _ := waiterState(t.Context(), waiter.admin, waiter.name)
		return !sub
	}, "the waiter's subscription to drop")
	if err := a.Unlock(t.Context()); err != nil { // the message reaches no waiter
		t.Fatal(err)
	}
	up := time.Now()
	p.Up()
	t.Logf("waiter took the lock %v after its connections came back", waiter.took(t, "its subscription's return").Sub(up).Round(time.Millisecond))
}

// waiter is a Lock running in a goroutine.
type waiter struct {
	name  string
	admin *redis.Client
	done  chan error
	at    time.Time // when Lock returned; read after done
}

// holderAndWaiter takes a lock on a Client on holderAddr, then starts a Lock on a Client on
// waiterAddr (both with a 30 s TTL and fallback check) and returns once the waiter has subscribed
// and found the lock held (CLIENT LIST on holderAddr's server shows it).
func holderAndWaiter(t *testing.T, holderAddr, waiterAddr string) (*redislock.Mutex, *waiter) {
	t.Helper()
	long := []redislock.Option{redislock.FallbackCheckForTest(30 * time.Second), redislock.WithTTL(30 * time.Second)}
	name := lockName(t)
	a := newMutex(t, newClient(t, newRedis(t, holderAddr), long...), name)
	b := newMutex(t, newClient(t, newNamedRedis(t, waiterAddr, name), long...), name)
	ctx := t.Context()
	if _, err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	w := &waiter{name: name, admin: newRedis(t, holderAddr), done: make(chan error, 1)}
	go func() {
		_, err := b.Lock(ctx)
		w.at = time.Now()
		w.done <- err
	}()
	t.Cleanup(func() { _ = b.Unlock(context.Background()) })
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		sub, tried := waiterState(ctx, w.admin, name)
		return sub && tried
	}, "the waiter to subscribe and find the lock held")
	return a, w
}

// took waits up to 10 s for the waiter's Lock and returns when it took the lock.
func (w *waiter) took(t *testing.T, after string) time.Time {
	t.Helper()
	select {
	case err := <-w.done:
		if err != nil {
			t.Fatal(err)
		}
		return w.at
	case <-time.After(10 * time.Second):
		t.Fatalf("waiter not woken within 10 s of %s (fallback check 30 s)", after)
		return time.Time{}
	}
}

// TestIntegrationWatchdogKeepsHold: with a TTL of 300 ms, a hold lasts five TTLs and more; the key
// keeps its TTL and nobody else gets in.
func TestIntegrationWatchdogKeepsHold(t *testing.T) {
	t.Parallel()
	const ttl = 300 * time.Millisecond
	rdb := newRedis(t, testenv.Redis(t))
	c := newClient(t, rdb, redislock.WithTTL(ttl))
	name := lockName(t)
	a, b := newMutex(t, c, name), newMutex(t, c, name)
	ctx := t.Context()
	l, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	until := time.After(5 * ttl)
	check := time.NewTicker(ttl / 2)
	defer check.Stop()
	for done := false; !done; {
		select {
		case <-l.Done():
			t.Fatalf("hold lost: %v", l.Err())
		case <-until:
			done = true
		case <-check.C:
			if _, err := b.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
				t.Fatalf("TryLock while held: %v, want ErrLocked", err)
			}
		}
	}
	if pttl, err := rdb.PTTL(ctx, key(name)).Result(); err != nil || pttl <= 0 || pttl > ttl {
		t.Errorf("PTTL %v (%v), want in (0, %v]", pttl, err, ttl)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationRenewalFailureReportedFirst: holder A's connection goes through a proxy that is
// cut; B, connected directly, takes the lock once A's key expires. A's lease ended before B got in,
// with a cause wrapping ErrLockLost.
func TestIntegrationRenewalFailureReportedFirst(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second // drift allowance 32 ms: how much earlier A must learn
	addr := testenv.Redis(t)
	p := testenv.NewRawProxy(t, addr)
	ca := newClient(t, newRedis(t, p.Addr()), redislock.WithTTL(ttl))
	cb := newClient(t, newRedis(t, addr), redislock.WithTTL(ttl))
	name := lockName(t)
	a, b := newMutex(t, ca, name), newMutex(t, cb, name)
	ctx := t.Context()
	la, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	aDone := make(chan time.Time, 1) // when A's Done was seen closed, for the log
	go func() {
		<-la.Done()
		aDone <- time.Now()
	}()
	cut := time.Now()
	p.Down()
	lb, err := b.Lock(ctx)
	bAt := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-la.Done():
	default:
		t.Fatalf("B holds the lock (%v after the cut) and A's lease has not ended", bAt.Sub(cut))
	}
	aAt := <-aDone
	if !errors.Is(la.Err(), lock.ErrLockLost) {
		t.Errorf("A's lease ended with %v, want ErrLockLost", la.Err())
	}
	if !la.Token().Less(lb.Token()) {
		t.Errorf("B's token %s not above A's %s", lb.Token(), la.Token())
	}
	t.Logf("cut at 0; A told at %v; B in at %v (TTL %v)", aAt.Sub(cut).Round(time.Millisecond), bAt.Sub(cut).Round(time.Millisecond), ttl)
	// A's lost hold must be unlocked before A can lock again.
	if _, err := a.TryLock(ctx); err == nil || errors.Is(err, lock.ErrLocked) {
		t.Errorf("TryLock on A's lost hold: %v, want the lost-hold error", err)
	}
	_ = a.Unlock(ctx) // through the cut proxy it cannot reach Redis; B's key is not A's to delete anyway
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationClose: Close ends the holds (ErrLockLost and ErrClosed), releases their keys and
// refuses new locks; it is idempotent and leaves the go-redis client open.
func TestIntegrationClose(t *testing.T) {
	t.Parallel()
	rdb := newRedis(t, testenv.Redis(t))
	c, err := redislock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	name := lockName(t)
	m := newMutex(t, c, name)
	ctx := t.Context()
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if !errors.Is(l.Err(), lock.ErrLockLost) || !errors.Is(l.Err(), lock.ErrClosed) {
		t.Errorf("lease after Close: %v, want ErrLockLost and ErrClosed", l.Err())
	}
	if n, err := rdb.Exists(ctx, key(name)).Result(); err != nil || n != 0 {
		t.Errorf("key after Close: %d (%v), want gone (and the go-redis client still open)", n, err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Errorf("Unlock of the lost hold: %v", err)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("TryLock after Close: %v, want ErrClosed", err)
	}
}

// TestInvalidOptions: bad input is refused with an error wrapping lock.ErrInvalidOption.
func TestInvalidOptions(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = rdb.Close() })
	var nilClient *redis.Client
	long := string(make([]byte, redislock.MaxNameLen+1))
	cases := []struct {
		name string
		do   func() error
	}{
		{"nil client", func() error { _, err := redislock.New(nil); return err }},
		{"typed nil client", func() error { _, err := redislock.New(nilClient); return err }},
		{"zero TTL", func() error { _, err := redislock.New(rdb, redislock.WithTTL(0)); return err }},
		{"negative TTL", func() error { _, err := redislock.New(rdb, redislock.WithTTL(-time.Second)); return err }},
		{"sub-millisecond TTL", func() error { _, err := redislock.New(rdb, redislock.WithTTL(time.Microsecond)); return err }},
		{"renewal equal to TTL", func() error {
			_, err := redislock.New(rdb, redislock.WithTTL(time.Second), redislock.RenewEveryForTest(time.Second))
			return err
		}},
		{"renewal above TTL", func() error {
			_, err := redislock.New(rdb, redislock.WithTTL(time.Second), redislock.RenewEveryForTest(2*time.Second))
			return err
		}},
		{"renewal above TTL minus drift", func() error {
			_, err := redislock.New(rdb, redislock.WithTTL(time.Second), redislock.RenewEveryForTest(990*time.Millisecond))
			return err
		}},
		{"zero renewal", func() error { _, err := redislock.New(rdb, redislock.RenewEveryForTest(0)); return err }},
		{"zero fallback", func() error { _, err := redislock.New(rdb, redislock.FallbackCheckForTest(0)); return err }},
		{"negative drift", func() error { _, err := redislock.New(rdb, redislock.ClockDriftForTest(-1)); return err }},
		{"no redlock clients", func() error { _, err := redislock.NewRedlock(nil); return err }},
		{"nil redlock client", func() error {
			_, err := redislock.NewRedlock([]redis.UniversalClient{rdb, nil})
			return err
		}},
		{"same redlock client twice", func() error {
			_, err := redislock.NewRedlock([]redis.UniversalClient{rdb, rdb, rdb})
			return err
		}},
		{"empty name", func() error { _, err := mustClient(t, rdb).NewMutex(""); return err }},
		{"long name", func() error { _, err := mustClient(t, rdb).NewMutex(long); return err }},
		{"long data", func() error {
			_, err := mustClient(t, rdb).NewMutex("n", redislock.WithData(string(make([]byte, redislock.MaxDataLen+1))))
			return err
		}},
		{"empty elector id", func() error { _, err := mustClient(t, rdb).NewElector("n", ""); return err }},
		{"empty elector name", func() error { _, err := mustClient(t, rdb).NewElector("", "id"); return err }},
		{"long redlock name", func() error {
			r, err := redislock.NewRedlock([]redis.UniversalClient{rdb})
			if err != nil {
				return err
			}
			defer r.Close()
			_, err = r.NewMutex(long)
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); !errors.Is(err, lock.ErrInvalidOption) {
				t.Errorf("error %v, want one wrapping lock.ErrInvalidOption", err)
			}
		})
	}
	// The limits themselves are accepted.
	if _, err := mustClient(t, rdb).NewMutex(long[:redislock.MaxNameLen]); err != nil {
		t.Errorf("a name of MaxNameLen bytes: %v", err)
	}
}

func mustClient(t *testing.T, rdb redis.UniversalClient) *redislock.Client {
	t.Helper()
	c, err := redislock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
