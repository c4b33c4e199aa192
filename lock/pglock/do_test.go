package pglock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/bench/concbench"
	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/pglock"
)

// TestIntegrationDoMixedExclusion: goroutines of two Clients increment one counter by reading it
// and writing it back in separate statements — half through Do (in its transaction), half under
// Lock/Unlock (through the pool) — and record each value with the writer's token. Without mutual
// exclusion between and among both kinds, updates are lost (the counter falls short, or a value
// is recorded twice); with it, the counter is exact and tokens rise with the values.
func TestIntegrationDoMixedExclusion(t *testing.T) {
	s, ctx := testenv.Parallel(t, 3*time.Minute)
	if _, err := s.Pool.Exec(ctx, `create table counter (n bigint not null); insert into counter values (0);
		create table history (n bigint primary key, tok bigint not null)`); err != nil {
		t.Fatal(err)
	}
	cs := []*pglock.Client{client(t, pool(t, s.URL)), client(t, pool(t, s.URL))}
	const users, each = 6, 30
	var g errgroup.Group
	for i := range users {
		m := mutex(t, cs[i%2], "counter")
		g.Go(func() error {
			for range each {
				var err error
				if i%3 == 2 { // every third user locks; the others Do
					err = lockedIncrement(ctx, m, s.Pool)
				} else {
					err = m.Do(ctx, func(ctx context.Context, tx pgx.Tx, tok lock.Token) error {
						return increment(ctx, tx, tok)
					})
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := s.Pool.QueryRow(ctx, `select n from counter`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != users*each {
		t.Fatalf("counter = %d after %d increments under the lock: updates were lost", n, users*each)
	}
	var bad int
	if err := s.Pool.QueryRow(ctx, `select count(*) from (select tok <= lag(tok) over (order by n) as down from history) h where down`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Fatalf("%d values were written with a token not above the previous value's", bad)
	}
}

// increment reads the counter and writes it back plus one, recording the new value with tok.
func increment(ctx context.Context, db pgutil.DBTX, tok lock.Token) error {
	var n int64
	if err := db.QueryRow(ctx, `select n from counter`).Scan(&n); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, `update counter set n = $1`, n+1); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, `insert into history values ($1, $2)`, n+1, tok.Seq); err != nil {
		return fmt.Errorf("record %d with token %s: %w", n+1, tok, err)
	}
	return nil
}

func lockedIncrement(ctx context.Context, m *pglock.Mutex, p *pgxpool.Pool) error {
	l, err := m.Lock(ctx)
	if err != nil {
		return err
	}
	return errors.Join(increment(ctx, p, l.Token()), m.Unlock(ctx))
}

// TestIntegrationDoHandOver: a Lock waiter behind a Do gets the lock when the Do's transaction
// ends, and a Do behind a Lock holder when it unlocks — both long before the 30 s fallback check,
// so without polling; TryLock answers ErrLocked while a Do holds; a Do's token is above the hold
// before it and below the one after; the fence accepts it inside Do's transaction; a Do on a Mutex
// value that holds through Lock runs under that hold.
func TestIntegrationDoHandOver(t *testing.T) {
	s, ctx := testenv.Parallel(t, 2*time.Minute)
	slow := []pglock.Option{pglock.WithTTL(20 * time.Second), pglock.FallbackCheckForTest(30 * time.Second)}
	c1, c2 := client(t, pool(t, s.URL), slow...), client(t, pool(t, s.URL), slow...)
	a, b := mutex(t, c1, "handover"), mutex(t, c2, "handover")
	f, err := fence.New(s.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	first := held(t, ctx, b).Token()
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	inside, release := make(chan lock.Token), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- a.Do(ctx, func(ctx context.Context, tx pgx.Tx, tok lock.Token) error {
			if err := f.Check(ctx, tx, "handover", tok); err != nil {
				return err
			}
			inside <- tok
			<-release
			return nil
		})
	}()
	doTok := <-inside
	if !first.Less(doTok) {
		t.Errorf("Do's token %s is not above the earlier hold's %s", doTok, first)
	}
	if _, err := b.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryLock while a Do holds: %v, want ErrLocked", err)
	}
	got := lockLater(ctx, b)
	select {
	case r := <-got:
		t.Fatalf("Lock returned while a Do held the lock: %v", r.err)
	case <-time.After(200 * time.Millisecond): // the Lock is given a chance to get in wrongly
	}
	ended := time.Now()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("Lock waiting behind a Do got the lock %v after the Do ended", r.at.Sub(ended).Round(time.Millisecond))
	if d := r.at.Sub(ended); d > 5*time.Second {
		t.Errorf("Lock got the lock %v after the Do ended: not handed over (the fallback check is 30 s)", d)
	}
	if !doTok.Less(r.lease.Token()) {
		t.Errorf("the Lock after the Do has token %s, not above Do's %s", r.lease.Token(), doTok)
	}

	// A Do behind b's Lock hold waits for its Unlock's notification.
	doneAt := make(chan time.Time, 1)
	go func() {
		err := a.Do(ctx, func(ctx context.Context, tx pgx.Tx, tok lock.Token) error {
			if !r.lease.Token().Less(tok) {
				return fmt.Errorf("Do's token %s is not above the Lock hold's %s", tok, r.lease.Token())
			}
			return f.Check(ctx, tx, "handover", tok)
		})
		if err != nil {
			t.Error(err)
		}
		doneAt <- time.Now()
	}()
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool { return c1.WaitersForTest("handover") > 0 }, "the Do to wait")
	unlocked := time.Now()
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	at := <-doneAt
	t.Logf("Do waiting behind a Lock hold ran %v after its Unlock", at.Sub(unlocked).Round(time.Millisecond))
	if d := at.Sub(unlocked); d > 5*time.Second {
		t.Errorf("Do ran %v after the Unlock: not woken (the fallback check is 30 s)", d)
	}
	// The fence recorded the later Do: Do's first token is refused now.
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := f.Check(ctx, tx, "handover", doTok); !errors.Is(err, lock.ErrFenced) {
		t.Errorf("fence check with the first Do's token after a later holder: %v, want ErrFenced", err)
	}

	// Reentrant: a Do on a Mutex value that holds runs under that hold.
	l := held(t, ctx, b)
	if err := b.Do(ctx, func(_ context.Context, _ pgx.Tx, tok lock.Token) error {
		if tok != l.Token() {
			return fmt.Errorf("Do under a Lock hold got token %s, want the hold's %s", tok, l.Token())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if l.Err() != nil {
		t.Fatalf("the Lock hold ended with the Do inside it: %v", l.Err())
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationDoCancelWhileWaiting: a Do waiting behind a Lock holder, a Do waiting (in
// PostgreSQL) behind another Do, and a Lock waiting behind a Do all return ctx's error soon after
// it ends, and leave nothing behind: the lock is free for the next Do and TryLock at once.
func TestIntegrationDoCancelWhileWaiting(t *testing.T) {
	s, ctx := testenv.Parallel(t, 2*time.Minute)
	c := client(t, pool(t, s.URL), pglock.WithTTL(20*time.Second))
	a, b := mutex(t, c, "cancel"), mutex(t, c, "cancel")
	nop := func(context.Context, pgx.Tx, lock.Token) error { return nil }
	within := func(what string, f func(ctx context.Context) error) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := f(wctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: %v, want context.DeadlineExceeded", what, err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s returned %v after its start (ctx: 300 ms)", what, d)
		}
	}

	held(t, ctx, a)
	within("Do behind a Lock hold", func(ctx context.Context) error { return b.Do(ctx, nop) })
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- a.Do(ctx, func(context.Context, pgx.Tx, lock.Token) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	within("Do behind a Do", func(ctx context.Context) error { return b.Do(ctx, nop) })
	within("Lock behind a Do", func(ctx context.Context) error { _, err := b.Lock(ctx); return err })
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := b.Do(ctx, nop); err != nil {
		t.Fatalf("Do after the cancelled waits: %v", err)
	}
	if _, err := b.TryLock(ctx); err != nil {
		t.Fatalf("TryLock after the cancelled waits: %v", err)
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationCommitsPerDo counts the PostgreSQL transactions Do commits (concbench.Commits on
// the Client's pool): one per Do — the take, fn's writes and the release are one transaction —
// uncontended and with 8 goroutines passing the lock around, where the hand-over is the end of
// the holder's transaction. (A name's very first Do also commits the name's free row.)
func TestIntegrationCommitsPerDo(t *testing.T) {
	s, ctx := testenv.Parallel(t, 2*time.Minute)
	if _, err := s.Pool.Exec(ctx, `create table counter (n bigint not null); insert into counter values (0)`); err != nil {
		t.Fatal(err)
	}
	var commits concbench.Commits
	p := pool(t, s.URL, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = &commits })
	c := client(t, p)
	work := func(ctx context.Context, tx pgx.Tx, _ lock.Token) error {
		_, err := tx.Exec(ctx, `update counter set n = n + 1`)
		return err
	}
	m := mutex(t, c, "commits")
	if err := m.Do(ctx, work); err != nil { // the name's first Do also commits its free row
		t.Fatal(err)
	}
	for range 3 {
		n0 := commits.Load()
		if err := m.Do(ctx, work); err != nil {
			t.Fatal(err)
		}
		if n := commits.Load() - n0; n != 1 {
			t.Fatalf("uncontended: Do committed %d transactions, want 1", n)
		}
	}
	const workers, each = 8, 25
	n0 := commits.Load()
	var g errgroup.Group
	for range workers {
		m := mutex(t, c, "commits")
		g.Go(func() error {
			for range each {
				if err := m.Do(ctx, work); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	per := float64(commits.Load()-n0) / (workers * each)
	t.Logf("%d goroutines × %d Do calls: %.2f commits per Do", workers, each, per)
	if per != 1 {
		t.Errorf("contended: %.2f commits per Do, want 1", per)
	}
	var n int64
	if err := s.Pool.QueryRow(ctx, `select n from counter`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 4+workers*each {
		t.Errorf("counter = %d, want %d", n, 4+workers*each)
	}
}

// envDoWorker names the variable that makes the test binary a process that holds a lock inside
// Do until it is killed (TestMain runs doWorker); its value is the schema's URL.
const envDoWorker = "PGLOCK_TEST_DO_WORKER"

// doWorker takes the lock "killed" with Do, writes a row inside the transaction, prints INSIDE and
// its token, and waits to be killed.
func doWorker(url string) error {
	ctx := context.Background()
	p, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer p.Close()
	c, err := pglock.New(p, pglock.WithTTL(30*time.Second))
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	m, err := c.NewMutex("killed")
	if err != nil {
		return err
	}
	return m.Do(ctx, func(ctx context.Context, tx pgx.Tx, tok lock.Token) error {
		if _, err := tx.Exec(ctx, `insert into written values ($1)`, tok.Seq); err != nil {
			return err
		}
		fmt.Println("INSIDE", tok)
		select {} // until SIGKILL
	})
}

// TestIntegrationDoHolderKilled: a process SIGKILLed inside Do releases the lock at once — its
// transaction aborts when PostgreSQL sees its connection close, long before the 30 s TTL — and
// what it wrote inside Do is gone; the next Do gets a higher token.
func TestIntegrationDoHolderKilled(t *testing.T) {
	s, ctx := testenv.Parallel(t, 2*time.Minute)
	if _, err := s.Pool.Exec(ctx, `create table written (tok bigint)`); err != nil {
		t.Fatal(err)
	}
	c := client(t, s.Pool, pglock.WithTTL(30*time.Second))
	m := mutex(t, c, "killed")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envDoWorker+"="+s.URL)
	cmd.Stderr = testenv.LogWriter(t, "worker stderr: ")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var killedTok lock.Token
	select {
	case l := <-lines:
		var ts string
		if _, err := fmt.Sscanf(l, "INSIDE %s", &ts); err != nil {
			t.Fatalf("worker said %q, want INSIDE <token>", l)
		}
		if killedTok, err = lock.ParseToken(ts); err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not get inside Do within 30 s")
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryLock while the worker is inside Do: %v, want ErrLocked", err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var tok lock.Token
	if err := m.Do(ctx, func(_ context.Context, _ pgx.Tx, t lock.Token) error { tok = t; return nil }); err != nil {
		t.Fatal(err)
	}
	d := time.Since(killed)
	t.Logf("holder SIGKILLed inside Do; the next Do got the lock %v later (TTL 30 s)", d.Round(time.Millisecond))
	if d > 5*time.Second {
		t.Errorf("the next Do got the lock %v after the kill: not released with the connection", d)
	}
	var n int
	var dead *int64
	if err := s.Pool.QueryRow(ctx, `select count(*), max(tok) from written`).Scan(&n, &dead); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("the killed holder's write inside Do committed (%d rows, token %d)", n, *dead)
	}
	if !killedTok.Less(tok) {
		t.Errorf("the next Do's token %s is not above the killed holder's %s", tok, killedTok)
	}
}

// TestIntegrationRoundTripsPerDo counts what an uncontended Do sends (testenv.CountingPool): the
// transaction's begin rides with the take in one batch, then fn's statement and the commit — three
// round trips, as many as the same work under pg_advisory_xact_lock with pgx.BeginFunc takes
// minus its begin's own.
func TestIntegrationRoundTripsPerDo(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	if _, err := s.Pool.Exec(ctx, `create table counter (n bigint not null); insert into counter values (0)`); err != nil {
		t.Fatal(err)
	}
	p, rt := testenv.CountingPool(t, s)
	c := client(t, p)
	m := mutex(t, c, "trips")
	work := func(ctx context.Context, tx pgx.Tx, _ lock.Token) error {
		_, err := tx.Exec(ctx, `update counter set n = n + 1`)
		return err
	}
	if err := m.Do(ctx, work); err != nil { // the name's first Do also makes its free row
		t.Fatal(err)
	}
	for i := range 3 {
		var err error
		q, b := rt.During(func() { err = m.Do(ctx, work) })
		if err != nil {
			t.Fatal(err)
		}
		if q != 2 || b != 1 {
			t.Errorf("Do %d sent %d statements and %d batches; want 2 (fn's update, the commit) and 1 (the begin with the take)", i, q, b)
		}
	}
}

// TestIntegrationDoKeepsRowVersion: Do holds the name's row by locking it, not by rewriting it, so
// a hand-over leaves no dead row version behind and the next Do locks the same version (the row's
// ctid stays). An expired Lock holder's row is freed by the Do that takes it over (its holder then
// finds it gone), with a token above the row's.
func TestIntegrationDoKeepsRowVersion(t *testing.T) {
	s, ctx := testenv.Parallel(t, time.Minute)
	c := client(t, s.Pool)
	m := mutex(t, c, "version")
	var last lock.Token
	work := func(_ context.Context, _ pgx.Tx, tok lock.Token) error {
		if !last.Less(tok) {
			return fmt.Errorf("token %s after %s", tok, last)
		}
		last = tok
		return nil
	}
	if err := m.Do(ctx, work); err != nil { // the name's first Do makes its free row
		t.Fatal(err)
	}
	ctid := func() string { return rowText(t, s, "version", "ctid") }
	before := ctid()
	for range 10 {
		if err := m.Do(ctx, work); err != nil {
			t.Fatal(err)
		}
	}
	if after := ctid(); after != before {
		t.Errorf("10 Dos rewrote the lock row (ctid %s → %s); want it locked, not rewritten", before, after)
	}

	var ghost int64
	if err := s.Pool.QueryRow(ctx, `update txkit_locks set holder = gen_random_uuid(), data = 'ghost',
		token = nextval('txkit_lock_tokens'), expires_at = now() - interval '1 second' where name = 'version'
		returning token`).Scan(&ghost); err != nil {
		t.Fatal(err)
	}
	if err := m.Do(ctx, work); err != nil {
		t.Fatal(err)
	}
	if last.Seq <= ghost {
		t.Errorf("Do over an expired row with token %d got token %s", ghost, last)
	}
	if got := rows(t, s, "version"); len(got) != 0 {
		t.Errorf("rows after a Do took over an expired holder's row: %v, want it freed", got)
	}
}
