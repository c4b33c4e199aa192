package barrier_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/testkit/barriertest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
)

const testTimeout = barriertest.Timeout

var testLogger = barriertest.Logger

// fixture is a migrated barrier in the test's own schema, and business code that counts its
// invocations (barriertest.Fixture).
type fixture = barriertest.Fixture

func newFixture(t testing.TB, opts ...barrier.Option) *fixture { return barriertest.New(t, opts...) }

func req(gid, branch string, op participant.Op) participant.Request {
	return participant.Request{GID: gid, Branch: branch, Op: op}
}

func TestIntegrationBarrierRunsEachOpOnce(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	p := f.Bar.Participant(f.Record)
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
	f.Expect("g1", "confirmed", T, 1, 1)
	f.Expect("g1", "confirmed", C, 1, 1)
	f.Expect("g1", "cancelled", T, 1, 1)
	f.Expect("g1", "cancelled", X, 1, 1)
	f.Expect("g2", "step-1", A, 1, 1)
	f.Expect("g2", "step-1", K, 1, 1)
	f.Expect("g2", "step-2", A, 1, 1)
	f.Expect("g2", "step-2", K, 0, 0)
	// The same branch name in another global transaction is another branch.
	if err := p.Do(ctx, req("g3", "confirmed", T)); err != nil {
		t.Fatal(err)
	}
	f.Expect("g3", "confirmed", T, 1, 1)
}

func TestIntegrationBarrierEmptyRollbackBlocksHangingTry(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	p := f.Bar.Participant(f.Record)
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
				if !errors.Is(err, barrier.ErrHanging) || !errors.Is(err, participant.ErrRefused) {
					t.Fatalf("%s after the empty rollback = %v; want an error wrapping ErrHanging and ErrRefused", tc.try, err)
				}
			}
			f.Expect(gid, "b", tc.cancel, 0, 0)
			f.Expect(gid, "b", tc.try, 0, 0)
		})
	}
}

func TestIntegrationBarrierRefusedTryRollsBack(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	p := f.Bar.Participant(func(ctx context.Context, tx pgx.Tx, r participant.Request) error {
		if err := f.Record(ctx, tx, r); err != nil {
			return err
		}
		if r.Op == participant.OpTry {
			return fmt.Errorf("out of stock: %w", participant.ErrRefused)
		}
		return nil
	})
	err := p.Do(ctx, req("g", "b", participant.OpTry))
	if !errors.Is(err, participant.ErrRefused) || errors.Is(err, barrier.ErrHanging) {
		t.Fatalf("refused try = %v; want an error wrapping ErrRefused (not ErrHanging)", err)
	}
	if n := f.Markers("txkit_barrier"); n != 0 {
		t.Fatalf("%d barrier rows after the refused try; want 0 (rolled back with its tx)", n)
	}
	// The coordinator cancels: the try left nothing, so this is an empty rollback.
	if err := p.Do(ctx, req("g", "b", participant.OpCancel)); err != nil {
		t.Fatalf("cancel after the refused try: %v", err)
	}
	f.Expect("g", "b", participant.OpTry, 1, 0)
	f.Expect("g", "b", participant.OpCancel, 0, 0)
	// A retry of the try is now hanging.
	if err := p.Do(ctx, req("g", "b", participant.OpTry)); !errors.Is(err, barrier.ErrHanging) {
		t.Fatalf("try retried after the cancel = %v; want ErrHanging", err)
	}
	f.Expect("g", "b", participant.OpTry, 1, 0)
}

