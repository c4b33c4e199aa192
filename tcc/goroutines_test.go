package tcc_test

import (
	"runtime/metrics"
	"testing"

	"github.com/txkit/txkit/tcc"
)

// One client's transactions of three in-process branches given to one Try start at most 4
// goroutines each: 2 for the tries and 2 for the confirms (the caller's goroutine makes the third
// of each); the deferred finish waits in the log's queue, with no goroutine, and rides on the next
// transaction's record on the caller's goroutine. Before: 8 (a goroutine per call, and one the
// record was handed to), then 5 (one per deferred finish).
func TestIntegrationGoroutinesPerTransaction(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	c := e.coordinator()
	h := register(t, c, "p", newParty(nil))
	tx := func() {
		g, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Try(ctx, tcc.Branch{Name: "b0", Participant: h}, tcc.Branch{Name: "b1", Participant: h}, tcc.Branch{Name: "b2", Participant: h}); err != nil {
			t.Fatal(err)
		}
		if err := g.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	created := func() uint64 {
		s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	tx() // warm: the pool's connections
	const n = 50
	before := created()
	for range n {
		tx()
	}
	per := float64(created()-before) / n
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%.2f goroutines started per transaction", per)
	if max := 4 + 10.0/n; per > max { // slack: the pool's and the runtime's own, on a loaded machine
		t.Fatalf("%.2f goroutines started per transaction, want at most %.2f", per, max)
	}
}
