package zklock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
)

func TestNewMutexRejectsBadInput(t *testing.T) {
	for _, p := range []string{"", "relative", "/", "/trailing/", "/a//b", "/" + strings.Repeat("x", zklock.MaxPathLen)} {
		if _, err := zklock.NewMutex(&zklock.Session{}, p); !errors.Is(err, lock.ErrInvalidOption) {
			t.Errorf("NewMutex(%q) error = %v, want ErrInvalidOption", p, err)
		}
	}
	if _, err := zklock.NewMutex(nil, "/ok"); !errors.Is(err, lock.ErrInvalidOption) {
		t.Errorf("NewMutex(nil session) error = %v, want ErrInvalidOption", err)
	}
	if _, err := zklock.NewSession(t.Context(), nil, zklock.WithInsecureWorldACL()); !errors.Is(err, lock.ErrInvalidOption) {
		t.Errorf("NewSession(no servers) error = %v, want ErrInvalidOption", err)
	}
	for _, d := range []time.Duration{-time.Second, 0, time.Millisecond} {
		if _, err := zklock.NewSession(t.Context(), []string{"127.0.0.1:1"}, zklock.WithSessionTimeout(d), zklock.WithInsecureWorldACL()); !errors.Is(err, lock.ErrInvalidOption) {
			t.Errorf("NewSession(timeout %v) error = %v, want ErrInvalidOption", d, err)
		}
	}
	if _, err := zklock.NewElector(&zklock.Session{}, "/ok", ""); !errors.Is(err, lock.ErrInvalidOption) {
		t.Errorf("NewElector(empty id) error = %v, want ErrInvalidOption", err)
	}
	if _, err := lock.NewElection(nil, "x", "id", func(context.Context) (string, error) { return "", nil }, nil, nil); !errors.Is(err, lock.ErrInvalidOption) {
		t.Errorf("NewElection(nil Locker) error = %v, want ErrInvalidOption", err)
	}
}

func TestIntegrationLockUnlockReentrantTry(t *testing.T) {
	t.Parallel()
	servers := testenv.ZK(t)
	path := testenv.ZKRoot(t) + "/lock"
	s1, s2 := session(t, servers), session(t, servers)
	a, b := mutex(t, s1, path), mutex(t, s2, path)
	ctx := t.Context()

	l1, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l1again, err := a.Lock(ctx) // reentrant: same lease, no new node
	if err != nil || l1again != l1 {
		t.Fatalf("reentrant Lock = %v, %v; want the same lease", l1again, err)
	}
	if n := len(children(t, s1, path)); n != 1 {
		t.Fatalf("%d children after a reentrant Lock, want 1", n)
	}
	if _, err := b.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryLock while held = %v, want ErrLocked", err)
	}
	waitChildren(t, s1, path, 1) // TryLock removed its node
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l1.Err() != nil {
		t.Fatalf("lease ended after the first of two Unlocks: %v", l1.Err())
	}
	if _, err := b.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryLock while still held once = %v, want ErrLocked", err)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l1.Done():
	default:
		t.Fatal("Done not closed after the last Unlock")
	}
	if !errors.Is(l1.Err(), lock.ErrNotHeld) || l1.Context().Err() == nil {
		t.Fatalf("after Unlock: Err = %v, ctx err = %v", l1.Err(), l1.Context().Err())
	}
	if err := a.Unlock(ctx); err != nil { // twice is safe
		t.Fatalf("second Unlock: %v", err)
	}
	l2, err := b.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock on a free lock: %v", err)
	}
	if !l1.Token().Less(l2.Token()) {
		t.Fatalf("token %s of the next holder is not above %s", l2.Token(), l1.Token())
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	waitChildren(t, s1, path, 0)
}

func TestIntegrationLockCancelLeavesNothing(t *testing.T) {
	t.Parallel()
	servers := testenv.ZK(t)
	path := testenv.ZKRoot(t) + "/lock"
	s1, s2 := session(t, servers), session(t, servers)
	holder := mutex(t, s1, path)
	if _, err := holder.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := mutex(t, s2, path).Lock(ctx)
		errc <- err
	}()
	waitChildren(t, s1, path, 2)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock = %v, want context.Canceled", err)
	}
	waitChildren(t, s1, path, 1)
	if err := holder.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitChildren(t, s1, path, 0)
}

// TestIntegrationExclusionInProcess: 16 goroutines, each with its own Mutex on its own Session,
// take turns; the history shows one holder at a time and strictly increasing tokens.
func TestIntegrationExclusionInProcess(t *testing.T) {
	t.Parallel()
	servers := testenv.ZK(t)
	path := testenv.ZKRoot(t) + "/lock"
	var h history
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for i := 0; i < 16; i++ {
		s := session(t, servers)
		m := mutex(t, s, path)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				l, err := m.Lock(t.Context())
				if err != nil {
					errc <- err
					return
				}
				h.enter(l.Token())
				time.Sleep(time.Millisecond) // hold it for a moment so overlaps would show
				h.exit()
				if err := m.Unlock(t.Context()); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	h.check(t)
	if h.holds != 160 {
		t.Fatalf("%d holds, want 160", h.holds)
	}
}

// TestIntegrationFIFO: waiters acquire in the order their nodes were created.
func TestIntegrationFIFO(t *testing.T) {
	t.Parallel()
	servers := testenv.ZK(t)
	path := testenv.ZKRoot(t) + "/lock"
	s0 := session(t, servers)
	holder := mutex(t, s0, path)
	if _, err := holder.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	const n = 8
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		m := mutex(t, session(t, servers), path)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := m.Lock(t.Context()); err != nil {
				t.Error(err)
				return
			}
			order <- i
			if err := m.Unlock(t.Context()); err != nil {
				t.Error(err)
			}
		}()
		waitChildren(t, s0, path, i+2) // waiter i's node exists before waiter i+1 starts
	}
	if err := holder.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("waiter %d acquired in position %d", got, want)
		}
		want++
	}
	if want != n {
		t.Fatalf("%d waiters acquired, want %d", want, n)
	}
}

