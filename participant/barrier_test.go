package participant_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
)

const testTimeout = 30 * time.Second

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// fixture is a migrated barrier in the test's own schema, and business code that counts its
// invocations (committed or not) and writes one row per invocation in the caller's transaction.
type fixture struct {
	t    testing.TB
	pool *pgxpool.Pool
	bar  *participant.Barrier

	mu      sync.Mutex
	invoked map[string]int
}

func newFixture(t testing.TB, opts ...participant.BarrierOption) *fixture {
	t.Helper()
	s := testenv.PG(t)
	opts = append([]participant.BarrierOption{participant.WithBarrierLogger(testLogger(t))}, opts...)
	bar, err := participant.NewBarrier(s.Pool, opts...)
	if err != nil {
		t.Fatalf("NewBarrier: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := bar.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := s.Pool.Exec(ctx, `create table calls (id bigserial primary key, gid text, branch text, op text)`); err != nil {
		t.Fatalf("create calls: %v", err)
	}
	return &fixture{t: t, pool: s.Pool, bar: bar, invoked: map[string]int{}}
}

func callKey(gid, branch string, op participant.Op) string {
	return gid + "|" + branch + "|" + op.String()
}

// record is the business code of every test: it counts the invocation and writes a row in tx.
func (f *fixture) record(ctx context.Context, tx pgx.Tx, req participant.Request) error {
	f.mu.Lock()
	f.invoked[callKey(req.GID, req.Branch, req.Op)]++
	f.mu.Unlock()
	_, err := tx.Exec(ctx, `insert into calls (gid, branch, op) values ($1, $2, $3)`, req.GID, req.Branch, req.Op.String())
	return err
}

// fn adapts record to Call's signature for req.
func (f *fixture) fn(req participant.Request) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error { return f.record(ctx, tx, req) }
}

func (f *fixture) invocations(gid, branch string, op participant.Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.invoked[callKey(gid, branch, op)]
}

func (f *fixture) committed(gid, branch string, op participant.Op) int {
	f.t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), `select count(*) from calls where gid = $1 and branch = $2 and op = $3`,
		gid, branch, op.String()).Scan(&n); err != nil {
		f.t.Fatalf("count calls: %v", err)
	}
	return n
}

func (f *fixture) markers(table string) int {
	f.t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), `select count(*) from `+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
		f.t.Fatalf("count markers: %v", err)
	}
	return n
}

// expect checks how often fn was invoked and how many of its effects committed.
func (f *fixture) expect(gid, branch string, op participant.Op, invoked, committed int) {
	f.t.Helper()
	if got := f.invocations(gid, branch, op); got != invoked {
		f.t.Errorf("%s %s/%s: business code invoked %d times, want %d", op, gid, branch, got, invoked)
	}
	if got := f.committed(gid, branch, op); got != committed {
		f.t.Errorf("%s %s/%s: %d effects committed, want %d", op, gid, branch, got, committed)
	}
}

func req(gid, branch string, op participant.Op) participant.Request {
	return participant.Request{GID: gid, Branch: branch, Op: op}
}

func TestIntegrationBarrierRunsEachOpOnce(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	p := f.bar.Participant(f.record)
	const (
		T = participant.OpTry
		C = participant.OpConfirm
		X = participant.OpCancel
		A = participant.OpAction
		K = participant.OpCompensate
	)
	// Duplicates interleaved the way retries arrive: a try retried after its confirm, and so on.
	for _, r := range []participant.Request{
		req("g1", "confirmed", T), req("g1", "confirmed", T), req("g1", "confirmed", C), req("g1", "confirmed", T),
		req("g1", "confirmed", C), req("g1", "confirmed", C),
		req("g1", "cancelled", T), req("g1", "cancelled", X), req("g1", "cancelled", X), req("g1", "cancelled", X),
		req("g2", "step-1", A), req("g2", "step-1", A), req("g2", "step-1", K), req("g2", "step-1", K),
		req("g2", "step-2", A), req("g2", "step-2", A),
	} {
		if err := p.Do(ctx, r); err != nil {
			t.Fatalf("Do(%s %s/%s): %v", r.Op, r.GID, r.Branch, err)
		}
	}
	f.expect("g1", "confirmed", T, 1, 1)
	f.expect("g1", "confirmed", C, 1, 1)
	f.expect("g1", "cancelled", T, 1, 1)
	f.expect("g1", "cancelled", X, 1, 1)
	f.expect("g2", "step-1", A, 1, 1)
	f.expect("g2", "step-1", K, 1, 1)
	f.expect("g2", "step-2", A, 1, 1)
	f.expect("g2", "step-2", K, 0, 0)
	// The same branch name in another global transaction is another branch.
	if err := p.Do(ctx, req("g3", "confirmed", T)); err != nil {
		t.Fatal(err)
	}
	f.expect("g3", "confirmed", T, 1, 1)
}

