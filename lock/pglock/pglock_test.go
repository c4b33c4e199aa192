package pglock_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/pglock"
)

// client returns a migrated Client on pool, closed when the test ends.
func client(t *testing.T, pool *pgxpool.Pool, opts ...pglock.Option) *pglock.Client {
	t.Helper()
	c, err := pglock.New(pool, append([]pglock.Option{pglock.WithLogger(testenv.Logger(t))}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return c
}

func mutex(t *testing.T, c *pglock.Client, name string, opts ...pglock.MutexOption) *pglock.Mutex {
	t.Helper()
	m, err := c.NewMutex(name, opts...)
	if err != nil {
		t.Fatalf("NewMutex(%s): %v", name, err)
	}
	return m
}

func advisory(t *testing.T, c *pglock.Client, name string) *pglock.AdvisoryMutex {
	t.Helper()
	m, err := c.NewAdvisoryMutex(name)
	if err != nil {
		t.Fatalf("NewAdvisoryMutex(%s): %v", name, err)
	}
	return m
}

// held takes l with Lock or fails the test.
func held(t *testing.T, ctx context.Context, l lock.Locker) lock.Lease {
	t.Helper()
	ls, err := l.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	return ls
}

// pool returns a pool of its own on url (closed when the test ends), with opts applied to its
// configuration.
func pool(t *testing.T, url string, opts ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	for _, o := range opts {
		o(cfg)
	}
	p, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// poolViaProxy returns a pool on the test's schema whose connections go through a proxy the test
// can cut (testenv.NewRawProxy), with a 1 s connect timeout.
func poolViaProxy(t *testing.T, s *testenv.Schema) (*pgxpool.Pool, *testenv.Proxy) {
	t.Helper()
	direct, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewRawProxy(t, net.JoinHostPort(direct.ConnConfig.Host, itoa(direct.ConnConfig.Port)))
	host, port, _ := net.SplitHostPort(proxy.Addr())
	return pool(t, s.URL, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.Host = host
		cfg.ConnConfig.Port = uint16(atoi(port))
		cfg.ConnConfig.ConnectTimeout = time.Second
	}), proxy
}

// rows returns the holders' data of the rows of name, live or expired, that were not released
// (a release frees the row, holder nil, and keeps it).
func rows(t *testing.T, s *testenv.Schema, name string) []string {
	t.Helper()
	r, _ := s.Pool.Query(context.Background(), `select data from txkit_locks where name = $1 and holder <> '00000000-0000-0000-0000-000000000000'`, name)
	out, err := pgx.CollectRows(r, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read rows: %v", err)
	}
	return out
}

// rowText returns expr (a system column such as ctid or xmax) of name's row, as text.
func rowText(t *testing.T, s *testenv.Schema, name, expr string) string {
	t.Helper()
	var v string
	if err := s.Pool.QueryRow(context.Background(), `select `+expr+`::text from txkit_locks where name = $1`, name).Scan(&v); err != nil {
		t.Fatalf("read %s of %s: %v", expr, name, err)
	}
	return v
}

// lockResult is what a Lock run in the background returned, and when.
type lockResult struct {
	at    time.Time
	lease lock.Lease
	err   error
}

// lockLater runs l.Lock(ctx) in the background.
func lockLater(ctx context.Context, l lock.Locker) <-chan lockResult {
	got := make(chan lockResult, 1)
	go func() {
		ls, err := l.Lock(ctx)
		got <- lockResult{time.Now(), ls, err}
	}()
	return got
}

// waiting sets up a holder a (holding name) and a waiter b (its Lock running, on a Client of its
// own whose connections are called app in pg_stat_activity), TTL 20 s and a 30 s fallback: a wait
// shorter than those was ended by a notification. It returns once b has tried once and its Client
// listens.
func waiting(t *testing.T, ctx context.Context, s *testenv.Schema, name string) (a, b *pglock.Mutex, got <-chan lockResult, app string) {
	t.Helper()
	app = "pglock-waiter-" + testenv.Name(t)
	waiterPool := pool(t, s.URL, func(cfg *pgxpool.Config) { cfg.ConnConfig.RuntimeParams["application_name"] = app })
	a = mutex(t, client(t, s.Pool, pglock.WithTTL(20*time.Second)), name)
	b = mutex(t, client(t, waiterPool, pglock.WithTTL(20*time.Second), pglock.FallbackCheckForTest(30*time.Second)), name)
	held(t, ctx, a)
	got = lockLater(ctx, b)
	// b has tried once (its last statement was the attempt) and its client listens.
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		var listening, tried bool
		err := s.Pool.QueryRow(ctx, `select
			coalesce(bool_or(query ilike 'listen %'), false),
			coalesce(bool_or(query ilike '%for update skip locked%' and state = 'idle'), false)
			from pg_stat_activity where application_name = $1`, app).Scan(&listening, &tried)
		return err == nil && listening && tried
	}, "the waiter to try once and listen")
	return a, b, got, app
}

