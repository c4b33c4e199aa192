package core_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

// deferredLog returns a migrated log with WithDeferredFinish and opts, on a schema of the test's own.
func deferredLog(t *testing.T, opts ...core.LogOption) (*core.Log, *testenv.Schema) {
	t.Helper()
	l, _, s := migratedLog(t, append([]core.LogOption{core.WithDeferredFinish()}, opts...)...)
	return l, s
}

// withDeferredLogs runs f, as a subtest, on a deferred log alone and on one with group commit.
func withDeferredLogs(t *testing.T, f func(t *testing.T, l *core.Log, s *testenv.Schema)) {
	for _, tc := range []struct {
		name string
		opts []core.LogOption
	}{{"alone", nil}, {"group commit", []core.LogOption{core.WithGroupCommit(10 * time.Millisecond)}}} {
		t.Run(tc.name, func(t *testing.T) {
			l, s := deferredLog(t, tc.opts...)
			f(t, l, s)
		})
	}
}

func statusOf(t *testing.T, l *core.Log, gid string) core.Status {
	t.Helper()
	tx, err := l.Get(t.Context(), gid)
	if err != nil {
		t.Fatal(err)
	}
	return tx.Status
}

// A clean finish returns before its write is made; Flush waits for the write, or for its ctx.
func TestIntegrationDeferredFinish(t *testing.T) {
	withDeferredLogs(t, func(t *testing.T, l *core.Log, s *testenv.Schema) {
		ctx := t.Context()
		if err := l.CreateIn(ctx, "g1", core.KindTCC, core.StatusConfirming, time.Minute, nil, httpBranch("a"), httpBranch("b")); err != nil {
			t.Fatal(err)
		}
		release := holdRow(t, s, "g1") // the finish's write blocks on the row
		done := goWrite(func() error {
			return l.Record(ctx, lock.Token{}, core.Progress{GID: "g1", From: core.StatusConfirming, Done: []string{"a", "b"}, Next: core.StatusConfirmed})
		})
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			release()
			t.Fatal("Record waited for its write")
		}
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if err := l.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
			release()
			t.Fatalf("Flush with the write blocked = %v, want context.DeadlineExceeded", err)
		}
		// Read the row itself: Get in this process waits for the pending finish.
		var st string
		if err := s.Pool.QueryRow(ctx, `select status from txkit_global where gid = 'g1'`).Scan(&st); err != nil {
			release()
			t.Fatal(err)
		}
		if st != core.StatusConfirming.String() {
			release()
			t.Fatalf("status before the write = %s, want confirming", st)
		}
		release()
		if err := l.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		tx, err := l.Get(ctx, "g1")
		if err != nil {
			t.Fatal(err)
		}
		if tx.Status != core.StatusConfirmed {
			t.Fatalf("status after Flush = %s, want confirmed", tx.Status)
		}
		for _, b := range tx.Branches {
			if b.Status != core.BranchConfirmed {
				t.Errorf("branch %s = %s, want confirmed", b.Name, b.Status)
			}
		}
		if err := l.Flush(ctx); err != nil { // nothing in flight
			t.Fatal(err)
		}
	})
}

