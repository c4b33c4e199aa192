package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/pglock"
)

// advisoryPIDs returns the backends holding (granted) or waiting for the advisory lock of name.
func advisoryPIDs(t *testing.T, s *testenv.Schema, name string, granted bool) []int32 {
	t.Helper()
	r, _ := s.Pool.Query(context.Background(), `select pid from pg_locks
		where locktype = 'advisory' and objsubid = 1 and granted = $2
		and ((classid::bigint << 32) | objid::bigint) = $1`, pglock.AdvisoryKey(name), granted)
	pids, err := pgx.CollectRows(r, pgx.RowTo[int32])
	if err != nil {
		t.Fatalf("pg_locks: %v", err)
	}
	return pids
}

// waitOnServer waits until one backend waits for the advisory lock of name.
func waitOnServer(t *testing.T, s *testenv.Schema, name string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		return len(advisoryPIDs(t, s, name, false)) == 1
	}, "a waiter on the server")
}

func TestIntegrationAdvisoryExclusion(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	name := "advisory-" + testenv.Name(t) // advisory keys are per database, not per schema
	ca := client(t, pool(t, s.URL))
	cb := client(t, pool(t, s.URL))
	a := advisory(t, ca, name)
	b := advisory(t, cb, name)

	la := held(t, ctx, a)
	if again := held(t, ctx, a); again != la {
		t.Fatal("reentrant Lock returned another lease")
	}
	if _, err := b.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("b.TryLock while a holds: %v, want ErrLocked", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := b.Lock(wctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("b.Lock with a short ctx while a holds: %v, want DeadlineExceeded", err)
	}
	// Nothing left: b no longer waits on the server, and its connection is back in its pool.
	if w := advisoryPIDs(t, s, name, false); len(w) != 0 {
		t.Fatalf("backends still waiting after b gave up: %v", w)
	}
	if got := advisoryPIDs(t, s, name, true); len(got) != 1 {
		t.Fatalf("holders = %v, want a's backend only", got)
	}
	for range 2 {
		if err := a.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !isDone(la) {
		t.Fatal("a's lease not over after its last Unlock")
	}
	if got := advisoryPIDs(t, s, name, true); len(got) != 0 {
		t.Fatalf("holders after a's Unlock: %v", got)
	}
	lb, err := b.TryLock(ctx)
	if err != nil {
		t.Fatalf("b.TryLock after a released: %v", err)
	}
	if !la.Token().Less(lb.Token()) {
		t.Fatalf("token %s after %s", lb.Token(), la.Token())
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationAdvisoryHandoff: a waiter in pg_advisory_lock gets the lock when the holder
// unlocks.
func TestIntegrationAdvisoryHandoff(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	name := "advisory-" + testenv.Name(t)
	c := client(t, s.Pool)
	a := advisory(t, c, name)
	b := advisory(t, c, name)
	la := held(t, ctx, a)
	got := make(chan error, 1)
	go func() {
		_, err := b.Lock(ctx)
		got <- err
	}()
	waitOnServer(t, s, name)
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("b.Lock: %v", err)
	}
	if isDone(la) != true {
		t.Fatal("a's lease not over")
	}
	_ = b.Unlock(ctx)
}

// TestIntegrationAdvisoryConnectionLoss: killing the holder's backend ends its lease, and another
// holder gets in.
func TestIntegrationAdvisoryConnectionLoss(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	name := "advisory-" + testenv.Name(t)
	ca := client(t, pool(t, s.URL), pglock.WithTTL(time.Second), pglock.RenewEveryForTest(100*time.Millisecond))
	cb := client(t, pool(t, s.URL))
	a := advisory(t, ca, name)
	b := advisory(t, cb, name)

	la := held(t, ctx, a)
	pids := advisoryPIDs(t, s, name, true)
	if len(pids) != 1 {
		t.Fatalf("holders = %v, want one", pids)
	}
	killed := time.Now()
	var ok bool
	if err := s.Pool.QueryRow(ctx, `select pg_terminate_backend($1)`, pids[0]).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d): %v, %v", pids[0], ok, err)
	}
	select {
	case <-la.Done():
	case <-ctx.Done():
		t.Fatal("a's lease did not end after its backend was terminated")
	}
	t.Logf("lease ended %v after pg_terminate_backend (check every 100 ms)", time.Since(killed).Round(time.Millisecond))
	if !errors.Is(la.Err(), lock.ErrLockLost) {
		t.Fatalf("a's lease error: %v, want ErrLockLost", la.Err())
	}
	lb := held(t, ctx, b)
	if !la.Token().Less(lb.Token()) {
		t.Fatalf("token %s after %s", lb.Token(), la.Token())
	}
	if _, err := a.Lock(ctx); err == nil {
		t.Fatal("a.Lock with a lost hold not unlocked succeeded")
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatalf("a.Unlock of the lost hold: %v", err)
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationAdvisoryClose: Close ends a waiting Lock with ErrClosed and a hold with
// ErrLockLost, and gives every connection back.
func TestIntegrationAdvisoryClose(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	name := "advisory-" + testenv.Name(t)
	pa, pb := pool(t, s.URL), pool(t, s.URL)
	ca, err := pglock.New(pa)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := pglock.New(pb)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	a, b := advisory(t, ca, name), advisory(t, cb, name)
	la := held(t, ctx, a)
	got := make(chan error, 1)
	go func() {
		_, err := b.Lock(ctx)
		got <- err
	}()
	waitOnServer(t, s, name)
	_ = cb.Close()
	if err := <-got; !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("b.Lock waiting at Close: %v, want ErrClosed", err)
	}
	_ = ca.Close()
	if !errors.Is(la.Err(), lock.ErrClosed) || !errors.Is(la.Err(), lock.ErrLockLost) {
		t.Fatalf("a's lease after Close: %v", la.Err())
	}
	// Close closed the connections; their backends end a moment later.
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		return len(advisoryPIDs(t, s, name, false))+len(advisoryPIDs(t, s, name, true)) == 0
	}, "the closed sessions' lock and wait to be gone")
	// A closed connection released to the pool is destroyed in the background (pgxpool): it
	// counts as acquired until that is done.
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		return pa.Stat().AcquiredConns()+pb.Stat().AcquiredConns() == 0
	}, "the closed Clients' connections given back to their pools")
}