func isDone(l lock.Lease) bool {
	select {
	case <-l.Done():
		return true
	default:
		return false
	}
}

func TestIntegrationReentrant(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	c := client(t, s.Pool)
	a := mutex(t, c, "reentrant", pglock.WithData("a"))
	b := mutex(t, c, "reentrant", pglock.WithData("b"))

	first := held(t, ctx, a)
	second := held(t, ctx, a)
	third, err := a.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock on the holding Mutex: %v", err)
	}
	if second != first || third != first {
		t.Fatalf("reentrant holds returned different leases")
	}
	for i := range 2 {
		if err := a.Unlock(ctx); err != nil {
			t.Fatalf("Unlock %d: %v", i+1, err)
		}
		if isDone(first) {
			t.Fatalf("hold ended after %d of 3 Unlocks", i+1)
		}
		if _, err := b.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("b.TryLock while a holds (after %d Unlocks): %v, want ErrLocked", i+1, err)
		}
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatalf("last Unlock: %v", err)
	}
	if !isDone(first) || !errors.Is(first.Err(), lock.ErrNotHeld) {
		t.Fatalf("after the last Unlock: done %v, Err %v; want done, ErrNotHeld", isDone(first), first.Err())
	}
	if got := rows(t, s, "reentrant"); len(got) != 0 {
		t.Fatalf("rows after the last Unlock: %v", got)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of a Mutex that holds nothing: %v", err)
	}
	if _, err := b.TryLock(ctx); err != nil {
		t.Fatalf("b.TryLock after a released: %v", err)
	}
	_ = b.Unlock(ctx)
}

func TestIntegrationTryLock(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	c := client(t, s.Pool)
	other := client(t, s.Pool) // another process, as far as the lock can tell
	a := mutex(t, c, "try", pglock.WithData("a"))
	b := mutex(t, other, "try", pglock.WithData("b"))

	la, err := a.TryLock(ctx)
	if err != nil {
		t.Fatalf("a.TryLock on a free lock: %v", err)
	}
	if _, err := b.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("b.TryLock while a holds: %v, want ErrLocked", err)
	}
	if got := rows(t, s, "try"); len(got) != 1 || got[0] != "a" {
		t.Fatalf("rows = %v, want [a]", got)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryLock(ctx)
	if err != nil {
		t.Fatalf("b.TryLock after a released: %v", err)
	}
	if !la.Token().Less(lb.Token()) {
		t.Fatalf("token %s after %s", lb.Token(), la.Token())
	}
	_ = b.Unlock(ctx)
}

