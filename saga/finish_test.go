package saga_test

import (
	"testing"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/core/coretest"
)

// TestIntegrationSuccessWritesNoBranchRow: with the default options, a saga's success changes
// its global row only (its steps' successes are recorded with it); the log reports every step
// succeeded (core.Status.BranchesImplied).
func TestIntegrationSuccessWritesNoBranchRow(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	c := e.coordinator()
	writes := coretest.SyncCommits(t, e.Schema.Pool, "txkit_saga_branch")
	l, err := core.New(e.Schema.Pool, core.WithSchema(e.Schema.Name), core.WithTablePrefix("txkit_saga_"))
	if err != nil {
		t.Fatal(err)
	}
	gid, err := submit(t, c, sequential(register(t, c, "p", newParty(nil)), 3))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	coretest.FinishLeftBranches(t, l, writes, gid, core.BranchSucceeded)
}