func TestIntegrationBarrierEmptyRollbackBlocksHangingTry(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	p := f.bar.Participant(f.record)
	for _, tc := range []struct{ try, cancel participant.Op }{
		{participant.OpTry, participant.OpCancel},
		{participant.OpAction, participant.OpCompensate},
	} {
		t.Run(tc.try.String(), func(t *testing.T) {
			gid := "g-" + tc.try.String()
			for range 2 { // the empty rollback, then its retry
				if err := p.Do(ctx, req(gid, "b", tc.cancel)); err != nil {
					t.Fatalf("%s before %s: %v", tc.cancel, tc.try, err)
				}
			}
			for range 2 { // the hanging try, then its retry
				err := p.Do(ctx, req(gid, "b", tc.try))
				if !errors.Is(err, participant.ErrHanging) || !errors.Is(err, participant.ErrRefused) {
					t.Fatalf("%s after the empty rollback = %v; want an error wrapping ErrHanging and ErrRefused", tc.try, err)
				}
			}
			f.expect(gid, "b", tc.cancel, 0, 0)
			f.expect(gid, "b", tc.try, 0, 0)
		})
	}
}

func TestIntegrationBarrierRefusedTryRollsBack(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	p := f.bar.Participant(func(ctx context.Context, tx pgx.Tx, r participant.Request) error {
		if err := f.record(ctx, tx, r); err != nil {
			return err
		}
		if r.Op == participant.OpTry {
			return fmt.Errorf("out of stock: %w", participant.ErrRefused)
		}
		return nil
	})
	err := p.Do(ctx, req("g", "b", participant.OpTry))
	if !errors.Is(err, participant.ErrRefused) || errors.Is(err, participant.ErrHanging) {
		t.Fatalf("refused try = %v; want an error wrapping ErrRefused (not ErrHanging)", err)
	}
	if n := f.markers("txkit_barrier"); n != 0 {
		t.Fatalf("%d barrier rows after the refused try; want 0 (rolled back with its tx)", n)
	}
	// The coordinator cancels: the try left nothing, so this is an empty rollback.
	if err := p.Do(ctx, req("g", "b", participant.OpCancel)); err != nil {
		t.Fatalf("cancel after the refused try: %v", err)
	}
	f.expect("g", "b", participant.OpTry, 1, 0)
	f.expect("g", "b", participant.OpCancel, 0, 0)
	// A retry of the try is now hanging.
	if err := p.Do(ctx, req("g", "b", participant.OpTry)); !errors.Is(err, participant.ErrHanging) {
		t.Fatalf("try retried after the cancel = %v; want ErrHanging", err)
	}
	f.expect("g", "b", participant.OpTry, 1, 0)
}