// TestIntegrationCancelLeavesNothing: a Lock whose ctx ends while it waits, and attempts whose ctx
// ends at random points of their statement, leave no row behind.
func TestIntegrationCancelLeavesNothing(t *testing.T) {
	s, ctx := testenv.Parallel(t, 2*time.Minute)
	c := client(t, s.Pool)
	a := mutex(t, c, "cancel", pglock.WithData("a"))
	b := mutex(t, c, "cancel", pglock.WithData("b"))

	held(t, ctx, a)
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := b.Lock(wctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("b.Lock with a short ctx while a holds: %v, want DeadlineExceeded", err)
	}
	if got := rows(t, s, "cancel"); len(got) != 1 || got[0] != "a" {
		t.Fatalf("rows after b gave up = %v, want [a]", got)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// ctx ends while the attempt waits on the server (on another transaction's uncommitted row,
	// expired): the waiting attempt runs in a transaction of its own, which a cancel request stops
	// and which is rolled back, so Lock returns while the row is still locked, and takes nothing
	// when that transaction commits.
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // committed below
	if _, err := tx.Exec(ctx, `update txkit_locks set holder = gen_random_uuid(), data = 'expired',
		token = nextval('txkit_lock_tokens'), expires_at = now() - interval '1 hour' where name = 'cancel'`); err != nil {
		t.Fatal(err)
	}
	bctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := b.Lock(bctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("b.Lock whose ctx ended while its attempt waits on the server: %v, want DeadlineExceeded", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rows(t, s, "cancel"); len(got) != 1 || got[0] != "expired" {
		t.Fatalf("rows after an attempt cancelled mid-statement: %v, want only the transaction's own [expired]", got)
	}
	if _, err := s.Pool.Exec(ctx, `update txkit_locks set holder = '00000000-0000-0000-0000-000000000000', data = '' where name = 'cancel'`); err != nil {
		t.Fatal(err)
	}

	// Free lock, ctx ending somewhere between before the send and after the answer.
	var won, lost int
	for i := range 60 {
		actx, cancel := context.WithTimeout(ctx, time.Duration(i%20)*100*time.Microsecond)
		_, err := b.Lock(actx)
		cancel()
		if err == nil {
			won++
			if err := b.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
		} else {
			lost++
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("attempt %d: %v, want DeadlineExceeded", i, err)
			}
		}
		if got := rows(t, s, "cancel"); len(got) != 0 {
			t.Fatalf("attempt %d (err %v) left rows %v", i, err, got)
		}
	}
	t.Logf("60 attempts with ctx ending at 0-1.9 ms: %d took the lock, %d were cancelled; no row left", won, lost)
	if lost == 0 {
		t.Errorf("no attempt was cancelled: the test did not exercise cancellation")
	}
}

// TestIntegrationTokensIncrease: tokens rise strictly across holders, across the row's release
// (freed, kept) at every Unlock, and across a row taken over after expiry.
// TestIntegrationCancelWithoutConnection: a Lock whose ctx ends while it waits for a pool
// connection returns at once (it sent nothing, so it has nothing to clean up).
func TestIntegrationCancelWithoutConnection(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	one := pool(t, s.URL, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
	c := client(t, one)
	m := mutex(t, c, "no-connection")
	busy, err := one.Acquire(ctx) // the pool's only connection
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = m.Lock(lctx)
	took := time.Since(start)
	busy.Release()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock without a free connection: %v, want DeadlineExceeded", err)
	}
	if took > time.Second {
		t.Fatalf("Lock returned %v after a 100 ms ctx ended", took)
	}
	if got := rows(t, s, "no-connection"); len(got) != 0 {
		t.Fatalf("rows: %v", got)
	}
}

func TestIntegrationTokensIncrease(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	c1 := client(t, s.Pool)
	c2 := client(t, s.Pool)
	ms := []*pglock.Mutex{mutex(t, c1, "tokens"), mutex(t, c2, "tokens")}
	var last lock.Token
	for i := range 20 {
		m := ms[i%2]
		l := held(t, ctx, m)
		if !last.Less(l.Token()) || l.Token().Epoch != 0 {
			t.Fatalf("hold %d: token %s after %s", i, l.Token(), last)
		}
		last = l.Token()
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if got := rows(t, s, "tokens"); len(got) != 0 {
			t.Fatalf("row not freed at release: %v", got)
		}
		// The freed row stays: an insert's token, drawn before it can wait on another insert of
		// the name, is then never used after an earlier holder's.
		var free int
		if err := s.Pool.QueryRow(ctx, `select count(*) from txkit_locks where name = 'tokens'
			and holder = '00000000-0000-0000-0000-000000000000' and expires_at < now()`).Scan(&free); err != nil || free != 1 {
			t.Fatalf("freed rows after release: %d (%v), want 1", free, err)
		}
	}
	// A row left behind by a holder that vanished (expired), taken over: the token still rises.
	if _, err := s.Pool.Exec(ctx, `update txkit_locks set holder = gen_random_uuid(), data = 'ghost',
		token = nextval('txkit_lock_tokens'), expires_at = now() - interval '1 second' where name = 'tokens'`); err != nil {
		t.Fatal(err)
	}
	var ghost int64
	if err := s.Pool.QueryRow(ctx, `select token from txkit_locks where name = 'tokens'`).Scan(&ghost); err != nil {
		t.Fatal(err)
	}
	l := held(t, ctx, ms[0])
	if l.Token().Seq <= ghost || !last.Less(l.Token()) {
		t.Fatalf("token %s after an expired row with token %d (last %s)", l.Token(), ghost, last)
	}
	_ = ms[0].Unlock(ctx)
}

// TestIntegrationExpiredHolderToldFirst cuts holder A's connections (A's pool goes through a
// proxy), so A cannot renew: A's lease must end before B, on a direct pool, takes the lock.
func TestIntegrationExpiredHolderToldFirst(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	viaProxy, proxy := poolViaProxy(t, s)
	const ttl = 2 * time.Second
	ca := client(t, viaProxy, pglock.WithTTL(ttl), pglock.RenewEveryForTest(400*time.Millisecond))
	cb := client(t, s.Pool, pglock.WithTTL(ttl), pglock.FallbackCheckForTest(30*time.Second))
	a := mutex(t, ca, "expiry", pglock.WithData("a"))
	b := mutex(t, cb, "expiry", pglock.WithData("b"))

	la := held(t, ctx, a)
	got := lockLater(ctx, b)
	aDone := make(chan time.Time, 1)
	go func() {
		select {
		case <-la.Done():
			aDone <- time.Now()
		case <-ctx.Done():
			close(aDone)
		}
	}()
	cut := time.Now()
	proxy.Down()

	var rb lockResult
	select {
	case rb = <-got:
	case <-ctx.Done():
		t.Fatal("b never took the lock")
	}
	if rb.err != nil {
		t.Fatalf("b.Lock: %v", rb.err)
	}
	var doneAt time.Time
	select {
	case doneAt = <-aDone:
	default:
		t.Fatalf("b took the lock %v after the cut while a's lease was not over", rb.at.Sub(cut))
	}
	if !doneAt.Before(rb.at) {
		t.Fatalf("a told at %v, b in at %v (after the cut): a must be told first", doneAt.Sub(cut), rb.at.Sub(cut))
	}
	if !errors.Is(la.Err(), lock.ErrLockLost) {
		t.Fatalf("a's lease error %v, want ErrLockLost", la.Err())
	}
	if !la.Token().Less(rb.lease.Token()) {
		t.Fatalf("b's token %s not above a's %s", rb.lease.Token(), la.Token())
	}
	t.Logf("TTL %v: a told %v after the cut, b in %v after the cut (%v later)", ttl,
		doneAt.Sub(cut).Round(time.Millisecond), rb.at.Sub(cut).Round(time.Millisecond), rb.at.Sub(doneAt).Round(time.Millisecond))

	// a's lost hold blocks a until unlocked; its Unlock never deletes b's row.
	if _, err := a.TryLock(ctx); err == nil || errors.Is(err, lock.ErrLocked) {
		t.Fatalf("a.TryLock with a lost hold not unlocked: %v, want the lost-hold error", err)
	}
	proxy.Up()
	if err := a.Unlock(ctx); err != nil {
		t.Fatalf("a.Unlock of the lost hold: %v", err)
	}
	if got := rows(t, s, "expiry"); len(got) != 1 || got[0] != "b" {
		t.Fatalf("rows after a's Unlock = %v, want [b]", got)
	}
	if isDone(rb.lease) {
		t.Fatalf("b's lease ended: %v", rb.lease.Err())
	}
	_ = b.Unlock(ctx)
}

// TestIntegrationLockWaitsThroughOutage: a waiter whose connections to PostgreSQL are cut goes on
// waiting instead of failing, and takes the lock once it can reach the server again and the holder
// has released; TryLock, by contrast, reports the outage at once.
func TestIntegrationLockWaitsThroughOutage(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	viaProxy, proxy := poolViaProxy(t, s)
	ca := client(t, s.Pool, pglock.WithTTL(5*time.Second))
	cb := client(t, viaProxy, pglock.WithTTL(5*time.Second), pglock.FallbackCheckForTest(200*time.Millisecond))
	a := mutex(t, ca, "outage")
	b := mutex(t, cb, "outage")
	held(t, ctx, a)
	got := lockLater(ctx, b)
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return len(rows(t, s, "outage")) == 1 },
		"a's row is there")
	proxy.Down()
	if _, err := mutex(t, cb, "outage-try").TryLock(ctx); err == nil || errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryLock while PostgreSQL cannot be reached: %v, want the connection's error", err)
	}
	if err := a.Unlock(ctx); err != nil { // released while b cannot see it (nor its notification)
		t.Fatal(err)
	}
	// b keeps failing to reach the server for a while: it must still be waiting, not failed.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		select {
		case r := <-got:
			t.Fatalf("b's Lock returned during the outage: %v", r.err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	up := time.Now()
	proxy.Up()
	var r lockResult
	select {
	case r = <-got:
	case <-ctx.Done():
		t.Fatal("b never took the lock after the outage")
	}
	if r.err != nil {
		t.Fatalf("b.Lock after the outage: %v", r.err)
	}
	t.Logf("b took the lock %v after the connection came back", r.at.Sub(up).Round(time.Millisecond))
	_ = b.Unlock(ctx)
}

