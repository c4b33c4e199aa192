package tcc_test

import (
	"testing"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/core/coretest"
)

// TestIntegrationFinishWritesNoBranchRow: with the default options (deferred finish, group
// commit), a confirmed or cancelled transaction's finish changes its global row only; the log
// reports its branches confirmed or cancelled (core.Status.BranchesImplied).
func TestIntegrationFinishWritesNoBranchRow(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	c := e.coordinator()
	check := coretest.FinishLeftBranches(t, e.Schema.Pool, e.Schema.Name, "txkit_")
	h := register(t, c, "p", newParty(nil))
	for _, commit := range []bool{true, false} {
		g, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		bs := branches(h, 0, 2)
		if err := g.Try(ctx, bs[0], bs[1:]...); err != nil {
			t.Fatal(err)
		}
		want := core.BranchConfirmed
		if commit {
			err = g.Commit(ctx)
		} else {
			err, want = g.Rollback(ctx), core.BranchCancelled
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		check(g.GID(), want)
	}
}
