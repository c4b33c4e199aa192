package zklock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
)

// viaProxy returns a Session whose only connection to the ensemble goes through a proxy the test
// controls, and the proxy.
// proxied starts a failure test in parallel with the others: the servers, the test's lock path,
// and a session through a proxy to the first server, which the test cuts.
func proxied(t *testing.T) (servers []string, path string, s *zklock.Session, p *testenv.Proxy) {
	t.Helper()
	t.Parallel()
	servers = testenv.ZK(t)
	path = testenv.ZKRoot(t) + "/lock"
	s, p = viaProxy(t, servers)
	return servers, path, s, p
}

// held returns m's lease, failing the test unless Lock succeeds.
func held(t *testing.T, m *zklock.Mutex) lock.Lease {
	t.Helper()
	l, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func viaProxy(t *testing.T, servers []string) (*zklock.Session, *testenv.Proxy) {
	t.Helper()
	p := testenv.NewProxy(t, servers[0])
	return session(t, []string{p.Addr()}), p
}

// TestIntegrationCreateReplyLost: the answer to the lock node's create is lost with the
// connection; the protected create finds its node again: no orphan, the lock is acquired once.
func TestIntegrationCreateReplyLost(t *testing.T) {
	servers, path, s, p := proxied(t)
	observer := session(t, servers)
	m := mutex(t, s, path)
	// A first round creates the lock path, so the next create is the lock node's.
	if _, err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	p.DropNextReply()
	held(t, m)
	if p.Dropped() != 1 {
		t.Fatalf("%d replies dropped, want 1", p.Dropped())
	}
	st := s.Stats()
	if st.Recovered != 1 {
		t.Fatalf("Stats.Recovered = %d, want 1 (the create's node found again)", st.Recovered)
	}
	if names := children(t, observer, path); len(names) != 1 || path+"/"+names[0] != m.Node() {
		t.Fatalf("children %v, want only our node %s", names, m.Node())
	}
	if err := m.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitChildren(t, observer, path, 0)
}

// TestIntegrationUnlockReplyLost: the answer to the holder's delete is lost; Unlock still
// succeeds, and the retried delete never touches the next holder's node.
func TestIntegrationUnlockReplyLost(t *testing.T) {
	servers, path, s, p := proxied(t)
	a := mutex(t, s, path)
	b := mutex(t, session(t, servers), path)
	if _, err := a.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	bl := make(chan lock.Lease, 1)
	go func() {
		l, err := b.Lock(t.Context())
		if err != nil {
			t.Error(err)
		}
		bl <- l
	}()
	observer := session(t, servers)
	waitChildren(t, observer, path, 2)
	p.DropNextReply()
	if err := a.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock with its reply lost: %v", err)
	}
	if p.Dropped() != 1 {
		t.Fatalf("%d replies dropped, want 1", p.Dropped())
	}
	l := <-bl
	if l == nil {
		t.FailNow()
	}
	if err := a.Unlock(t.Context()); err != nil { // again: nothing happens
		t.Fatal(err)
	}
	if ok, _, err := observer.Conn().Exists(b.Node()); err != nil || !ok {
		t.Fatalf("the next holder's node %s: exists=%v err=%v", b.Node(), ok, err)
	}
	if l.Err() != nil {
		t.Fatalf("the next holder lost its lock: %v", l.Err())
	}
	if err := b.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationHolderSessionExpires: the holder is cut off from the ensemble; it learns that it
// lost the lock within the session timeout, and another session takes the lock.
func TestIntegrationHolderSessionExpires(t *testing.T) {
	servers, path, s, p := proxied(t)
	a := mutex(t, s, path)
	la := held(t, a)
	b := mutex(t, session(t, servers), path)
	cut := time.Now()
	p.Down()
	select {
	case <-la.Done():
	case <-time.After(testSessionTimeout):
		t.Fatalf("holder not told of the loss within the session timeout %v", testSessionTimeout)
	}
	told := time.Since(cut)
	if !errors.Is(la.Err(), lock.ErrLockLost) || !errors.Is(la.Err(), lock.ErrSessionExpired) {
		t.Fatalf("lease Err = %v, want ErrLockLost and ErrSessionExpired", la.Err())
	}
	if la.Context().Err() == nil {
		t.Fatal("the holder's context was not cancelled")
	}
	lb := held(t, b)
	took := time.Since(cut)
	t.Logf("holder told after %v; next holder acquired after %v (session timeout %v)", told.Round(time.Millisecond), took.Round(time.Millisecond), testSessionTimeout)
	if told > took {
		t.Fatalf("the old holder learned of its loss (%v) after the next holder took the lock (%v)", told, took)
	}
	if !la.Token().Less(lb.Token()) {
		t.Fatalf("token %s of the next holder not above %s", lb.Token(), la.Token())
	}
	// A lost hold must be unlocked before the Mutex locks again.
	if _, err := a.Lock(t.Context()); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("Lock before unlocking the lost hold = %v, want ErrLockLost", err)
	}
	if err := a.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	p.Up()
	if err := b.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := a.Lock(ctx); err != nil { // on a new ZooKeeper session
		t.Fatalf("Lock after the connection came back: %v", err)
	}
	if st := s.Stats(); st.Expirations < 1 || st.Sessions < 2 {
		t.Fatalf("stats %+v: want an expiration and a second session", st)
	}
	if err := a.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationWaiterSessionExpires: a waiter cut off from the ensemble returns promptly with
// ErrSessionExpired, not when its predecessor goes.
func TestIntegrationWaiterSessionExpires(t *testing.T) {
	t.Parallel()
	servers := testenv.ZK(t)
	path := testenv.ZKRoot(t) + "/lock"
	holder := mutex(t, session(t, servers), path)
	if _, err := holder.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	s, p := viaProxy(t, servers)
	errc := make(chan error, 1)
	go func() {
		_, err := mutex(t, s, path).Lock(t.Context())
		errc <- err
	}()
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool { return s.Stats().Waiting == 1 }, "the waiter to wait")
	cut := time.Now()
	p.Down()
	select {
	case err := <-errc:
		if !errors.Is(err, lock.ErrSessionExpired) {
			t.Fatalf("waiter returned %v, want ErrSessionExpired", err)
		}
		t.Logf("waiter returned after %v: %v", time.Since(cut).Round(time.Millisecond), err)
	case <-time.After(testSessionTimeout + time.Second):
		t.Fatal("waiter still waiting after the session timeout")
	}
	p.Up()
	if err := holder.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationShortOutageKeepsLock: an outage shorter than the session timeout keeps the lock;
// the holder re-verifies its node when the connection comes back.
func TestIntegrationShortOutageKeepsLock(t *testing.T) {
	servers, path, s, p := proxied(t)
	a := mutex(t, s, path)
	la := held(t, a)
	p.Down()
	time.Sleep(testSessionTimeout / 4) // the outage itself
	p.Up()
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return s.Conn().State().String() == "StateHasSession"
	}, "the session to reconnect")
	if la.Err() != nil {
		t.Fatalf("lock lost after a %v outage: %v", testSessionTimeout/4, la.Err())
	}
	if st := s.Stats(); st.Expirations != 0 {
		t.Fatalf("stats %+v: the session was given up", st)
	}
	if _, err := mutex(t, session(t, servers), path).TryLock(t.Context()); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("another session's TryLock = %v, want ErrLocked", err)
	}
	if err := a.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationElectionOutages: a leader cut off for less than the session timeout keeps its
