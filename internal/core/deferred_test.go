package core_test

import (
	"context"
	"errors"
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
	for _, tc := range []struct {
		name string
		opts []core.LogOption
	}{{"alone", nil}, {"group commit", []core.LogOption{core.WithGroupCommit(10 * time.Millisecond)}}} {
		t.Run(tc.name, func(t *testing.T) {
			l, s := deferredLog(t, tc.opts...)
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
			if st := statusOf(t, l, "g1"); st != core.StatusConfirming {
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
}

// Only finishes are deferred: a decision (and a record that is not final) is written before
// Record returns, as the protocol needs.
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