// TestIntegrationNotifyWakesWaiter: with a fallback period of 30 s and a TTL of 20 s, a waiter can
// only be this quick because the release's notification woke it.
func TestIntegrationNotifyWakesWaiter(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	a, b, got, _ := waiting(t, ctx, s, "notify")
	released := time.Now()
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("b.Lock: %v", r.err)
	}
	wake := r.at.Sub(released)
	t.Logf("release to waiter's acquisition: %v", wake)
	if wake > 500*time.Millisecond {
		t.Fatalf("waiter took the lock %v after the release; the notification should wake it within a few hundred ms", wake)
	}
	_ = b.Unlock(ctx)
}

// TestIntegrationListenerReconnects: a release while the listening connection is down is not
// lost: after reconnecting, the listener wakes every waiter (the fallback is 30 s here).
func TestIntegrationListenerReconnects(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	a, b, got, app := waiting(t, ctx, s, "reconnect")
	var listener int32
	if err := s.Pool.QueryRow(ctx, `select pid from pg_stat_activity where application_name = $1 and query ilike 'listen %'`,
		app).Scan(&listener); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `select pg_terminate_backend($1, 5000)`, listener); err != nil { // returns once it has exited
		t.Fatal(err)
	}
	released := time.Now()
	if err := a.Unlock(ctx); err != nil { // most likely while nobody listens
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("b.Lock: %v", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken within 5 s of a release made while its listener was down")
	}
	t.Logf("listener killed, lock released: the waiter got in after %v", time.Since(released).Round(time.Millisecond))
	_ = b.Unlock(ctx)
}