// TestIntegrationAdvisoryKeepaliveReset: the keepalive settings a hold puts on its session are
// reset before the connection goes back to the pool.
func TestIntegrationAdvisoryKeepaliveReset(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	one := pool(t, s.URL, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
	c := client(t, one)
	settings := func() []string {
		var v []string
		for _, n := range []string{"tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count", "tcp_user_timeout"} {
			var x string
			if err := one.QueryRow(ctx, "select current_setting($1)", n).Scan(&x); err != nil {
				t.Fatal(err)
			}
			v = append(v, x)
		}
		return v
	}
	before := settings()
	m := advisory(t, c, "advisory-"+testenv.Name(t))
	held(t, ctx, m)
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if after := settings(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("settings after a hold: %v, before: %v", after, before)
	}
}

// Through PgBouncer (transaction pooling) a session advisory lock would be held by whichever
// client the pooler serves next: TryLock and Lock refuse with ErrPooled, hold nothing and leave
// no lock on the server; the lease Mutex works through the pooler. Before, the advisory lock was
// granted to a server session the pooler then handed to other clients.
func TestIntegrationAdvisoryRefusedThroughPooler(t *testing.T) {
	t.Parallel()
	s := testenv.PGBouncer(t)
	ctx := t.Context()
	c := client(t, pool(t, s.URL))
	name := "advisory-" + testenv.Name(t)
	a := advisory(t, c, name)
	if _, err := a.TryLock(ctx); !errors.Is(err, pglock.ErrPooled) {
		t.Fatalf("TryLock through PgBouncer: %v, want ErrPooled", err)
	}
	if _, err := a.Lock(ctx); !errors.Is(err, pglock.ErrPooled) {
		t.Fatalf("Lock through PgBouncer: %v, want ErrPooled", err)
	}
	if pids := advisoryPIDs(t, s, name, true); len(pids) != 0 {
		t.Fatalf("backends %v hold the advisory lock after the refusals", pids)
	}
	m, err := c.NewMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	held(t, ctx, m)
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("lease Mutex through PgBouncer: Unlock: %v", err)
	}
}
