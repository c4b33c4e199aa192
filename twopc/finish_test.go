package twopc_test

import (
	"testing"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/twopc"
)

// TestIntegrationCommitWritesNoBranchRow: a committed transfer's outcome changes its global row
// only, with vote markers (the default) and with the decision write; the log reports both
// branches confirmed (core.Status.BranchesImplied).
func TestIntegrationCommitWritesNoBranchRow(t *testing.T) {
	for _, votes := range []bool{true, false} {
		ctx := t.Context()
		b := newBank(t)
		c := b.coordinator(twopc.WithVoteMarkers(votes))
		writes := coretest.SyncCommits(t, b.Log.Pool, "txkit_2pc_branch")
		l, err := core.New(b.Log.Pool, core.WithSchema(b.Log.Name), core.WithTablePrefix("txkit_2pc_"))
		if err != nil {
			t.Fatal(err)
		}
		g, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.move(ctx, g, 30); err != nil {
			t.Fatal(err)
		}
		if err := g.Commit(ctx); err != nil {
			t.Fatalf("votes %v: Commit: %v", votes, err)
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if s := status(t, c, g.GID()); s != twopc.StatusCommitted {
			t.Fatalf("votes %v: status %s, want committed", votes, s)
		}
		coretest.FinishLeftBranches(t, l, writes, g.GID(), core.BranchConfirmed)
	}
}