// leadership; cut off for longer it loses it, another candidate leads, and when it comes back
// there is exactly one leader.
func TestIntegrationElectionOutages(t *testing.T) {
	t.Parallel()
	servers := testenv.ZK(t)
	path := testenv.ZKRoot(t) + "/election"
	sa, p := viaProxy(t, servers)
	sb := session(t, servers)
	ea, err := zklock.NewElector(sa, path, "a")
	if err != nil {
		t.Fatal(err)
	}
	eb, err := zklock.NewElector(sb, path, "b")
	if err != nil {
		t.Fatal(err)
	}
	var leading atomic.Int32 // candidates inside fn right now
	var maxLeading atomic.Int32
	var terms atomic.Int32
	run := func(e lock.Elector) func(ctx context.Context, l lock.Leadership) error {
		return func(ctx context.Context, l lock.Leadership) error {
			n := leading.Add(1)
			terms.Add(1)
			if n > maxLeading.Load() {
				maxLeading.Store(n)
			}
			<-ctx.Done()
			leading.Add(-1)
			return nil
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 2)
	go func() { done <- ea.RunWhileLeader(ctx, run(ea)) }()
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool { return terms.Load() == 1 }, "a to lead")
	go func() { done <- eb.RunWhileLeader(ctx, run(eb)) }()
	leaderIs := func(want string) bool {
		id, err := eb.Leader(ctx)
		return err == nil && id == want
	}
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool { return leaderIs("a") && sb.Stats().Waiting == 1 }, "b to wait behind a")

	// Short: a keeps leading.
	p.Down()
	time.Sleep(testSessionTimeout / 4)
	p.Up()
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return sa.Conn().State().String() == "StateHasSession"
	}, "a to reconnect")
	if terms.Load() != 1 || !leaderIs("a") {
		t.Fatalf("after a short outage: %d terms, leader a = %v; want a still leading", terms.Load(), leaderIs("a"))
	}

	// Long: a loses, b leads; then a comes back and waits behind b.
	p.Down()
	testenv.Eventually(t, 3*testSessionTimeout, 10*time.Millisecond, func() bool { return terms.Load() == 2 && leaderIs("b") }, "b to lead")
	p.Up()
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool { return sa.Stats().Waiting == 1 }, "a to campaign again behind b")
	if got := leading.Load(); got != 1 {
		t.Fatalf("%d leaders at once after the outage, want 1", got)
	}
	if maxLeading.Load() != 1 {
		t.Fatalf("at some point %d candidates led at once", maxLeading.Load())
	}
	cancel()
	for i := 0; i < 2; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestIntegrationResignHandsOver: after Resign the next candidate leads within 200 ms; observers
