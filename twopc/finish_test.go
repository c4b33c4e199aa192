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
		check := coretest.FinishLeftBranches(t, b.Log.Pool, b.Log.Name, "txkit_2pc_")
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
		check(g.GID(), core.BranchConfirmed)
	}
}
