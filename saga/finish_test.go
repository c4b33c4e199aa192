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
	e := newEnv(t)
	c := e.coordinator()
	check := coretest.FinishLeftBranches(t, e.Schema.Pool, e.Schema.Name, "txkit_saga_")
	gid, err := submit(t, c, sequential(register(t, c, "p", newParty(nil)), 3))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	check(gid, core.BranchSucceeded)
}