// Only finishes that carry out a decision are deferred: a decision (a saga's success among them)
// and a record that is not final are written before Record returns, as the protocol needs.
func TestIntegrationDeferredFinishOnlyFinal(t *testing.T) {
	l, s := deferredLog(t)
	ctx := t.Context()
	if err := l.CreateIn(ctx, "g1", core.KindSaga, core.StatusRunning, time.Minute, nil, httpBranch("a"), httpBranch("b")); err != nil {
		t.Fatal(err)
	}
	// Not final: a's done, the saga still running.
	if err := l.Record(ctx, lock.Token{}, core.Progress{GID: "g1", From: core.StatusRunning, Done: []string{"a"}, Renew: true}); err != nil {
		t.Fatal(err)
	}
	var st string
	if err := s.Pool.QueryRow(ctx, `select status from txkit_branch where gid = 'g1' and branch = 'a'`).Scan(&st); err != nil {
		t.Fatal(err)
	}
	if st != core.BranchSucceeded.String() {
		t.Fatalf("branch a after a progress record = %s, want succeeded at once", st)
	}
	// Final but a decision: a saga's success (a leader finding it running past its timeout would
	// compensate it).
	if err := l.Record(ctx, lock.Token{}, core.Progress{GID: "g1", From: core.StatusRunning, Done: []string{"b"}, Next: core.StatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	if err := s.Pool.QueryRow(ctx, `select status from txkit_global where gid = 'g1'`).Scan(&st); err != nil {
		t.Fatal(err)
	}
	if st != core.StatusSucceeded.String() {
		t.Fatalf("a saga's success right after Record = %s, want succeeded at once", st)
	}
}

// A deferred finish that finds the transaction moved on (the leader took it after the lease)
// changes nothing.
func TestIntegrationDeferredFinishMovedOn(t *testing.T) {
	l, s := deferredLog(t)
	ctx := t.Context()
	if err := l.CreateIn(ctx, "g1", core.KindTCC, core.StatusConfirming, time.Minute, nil, httpBranch("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `update txkit_global set status = 'confirmed' where gid = 'g1'`); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, lock.Token{}, core.Progress{GID: "g1", From: core.StatusConfirming, Done: []string{"a"}, Next: core.StatusConfirmed}); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, l, "g1"); st != core.StatusConfirmed {
		t.Fatalf("status = %s", st)
	}
}

// A deferred finish rides on the log's next write — one round trip, one commit for both — or,
// with nothing to ride on, sends itself after its hold; Get in this process waits for it.
func TestIntegrationDeferredFinishRides(t *testing.T) {
	withDeferredLogs(t, func(t *testing.T, l *core.Log, s *testenv.Schema) {
		ctx := t.Context()
		dbStatus := func(gid string) string {
			var st string
			if err := s.Pool.QueryRow(ctx, `select status from txkit_global where gid = $1`, gid).Scan(&st); err != nil {
				t.Fatal(err)
			}
			return st
		}
		finish := func(gid string) {
			t.Helper()
			if err := l.CreateIn(ctx, gid, core.KindTCC, core.StatusConfirming, time.Minute, nil, httpBranch("a")); err != nil {
				t.Fatal(err)
			}
			if err := l.Record(ctx, lock.Token{}, core.Progress{GID: gid, From: core.StatusConfirming, Done: []string{"a"}, Next: core.StatusConfirmed}); err != nil {
				t.Fatal(err)
			}
		}
		// g1's finish waits for a write to ride on: g2's record carries it.
		finish("g1")
		before := l.GroupCommitStats()
		if st := dbStatus("g1"); st != core.StatusConfirming.String() {
			t.Fatalf("g1 right after Record = %s, want confirming (the finish held)", st)
		}
		if err := l.CreateIn(ctx, "g2", core.KindTCC, core.StatusTrying, time.Minute, nil, httpBranch("a")); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 5*time.Second, 5*time.Millisecond, func() bool { return dbStatus("g1") == core.StatusConfirmed.String() },
			"g1's finish never landed")
		after := l.GroupCommitStats()
		if f, w := after.Flushes-before.Flushes, after.Writes-before.Writes; f != 1 || w != 2 {
			t.Fatalf("g2's record and g1's finish: %d flushes of %d writes, want 1 of 2", f, w)
		}
		// Nothing to ride on: g3's finish sends itself after its hold.
		finish("g3")
		testenv.Eventually(t, 5*time.Second, 5*time.Millisecond, func() bool { return dbStatus("g3") == core.StatusConfirmed.String() },
			"g3's finish never landed alone")
		// Get in this process reads its own finish at once.
		finish("g4")
		if st := statusOf(t, l, "g4"); st != core.StatusConfirmed {
			t.Fatalf("Get of g4 right after Record = %s, want confirmed", st)
		}
		if err := l.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Parked deferred finishes start no goroutine each: they wait in the log's queue, and one timer
// sends those whose hold ran out. 40 finishes parked at once (nothing to ride on) add a few
// goroutines at most, and all of them land.
func TestIntegrationDeferredFinishGoroutines(t *testing.T) {
	withDeferredLogs(t, func(t *testing.T, l *core.Log, s *testenv.Schema) {
		ctx := t.Context()
		const n = 40
		gids := make([]string, n)
		for i := range gids {
			gids[i] = fmt.Sprintf("g%d", i)
			if err := l.CreateIn(ctx, gids[i], core.KindTCC, core.StatusConfirming, time.Minute, nil, httpBranch("a")); err != nil {
				t.Fatal(err)
			}
		}
		before := runtime.NumGoroutine()
		for _, gid := range gids {
			if err := l.Record(ctx, lock.Token{}, core.Progress{GID: gid, From: core.StatusConfirming, Done: []string{"a"}, Next: core.StatusConfirmed}); err != nil {
				t.Fatal(err)
			}
		}
		if d := runtime.NumGoroutine() - before; d > 4 {
			t.Errorf("%d deferred finishes parked started %d goroutines, want at most 4", n, d)
		}
		testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
			var left int
			if err := s.Pool.QueryRow(ctx, `select count(*) from txkit_global where status <> 'confirmed'`).Scan(&left); err != nil {
				t.Fatal(err)
			}
			return left == 0
		}, "the parked finishes never landed after their hold")
		if err := l.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A create alone is a plain insert: a gid taken fails it with unique_violation, which the log
// reads as the gid taken (ErrExists, ErrInvalidState), as ON CONFLICT DO NOTHING's empty insert
// before. When a deferred finish rides with it, the failure refuses that batch (a fallback: before,
// with ON CONFLICT, none), and the finish is then made alone.
func TestIntegrationCreateTakenPlainInsert(t *testing.T) {
	withDeferredLogs(t, func(t *testing.T, l *core.Log, s *testenv.Schema) {
		ctx := t.Context()
		if err := l.Create(ctx, "taken", core.KindTCC, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
		if err := l.Create(ctx, "taken", core.KindTCC, time.Minute, nil); !errors.Is(err, core.ErrExists) || !errors.Is(err, core.ErrInvalidState) {
			t.Fatalf("create of a gid taken, alone = %v, want ErrExists and ErrInvalidState", err)
		}
		// f1's finish waits for a write to ride on: the taken create's.
		if err := l.CreateIn(ctx, "f1", core.KindTCC, core.StatusConfirming, time.Minute, nil, httpBranch("a")); err != nil {
			t.Fatal(err)
		}
		if err := l.Record(ctx, lock.Token{}, core.Progress{GID: "f1", From: core.StatusConfirming, Done: []string{"a"}, Next: core.StatusConfirmed}); err != nil {
			t.Fatal(err)
		}
		before := l.GroupCommitStats()
		if err := l.CreateIn(ctx, "taken", core.KindTCC, core.StatusConfirming, time.Minute, nil, httpBranch("a")); !errors.Is(err, core.ErrExists) {
			t.Fatalf("create of a gid taken, a finish riding = %v, want ErrExists", err)
		}
		if f := l.GroupCommitStats().Fallbacks - before.Fallbacks; f != 1 {
			t.Fatalf("%d fallbacks, want 1: the taken create's plain insert refuses the batch it leads", f)
		}
		if err := l.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if st := statusOf(t, l, "f1"); st != core.StatusConfirmed {
			t.Fatalf("f1 = %s, want confirmed (its finish made alone)", st)
		}
		if st := statusOf(t, l, "taken"); st != core.StatusTrying {
			t.Fatalf("taken = %s, want trying (the first create's)", st)
		}
	})
}