// Call works in the caller's transaction and never ends it; an error from fn is the caller's cue to
// roll back, which takes the markers with it, so the retry runs fn again.
func TestIntegrationBarrierCallErrorRollsBackAndRetryRuns(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	boom := errors.New("boom")
	r := req("g", "b", participant.OpConfirm)

	tx, err := f.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Bar.Call(ctx, tx, r, func(ctx context.Context, tx pgx.Tx) error {
		if err := f.Record(ctx, tx, r); err != nil {
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
	if n := f.Markers("txkit_barrier"); n != 0 {
		t.Fatalf("%d barrier rows after the rollback; want 0", n)
	}
	f.Expect("g", "b", participant.OpConfirm, 1, 0)

	for i := range 2 { // the retry runs fn; the one after it is a duplicate
		tx, err := f.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Bar.Call(ctx, tx, r, f.Fn(r)); err != nil {
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
	f.Expect("g", "b", participant.OpConfirm, 2, 1)
}

func TestIntegrationBarrierCallBadRequest(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	tx, err := f.Pool.Begin(ctx)
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
		if err := f.Bar.Call(ctx, tx, r, f.Fn(r)); !errors.Is(err, participant.ErrBadRequest) {
			t.Errorf("Call(%q, %q, %s) = %v; want ErrBadRequest", r.GID, r.Branch, r.Op, err)
		}
	}
	if err := f.Bar.Call(ctx, nil, req("g", "b", participant.OpTry), f.Fn(req("g", "b", participant.OpTry))); !errors.Is(err, idempotency.ErrNilTx) {
		t.Errorf("Call with a nil tx = %v; want ErrNilTx", err)
	}
	// Bad requests wrote nothing and left the caller's tx usable.
	var n int
	if err := tx.QueryRow(ctx, `select count(*) from txkit_barrier`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("barrier rows in tx: %d, %v; want 0", n, err)
	}
	if f.Invocations("g", "b", participant.OpTry) != 0 {
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
	tx1, err := f.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Bar.Call(ctx, tx1, req(gid, "b", first), f.Fn(req(gid, "b", first))); err != nil {
		_ = tx1.Rollback(ctx)
		t.Fatalf("%s: %v", first, err)
	}

	pids := make(chan uint32, 1)
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			tx2, err := f.Pool.Begin(ctx)
			if err != nil {
				pids <- 0
				return err
			}
			pids <- tx2.Conn().PgConn().PID()
			r := req(gid, "b", second)
			if err := f.Bar.Call(ctx, tx2, r, f.Fn(r)); err != nil {
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
	waitBlockedOnLock(t, f.Pool, pid)
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
		f.Expect("g1", "b", T, 1, 1)
		f.Expect("g1", "b", X, 1, 1)
	})
	t.Run("try rolls back, waiting cancel is an empty rollback", func(t *testing.T) {
		if err := race(t, f, "g2", T, X, false); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		f.Expect("g2", "b", T, 1, 0)
		f.Expect("g2", "b", X, 0, 0)
		if err := f.Bar.Participant(f.Record).Do(t.Context(), req("g2", "b", T)); !errors.Is(err, barrier.ErrHanging) {
			t.Fatalf("late try = %v; want ErrHanging", err)
		}
	})
	t.Run("empty rollback commits, waiting try is refused", func(t *testing.T) {
		err := race(t, f, "g3", X, T, true)
		if !errors.Is(err, barrier.ErrHanging) || !errors.Is(err, participant.ErrRefused) {
			t.Fatalf("try = %v; want ErrHanging (wrapping ErrRefused)", err)
		}
		f.Expect("g3", "b", T, 0, 0)
		f.Expect("g3", "b", X, 0, 0)
	})
	t.Run("empty rollback rolls back, waiting try runs", func(t *testing.T) {
		if err := race(t, f, "g4", X, T, false); err != nil {
			t.Fatalf("try: %v", err)
		}
		f.Expect("g4", "b", T, 1, 1)
		f.Expect("g4", "b", X, 0, 0)
	})
}

// Tries and cancels of many branches start at the same moment: every pair ends in one of the two
// valid outcomes, never in a deadlock, and a try never runs after its cancel.
func TestIntegrationBarrierConcurrentTryAndCancelRace(t *testing.T) {
	const branches = 60
	f := newFixture(t)
	ctx := t.Context()
	p := f.Bar.Participant(f.Record)
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
			f.Expect(gid, "b", participant.OpTry, 1, 1)
			f.Expect(gid, "b", participant.OpCancel, 1, 1)
			var tryID, cancelID int64
			if err := f.Pool.QueryRow(ctx, `select max(id) filter (where op = 'try'), max(id) filter (where op = 'cancel')
				from calls where gid = $1`, gid).Scan(&tryID, &cancelID); err != nil {
				t.Fatal(err)
			}
			if tryID > cancelID {
				t.Errorf("%s: try ran after its cancel", gid)
			}
		case errors.Is(r.try, barrier.ErrHanging): // empty rollback, then the try refused
			empty++
			f.Expect(gid, "b", participant.OpTry, 0, 0)
			f.Expect(gid, "b", participant.OpCancel, 0, 0)
		default:
			t.Errorf("%s: try: %v", gid, r.try)
		}
	}
	t.Logf("%d branches: %d try then cancel, %d empty rollback then refused try", branches, ran, empty)
}

func TestIntegrationBarrierPurge(t *testing.T) {
	f := newFixture(t, barrier.WithRetention(time.Microsecond, "@every 1m"))
	keep, err := barrier.New(f.Pool, barrier.WithTable("", "kept_barrier"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := keep.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, bar := range []*barrier.Barrier{f.Bar, keep} {
		p := bar.Participant(f.Record)
		for _, r := range []participant.Request{req("g", "b1", participant.OpTry), req("g", "b1", participant.OpConfirm),
			req("g", "b2", participant.OpCancel)} {
			if err := p.Do(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := f.Markers("txkit_barrier"); n != 4 {
		t.Fatalf("%d rows before the purge; want 4 (try, confirm; try, cancel of the empty rollback)", n)
	}
	n, err := f.Bar.Purge(ctx, f.Pool)
	if err != nil || n != 4 {
		t.Fatalf("Purge = %d, %v; want 4 rows", n, err)
	}
	if n := f.Markers("txkit_barrier"); n != 0 {
		t.Fatalf("%d rows after the purge; want 0", n)
	}
	// Rows younger than the retention (7 days by default) stay.
	if n, err := keep.Purge(ctx, f.Pool); err != nil || n != 0 {
		t.Fatalf("Purge with the default retention = %d, %v; want 0", n, err)
	}
	if n := f.Markers("kept_barrier"); n != 4 {
		t.Fatalf("%d rows kept; want 4", n)
	}
}

func TestIntegrationBarrierRunPurgesUntilCancelled(t *testing.T) {
	f := newFixture(t, barrier.WithRetention(time.Microsecond, "@every 1s"))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.Bar.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	if err := f.Bar.Participant(f.Record).Do(ctx, req("g", "b", participant.OpCancel)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, 50*time.Millisecond, func() bool { return f.Markers("txkit_barrier") == 0 },
		"Run never purged the expired rows")
}
