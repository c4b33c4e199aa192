package twopc_test

import (
	"testing"

	"github.com/txkit/txkit/internal/core/coretest"
)

// A transfer's cost in Go allocations, counted with testing.AllocsPerRun (every goroutine of the
// process: the group writer's and pgx's included) around Begin, two Enlists of an update with
// arguments, and Commit, against the real PostgreSQL, vote markers on (the default). It logs the
// process's processor time per transfer too (one client, so mostly latency-bound: a guide, not a
// bound). Issue 33: 294 allocations before the cuts, 249 after, 228 with the record's branches as
// a VALUES list, 211 with the log's arguments unboxed and the group writer's timers reused (the
// bound, 225, leaves room for the pools' and the runtime's own goroutines, counted too).
func TestIntegrationTransferAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	b := newBank(t)
	c := b.coordinator()
	ctx := t.Context()
	debit, credit := update("alice", 0), update("bob", 0) // balances stay: any number of runs
	transfer := func() {
		g, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Enlist(ctx, "east", debit); err != nil {
			t.Fatal(err)
		}
		if err := g.Enlist(ctx, "west", credit); err != nil {
			t.Fatal(err)
		}
		if err := g.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	coretest.AllocsAtMost(t, "transfer", 500, 225, transfer) // first run: the vote tables, the pools' connections and statements
}