// TestIntegrationRowTakenEndsLease: a renewal that finds the row no longer its holder's ends the
// lease at once, well before its deadline, and the lost hold's Unlock leaves the new row alone.
func TestIntegrationRowTakenEndsLease(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	c := client(t, s.Pool, pglock.WithTTL(5*time.Second), pglock.RenewEveryForTest(200*time.Millisecond))
	m := mutex(t, c, "taken", pglock.WithData("a"))
	l := held(t, ctx, m)
	taken := time.Now()
	if _, err := s.Pool.Exec(ctx, `update txkit_locks set holder = gen_random_uuid(), data = 'intruder' where name = 'taken'`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("lease still open 2 s after its row was taken (renewal every 200 ms, deadline 4.5 s)")
	}
	t.Logf("row taken: lease ended after %v: %v", time.Since(taken).Round(time.Millisecond), l.Err())
	if !errors.Is(l.Err(), lock.ErrLockLost) {
		t.Fatalf("lease error %v, want ErrLockLost", l.Err())
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rows(t, s, "taken"); len(got) != 1 || got[0] != "intruder" {
		t.Fatalf("rows after the lost hold's Unlock: %v, want [intruder]", got)
	}
}

func TestIntegrationRenewalKeepsHold(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	const ttl = 500 * time.Millisecond
	c := client(t, s.Pool, pglock.WithTTL(ttl), pglock.RenewEveryForTest(100*time.Millisecond))
	other := client(t, s.Pool, pglock.WithTTL(ttl))
	a := mutex(t, c, "renew")
	b := mutex(t, other, "renew")
	l := held(t, ctx, a)
	t0 := time.Now()
	for time.Since(t0) < 6*ttl {
		select {
		case <-l.Done():
			t.Fatalf("hold lost after %v: %v", time.Since(t0), l.Err())
		case <-time.After(ttl / 2):
		}
		if _, err := b.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("b.TryLock %v into a's hold (TTL %v): %v, want ErrLocked", time.Since(t0), ttl, err)
		}
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationCloseEndsHolds: Close ends the holds with ErrClosed, deletes their rows, and a
// waiting Lock returns ErrClosed.
func TestIntegrationCloseEndsHolds(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	c, err := pglock.New(s.Pool, pglock.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	a, _ := c.NewMutex("close")
	b, _ := c.NewMutex("close")
	l := held(t, ctx, a)
	waitErr := make(chan error, 1)
	go func() {
		_, err := b.Lock(ctx)
		waitErr <- err
	}()
	_ = c.Close()
	if !isDone(l) || !errors.Is(l.Err(), lock.ErrClosed) || !errors.Is(l.Err(), lock.ErrLockLost) {
		t.Fatalf("after Close: done %v, Err %v", isDone(l), l.Err())
	}
	if err := <-waitErr; !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("Lock waiting at Close: %v, want ErrClosed", err)
	}
	if got := rows(t, s, "close"); len(got) != 0 {
		t.Fatalf("rows after Close: %v", got)
	}
	if _, err := a.Lock(ctx); err == nil {
		t.Fatal("Lock on a closed Client succeeded")
	}
	_ = c.Close() // idempotent
}

func TestIntegrationElector(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	c1 := client(t, s.Pool)
	c2 := client(t, s.Pool)
	e1, err := c1.NewElector("election", "one")
	if err != nil {
		t.Fatal(err)
	}
	e2, err := c2.NewElector("election", "two")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e1.Leader(ctx); !errors.Is(err, lock.ErrNoLeader) {
		t.Fatalf("Leader with nobody campaigning: %v, want ErrNoLeader", err)
	}
	l1, err := e1.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := e2.Leader(ctx); err != nil || id != "one" {
		t.Fatalf("Leader = %q, %v; want one", id, err)
	}
	got := make(chan lock.Leadership, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := e2.Campaign(ctx)
		if err != nil {
			errc <- err
			return
		}
		got <- l
	}()
	if err := l1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	var l2 lock.Leadership
	select {
	case l2 = <-got:
	case err := <-errc:
		t.Fatalf("e2.Campaign: %v", err)
	case <-ctx.Done():
		t.Fatal("e2 never led")
	}
	if !l1.Token().Less(l2.Token()) {
		t.Fatalf("term tokens %s then %s", l1.Token(), l2.Token())
	}
	if id, err := e1.Leader(ctx); err != nil || id != "two" {
		t.Fatalf("Leader = %q, %v; want two", id, err)
	}
	if err := l2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e1.Leader(ctx); !errors.Is(err, lock.ErrNoLeader) {
		t.Fatalf("Leader after both resigned: %v, want ErrNoLeader", err)
	}
}

func itoa(n uint16) string { return strconv.Itoa(int(n)) }

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