// see each change.
func TestIntegrationResignHandsOver(t *testing.T) {
	t.Parallel()
	servers := testenv.ZK(t)
	path := testenv.ZKRoot(t) + "/election"
	ea, err := zklock.NewElector(session(t, servers), path, "a")
	if err != nil {
		t.Fatal(err)
	}
	eb, err := zklock.NewElector(session(t, servers), path, "b")
	if err != nil {
		t.Fatal(err)
	}
	observer, err := zklock.NewElector(session(t, servers), path, "observer")
	if err != nil {
		t.Fatal(err)
	}
	octx, ocancel := context.WithCancel(t.Context())
	seen := observer.Observe(octx)
	if id := <-seen; id != "" {
		t.Fatalf("first observation %q, want no leader", id)
	}
	if _, err := observer.Leader(t.Context()); !errors.Is(err, lock.ErrNoLeader) {
		t.Fatalf("Leader with no candidates = %v, want ErrNoLeader", err)
	}
	la, err := ea.Campaign(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if id := <-seen; id != "a" {
		t.Fatalf("observed %q, want a", id)
	}
	bc := make(chan lock.Leadership, 1)
	go func() {
		l, err := eb.Campaign(t.Context())
		if err != nil {
			t.Error(err)
		}
		bc <- l
	}()
	waitChildren(t, session(t, servers), path, 2) // b entered the election
	start := time.Now()
	if err := la.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	lb := <-bc
	took := time.Since(start)
	t.Logf("b leads %v after a resigned", took)
	if took > 200*time.Millisecond {
		t.Fatalf("b led %v after a resigned, want within 200ms", took)
	}
	if !errors.Is(la.Err(), lock.ErrNotHeld) {
		t.Fatalf("resigned leadership Err = %v", la.Err())
	}
	if id := <-seen; id != "b" {
		t.Fatalf("observed %q, want b", id)
	}
	if id, err := observer.Leader(t.Context()); err != nil || id != "b" {
		t.Fatalf("Leader = %q, %v; want b", id, err)
	}
	if err := lb.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	if id := <-seen; id != "" {
		t.Fatalf("observed %q, want no leader", id)
	}
	ocancel()
	for range seen { // closed when ctx ends
	}
}

// TestIntegrationDeposedHolderFenced: a holder cut off from the ensemble loses the lock; the next
// holder writes with its token; the old holder, writing late with its own token, is refused.
func TestIntegrationDeposedHolderFenced(t *testing.T) {
	t.Parallel()
	servers := testenv.ZK(t)
	db := testenv.PG(t)
	path := testenv.ZKRoot(t) + "/lock"
	ctx := t.Context()
	fence, err := fence.New(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "create table state(id int primary key, owner text)"); err != nil {
		t.Fatal(err)
	}
	write := func(owner string, tok lock.Token) error {
		return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			if err := fence.Check(ctx, tx, "state", tok); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "insert into state values (1, $1) on conflict (id) do update set owner = excluded.owner", owner)
			return err
		})
	}
	s, p := viaProxy(t, servers)
	a := mutex(t, s, path)
	la, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := write("a", la.Token()); err != nil {
		t.Fatalf("the holder's write: %v", err)
	}
	p.Down()
	<-la.Done()
	b := mutex(t, session(t, servers), path)
	lb, err := b.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := write("b", lb.Token()); err != nil {
		t.Fatalf("the new holder's write: %v", err)
	}
	err = write("a", la.Token()) // a wakes late and writes as if it still held the lock
	if !errors.Is(err, lock.ErrFenced) {
		t.Fatalf("the deposed holder's write = %v, want ErrFenced", err)
	}
	var owner string
	if err := db.Pool.QueryRow(ctx, "select owner from state where id = 1").Scan(&owner); err != nil || owner != "b" {
		t.Fatalf("owner = %q (%v), want b", owner, err)
	}
	p.Up()
	_ = a.Unlock(ctx)
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