// Call works in the caller's transaction and never ends it; an error from fn is the caller's cue to
// roll back, which takes the markers with it, so the retry runs fn again.
func TestIntegrationBarrierCallErrorRollsBackAndRetryRuns(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	boom := errors.New("boom")
	r := req("g", "b", participant.OpConfirm)

	tx, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = f.bar.Call(ctx, tx, r, func(ctx context.Context, tx pgx.Tx) error {
		if err := f.record(ctx, tx, r); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Call = %v; want an error wrapping fn's", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("the caller's rollback: %v", err)
	}
	if n := f.markers("txkit_barrier"); n != 0 {
		t.Fatalf("%d barrier rows after the rollback; want 0", n)
	}
	f.expect("g", "b", participant.OpConfirm, 1, 0)

	for i := range 2 { // the retry runs fn; the one after it is a duplicate
		tx, err := f.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.bar.Call(ctx, tx, r, f.fn(r)); err != nil {
			t.Fatalf("retry %d: %v", i, err)
		}
		// Call left the transaction open: the caller goes on in it and commits.
		if _, err := tx.Exec(ctx, `select 1`); err != nil {
			t.Fatalf("tx after Call: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	f.expect("g", "b", participant.OpConfirm, 2, 1)
}

func TestIntegrationBarrierCallBadRequest(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // test cleanup
	for _, r := range []participant.Request{
		{Branch: "b", Op: participant.OpTry},
		{GID: "g", Op: participant.OpTry},
		{GID: "g", Branch: "b"},
		{GID: string(make([]byte, 300)), Branch: "b", Op: participant.OpTry},
	} {
		if err := f.bar.Call(ctx, tx, r, f.fn(r)); !errors.Is(err, participant.ErrBadRequest) {
			t.Errorf("Call(%q, %q, %s) = %v; want ErrBadRequest", r.GID, r.Branch, r.Op, err)
		}
	}
	if err := f.bar.Call(ctx, nil, req("g", "b", participant.OpTry), f.fn(req("g", "b", participant.OpTry))); !errors.Is(err, idempotency.ErrNilTx) {
		t.Errorf("Call with a nil tx = %v; want ErrNilTx", err)
	}
	// Bad requests wrote nothing and left the caller's tx usable.
	var n int
	if err := tx.QueryRow(ctx, `select count(*) from txkit_barrier`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("barrier rows in tx: %d, %v; want 0", n, err)
	}
	if f.invocations("g", "b", participant.OpTry) != 0 {
		t.Fatal("business code invoked for a bad request")
	}
}

// waitBlockedOnLock waits until the backend pid waits for a lock: a second inserter of a marker
// waiting for the first one's transaction.
func waitBlockedOnLock(t *testing.T, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		var waiting bool
		err := pool.QueryRow(context.Background(),
			`select coalesce(wait_event_type = 'Lock', false) from pg_stat_activity where pid = $1`, int32(pid)).Scan(&waiting)
		return err == nil && waiting
	}, "backend %d never waited for a lock", pid)
}

// race holds the first op's markers in an open transaction, starts the second op in another
// transaction, waits until it blocks on the unique index, then ends the first transaction (commit
// or rollback) and returns the second op's error.
func race(t *testing.T, f *fixture, gid string, first, second participant.Op, commitFirst bool) error {
	t.Helper()
	ctx := t.Context()
	tx1, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.bar.Call(ctx, tx1, req(gid, "b", first), f.fn(req(gid, "b", first))); err != nil {
		_ = tx1.Rollback(ctx)
		t.Fatalf("%s: %v", first, err)
	}

	pids := make(chan uint32, 1)
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			tx2, err := f.pool.Begin(ctx)
			if err != nil {
				pids <- 0
				return err
			}
			pids <- tx2.Conn().PgConn().PID()
			r := req(gid, "b", second)
			if err := f.bar.Call(ctx, tx2, r, f.fn(r)); err != nil {
				_ = tx2.Rollback(context.WithoutCancel(ctx))
				return err
			}
			return tx2.Commit(ctx)
		}()
	}()
	pid := <-pids
	if pid == 0 {
		_ = tx1.Rollback(ctx)
		t.Fatalf("%s: %v", second, <-done)
	}
	waitBlockedOnLock(t, f.pool, pid)
	select {
	case err := <-done:
		_ = tx1.Rollback(ctx)
		t.Fatalf("%s finished while %s's transaction was open: %v", second, first, err)
	default:
	}
	if commitFirst {
		err = tx1.Commit(ctx)
	} else {
		err = tx1.Rollback(ctx)
	}
	if err != nil {
		t.Fatalf("end %s's tx: %v", first, err)
	}
	return <-done
}

func TestIntegrationBarrierConcurrentTryAndCancelSerialize(t *testing.T) {
	const (
		T = participant.OpTry
		X = participant.OpCancel
	)
	f := newFixture(t)

	t.Run("try commits, waiting cancel runs", func(t *testing.T) {
		if err := race(t, f, "g1", T, X, true); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		f.expect("g1", "b", T, 1, 1)
		f.expect("g1", "b", X, 1, 1)
	})
	t.Run("try rolls back, waiting cancel is an empty rollback", func(t *testing.T) {
		if err := race(t, f, "g2", T, X, false); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		f.expect("g2", "b", T, 1, 0)
		f.expect("g2", "b", X, 0, 0)
		if err := f.bar.Participant(f.record).Do(t.Context(), req("g2", "b", T)); !errors.Is(err, participant.ErrHanging) {
			t.Fatalf("late try = %v; want ErrHanging", err)
		}
	})
	t.Run("empty rollback commits, waiting try is refused", func(t *testing.T) {
		err := race(t, f, "g3", X, T, true)
		if !errors.Is(err, participant.ErrHanging) || !errors.Is(err, participant.ErrRefused) {
			t.Fatalf("try = %v; want ErrHanging (wrapping ErrRefused)", err)
		}
		f.expect("g3", "b", T, 0, 0)
		f.expect("g3", "b", X, 0, 0)
	})
	t.Run("empty rollback rolls back, waiting try runs", func(t *testing.T) {
		if err := race(t, f, "g4", X, T, false); err != nil {
			t.Fatalf("try: %v", err)
		}
		f.expect("g4", "b", T, 1, 1)
		f.expect("g4", "b", X, 0, 0)
	})
}

