package core_test

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

func localStep(name string, seq int) core.Branch {
	return core.Branch{Name: name, Seq: seq, Status: core.BranchSucceeded, Target: core.Target{Kind: core.TargetLocal, Ref: "step"},
		Payload: []byte(`1`)}
}

// TestIntegrationRecordStepAsync: a starter's step record (RecordStep) commits without waiting
// for the WAL flush — synchronous_commit off in its own transaction, alone or in a batch of such
// records — while every other write, a batch that carries one among them, and every session
// afterwards keep synchronous_commit on; and it writes only while the step before it has its row,
// as FinishStep writes only while the last step has its own (the suffix a crash of PostgreSQL
// may lose).
func TestIntegrationRecordStepAsync(t *testing.T) {
	ctx := t.Context()
	l, pool, s := groupLog(t)
	syncs := coretest.SyncCommits(t, s.Pool, "txkit_branch")
	for _, gid := range []string{"w", "blocker", "g1", "g2", "g3"} {
		if err := l.Create(ctx, gid, core.KindWorkflow, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
	}

	// Alone: the records of steps 0 and 1, then the outcome with the final status.
	for i, name := range []string{"a", "b"} {
		if err := l.RecordStep(ctx, "w", localStep(name, i)); err != nil {
			t.Fatalf("RecordStep(%s): %v", name, err)
		}
	}
	if err := l.PutStep(ctx, lock.Token{}, "w", core.StatusRunning, localStep("c", 2)); err != nil {
		t.Fatal(err)
	}
	if err := l.FinishStep(ctx, lock.Token{}, "w", core.StatusRunning, core.StatusSucceeded, 2, localStep("$result", -1)); err != nil {
		t.Fatal(err)
	}
	if got, want := syncs("w"), []string{"$result on", "a off", "b off", "c on"}; !slices.Equal(got, want) {
		t.Fatalf("rows written with synchronous_commit %q, want %q", got, want)
	}

	// In batches: two records share one commit without the flush; a record sharing a batch with a
	// write that needs the flush gets it too.
	batch := func(writes ...func() error) {
		t.Helper()
		release := holdRow(t, s, "blocker")
		before := l.GroupCommitStats()
		blocked := goWrite(func() error {
			return l.PutStep(ctx, lock.Token{}, "blocker", core.StatusRunning, localStep("x", 0))
		})
		testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
			return l.GroupCommitStats().Immediate == before.Immediate+1
		}, "the blocked write is in flight")
		var errs []<-chan error
		for _, w := range writes {
			errs = append(errs, goWrite(w))
		}
		testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool { return l.GroupCommitStats().Queued == len(writes) },
			"%d writes queued behind the blocked one", len(writes))
		release()
		for _, ch := range append(errs, blocked) {
			if err := <-ch; err != nil {
				t.Fatal(err)
			}
		}
		if got := l.GroupCommitStats(); got.Flushes != before.Flushes+2 {
			t.Fatalf("%d flushes, want 2: the blocked write, then one batch", got.Flushes-before.Flushes)
		}
	}
	batch(func() error { return l.RecordStep(ctx, "g1", localStep("g1-0", 0)) },
		func() error { return l.RecordStep(ctx, "g2", localStep("g2-0", 0)) })
	batch(func() error { return l.RecordStep(ctx, "g3", localStep("g3-0", 0)) },
		func() error { return l.Create(ctx, "g4", core.KindWorkflow, time.Minute, nil) })
	for gid, want := range map[string]string{"g1": "off", "g2": "off", "g3": "on"} {
		if got := syncs(gid); !slices.Equal(got, []string{gid + "-0 " + want}) {
			t.Fatalf("%s written in a batch with synchronous_commit %q, want %q", gid, got, want)
		}
	}
	// No session kept it: the setting was its transaction's.
	conns := pool.AcquireAllIdle(ctx)
	for _, c := range conns {
		var sync string
		err := c.QueryRow(ctx, `show synchronous_commit`).Scan(&sync)
		c.Release()
		if err != nil || sync != "on" {
			t.Fatalf("a session of the log's pool has synchronous_commit %q (%v), want on", sync, err)
		}
	}

	// The step before lost (as a crash loses an unflushed record, and every one after it): the
	// next record, and the outcome, are refused and write nothing.
	if _, err := s.Pool.Exec(ctx, `delete from txkit_branch where gid = 'g1'`); err != nil {
		t.Fatal(err)
	}
	err := l.RecordStep(ctx, "g1", localStep("g1-1", 1))
	if !errors.Is(err, core.ErrInvalidState) || !strings.Contains(err.Error(), "step 0 is missing") {
		t.Fatalf("RecordStep after a lost record = %v, want ErrInvalidState naming step 0", err)
	}
	err = l.FinishStep(ctx, lock.Token{}, "g1", core.StatusRunning, core.StatusSucceeded, 0, localStep("$result", -1))
	if !errors.Is(err, core.ErrInvalidState) || !strings.Contains(err.Error(), "step 0 is missing") {
		t.Fatalf("FinishStep after a lost record = %v, want ErrInvalidState naming step 0", err)
	}
	if tx := get(t, l, "g1"); tx.Status != core.StatusRunning || len(tx.Branches) != 0 {
		t.Fatalf("g1: %s with %d rows, want running with none", tx.Status, len(tx.Branches))
	}
	// A workflow no longer running is refused as before.
	if err := l.RecordStep(ctx, "w", localStep("d", 3)); !errors.Is(err, core.ErrInvalidState) || !strings.Contains(err.Error(), "is succeeded") {
		t.Fatalf("RecordStep on a finished workflow = %v, want ErrInvalidState naming its status", err)
	}
}

// TestIntegrationSucceededWorkflowStepsKeepTheirStatus: a workflow records each step with its own
// status (a TCC step confirmed, a plain one succeeded), so Get of a succeeded workflow reports
// them as recorded — not all succeeded, as a saga's steps are implied by its finish
// (Status.BranchesImplied).
func TestIntegrationSucceededWorkflowStepsKeepTheirStatus(t *testing.T) {
	ctx := t.Context()
	l := newLog(t)
	if err := l.Create(ctx, "w", core.KindWorkflow, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	hold := localStep("hold", 0)
	hold.Status, hold.Target = core.BranchConfirmed, core.Target{Kind: core.TargetInProc, Ref: "hold"}
	for _, b := range []core.Branch{hold, localStep("pay", 1)} {
		if err := l.PutStep(ctx, lock.Token{}, "w", core.StatusRunning, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.FinishStep(ctx, lock.Token{}, "w", core.StatusRunning, core.StatusSucceeded, 1, localStep("$result", -1)); err != nil {
		t.Fatal(err)
	}
	got := map[string]core.BranchStatus{}
	for _, b := range get(t, l, "w").Branches {
		got[b.Name] = b.Status
	}
	want := map[string]core.BranchStatus{"$result": core.BranchSucceeded, "hold": core.BranchConfirmed, "pay": core.BranchSucceeded}
	if !maps.Equal(got, want) {
		t.Fatalf("a succeeded workflow's steps reported %v, want %v (as recorded)", got, want)
	}
}