// TestIntegrationHerdEffect measures the watch notifications one release delivers: 1 for the fair
// lock, N-1 for the unfair mode, with N contenders.
func TestIntegrationHerdEffect(t *testing.T) {
	t.Parallel()
	const n = 8
	for _, tc := range []struct {
		name string
		opts []zklock.Option
		want int64
	}{
		{"fair", nil, 1},
		{"unfair", []zklock.Option{zklock.WithUnfair()}, n - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			servers := testenv.ZK(t)
			path := testenv.ZKRoot(t) + "/lock"
			s0 := session(t, servers)
			holder := mutex(t, s0, path, tc.opts...)
			if _, err := holder.Lock(t.Context()); err != nil {
				t.Fatal(err)
			}
			sessions := make([]*zklock.Session, n-1)
			acquired := make(chan *zklock.Mutex, n)
			var wg sync.WaitGroup
			for i := range sessions {
				sessions[i] = session(t, servers)
				m := mutex(t, sessions[i], path, tc.opts...)
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := m.Lock(t.Context()); err != nil {
						t.Error(err)
						return
					}
					acquired <- m
				}()
			}
			// Every waiter is waiting on its watch.
			testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
				var waiting int64
				for _, s := range sessions {
					waiting += s.Stats().Waiting
				}
				return waiting == int64(len(sessions))
			}, "all waiters to wait on their watches")
			if err := holder.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			next := <-acquired
			time.Sleep(300 * time.Millisecond) // notifications in flight arrive
			var events int64
			for _, s := range sessions {
				events += s.Stats().WatchEvents
			}
			t.Logf("%s: one release delivered %d watch notifications to %d waiters", tc.name, events, n-1)
			if events != tc.want {
				t.Errorf("one release delivered %d watch notifications, want %d", events, tc.want)
			}
			// Let everyone through so the goroutines end.
			if err := next.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n-2; i++ {
				m := <-acquired
				if err := m.Unlock(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			wg.Wait()
		})
	}
}

// TestIntegrationForeignChildrenIgnored: children that do not follow the lock naming do not
// block or confuse the recipe.
func TestIntegrationForeignChildrenIgnored(t *testing.T) {
	t.Parallel()
	servers := testenv.ZK(t)
	path := testenv.ZKRoot(t) + "/lock"
	s := session(t, servers)
	m := mutex(t, s, path)
	l, err := m.Lock(t.Context()) // creates the path
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"foreign", "lock-abc", "x-lock-12", "_c_junk-lock-"} {
		if _, err := s.Conn().Create(path+"/"+name, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	l2, err := m.TryLock(t.Context())
	if err != nil {
		t.Fatalf("TryLock with foreign children present: %v", err)
	}
	if !l.Token().Less(l2.Token()) {
		t.Fatalf("token %s not above %s", l2.Token(), l.Token())
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationTokenAfterParentRecreated: the sequence restarts when the lock path is deleted
// and created again; the token does not go backwards.
func TestIntegrationTokenAfterParentRecreated(t *testing.T) {
	t.Parallel()
	servers := testenv.ZK(t)
	path := testenv.ZKRoot(t) + "/lock"
	s := session(t, servers)
	var toks []lock.Token
	for round := 0; round < 3; round++ {
		m := mutex(t, s, path)
		for i := 0; i < 3; i++ {
			l, err := m.Lock(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			toks = append(toks, l.Token())
			if err := m.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Conn().Delete(path, -1); err != nil {
			t.Fatalf("delete the lock path: %v", err)
		}
	}
	for i := 1; i < len(toks); i++ {
		if !toks[i-1].Less(toks[i]) {
			t.Fatalf("token %s after %s: not increasing (all: %v)", toks[i], toks[i-1], toks)
		}
	}
	if toks[3].Seq != toks[0].Seq {
		t.Fatalf("sequence did not restart with the new parent (%v); the test does not test what it says", toks)
	}
}

func TestIntegrationSessionCloseEndsLease(t *testing.T) {
	t.Parallel()
	servers := testenv.ZK(t)
	path := testenv.ZKRoot(t) + "/lock"
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	s, err := zklock.NewSession(ctx, servers, zklock.WithSessionTimeout(testSessionTimeout), zkenv.Auth(t))
	if err != nil {
		t.Fatal(err)
	}
	m := mutex(t, s, path)
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other := mutex(t, session(t, servers), path)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("lease not ended by Session.Close")
	}
	if !errors.Is(l.Err(), lock.ErrLockLost) {
		t.Fatalf("Err after Close = %v, want ErrLockLost", l.Err())
	}
	if _, err := other.Lock(ctx); err != nil { // the closed session's node is gone at once
		t.Fatal(err)
	}
	if _, err := m.Lock(ctx); err == nil {
		t.Fatal("Lock on a closed session succeeded")
	}
	_ = m.Unlock(ctx)
	if _, err := m.Lock(ctx); !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("Lock after Close = %v, want ErrClosed", err)
	}
	_ = other.Unlock(ctx)
}