// Tries and cancels of many branches start at the same moment: every pair ends in one of the two
// valid outcomes, never in a deadlock, and a try never runs after its cancel.
func TestIntegrationBarrierConcurrentTryAndCancelRace(t *testing.T) {
	const branches = 60
	f := newFixture(t)
	ctx := t.Context()
	p := f.bar.Participant(f.record)
	type result struct{ try, cancel error }
	results := make([]result, branches)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range branches {
		gid := fmt.Sprintf("g%d", i)
		wg.Go(func() { <-start; results[i].try = p.Do(ctx, req(gid, "b", participant.OpTry)) })
		wg.Go(func() { <-start; results[i].cancel = p.Do(ctx, req(gid, "b", participant.OpCancel)) })
	}
	close(start)
	wg.Wait()

	var ran, empty int
	for i, r := range results {
		gid := fmt.Sprintf("g%d", i)
		if r.cancel != nil {
			t.Errorf("%s: cancel: %v", gid, r.cancel)
			continue
		}
		switch {
		case r.try == nil: // try, then cancel: both ran, in that order
			ran++
			f.expect(gid, "b", participant.OpTry, 1, 1)
			f.expect(gid, "b", participant.OpCancel, 1, 1)
			var tryID, cancelID int64
			if err := f.pool.QueryRow(ctx, `select max(id) filter (where op = 'try'), max(id) filter (where op = 'cancel')
				from calls where gid = $1`, gid).Scan(&tryID, &cancelID); err != nil {
				t.Fatal(err)
			}
			if tryID > cancelID {
				t.Errorf("%s: try ran after its cancel", gid)
			}
		case errors.Is(r.try, participant.ErrHanging): // empty rollback, then the try refused
			empty++
			f.expect(gid, "b", participant.OpTry, 0, 0)
			f.expect(gid, "b", participant.OpCancel, 0, 0)
		default:
			t.Errorf("%s: try: %v", gid, r.try)
		}
	}
	t.Logf("%d branches: %d try then cancel, %d empty rollback then refused try", branches, ran, empty)
}

func TestIntegrationBarrierPurge(t *testing.T) {
	f := newFixture(t, participant.WithBarrierRetention(time.Microsecond), participant.WithBarrierPurgeBatch(2))
	keep, err := participant.NewBarrier(f.pool, participant.WithBarrierTable("kept_barrier"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := keep.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, bar := range []*participant.Barrier{f.bar, keep} {
		p := bar.Participant(f.record)
		for _, r := range []participant.Request{req("g", "b1", participant.OpTry), req("g", "b1", participant.OpConfirm),
			req("g", "b2", participant.OpCancel)} {
			if err := p.Do(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := f.markers("txkit_barrier"); n != 4 {
		t.Fatalf("%d rows before the purge; want 4 (try, confirm; try, cancel of the empty rollback)", n)
	}
	n, err := f.bar.Purge(ctx, f.pool)
	if err != nil || n != 4 {
		t.Fatalf("Purge = %d, %v; want 4 rows", n, err)
	}
	if n := f.markers("txkit_barrier"); n != 0 {
		t.Fatalf("%d rows after the purge; want 0", n)
	}
	// Rows younger than the retention (7 days by default) stay.
	if n, err := keep.Purge(ctx, f.pool); err != nil || n != 0 {
		t.Fatalf("Purge with the default retention = %d, %v; want 0", n, err)
	}
	if n := f.markers("kept_barrier"); n != 4 {
		t.Fatalf("%d rows kept; want 4", n)
	}
}

func TestIntegrationBarrierRunPurgesUntilCancelled(t *testing.T) {
	f := newFixture(t, participant.WithBarrierRetention(time.Microsecond), participant.WithBarrierPurgeSchedule("@every 1s"))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.bar.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	if err := f.bar.Participant(f.record).Do(ctx, req("g", "b", participant.OpCancel)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, 50*time.Millisecond, func() bool { return f.markers("txkit_barrier") == 0 },
		"Run never purged the expired rows")
}
