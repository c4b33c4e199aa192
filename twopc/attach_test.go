package twopc_test

import (
	"errors"
	"testing"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/twopc"
)

// A retried start of a business key whose branches are all databases (coordinator.WithGID) is
// refused with ErrExists before anything is prepared, and Attach reads the first's outcome: the
// money moves once. Before, presumed abort recorded the transaction only at the decision: the
// retry prepared its work again, found the gid taken by a committed transaction, took that for
// its own lost answer and returned nil, leaving its prepared transactions for the in-doubt
// resolver — which commits those of a committed gid: the money moved twice. With vote markers the
// retry's record of the gid came beside its PREPAREs, and its rollback by name could hit the
// first's prepared transactions.
func TestIntegrationRetriedKeyDatabases(t *testing.T) {
	ctx := t.Context()
	for _, votes := range []bool{false, true} {
		b := newBank(t)
		c := b.coordinator(twopc.WithVoteMarkers(votes))
		for i := range 2 {
			g, err := c.Begin(ctx, coordinator.WithGID("transfer-1"))
			if err != nil {
				t.Fatal(err)
			}
			if err := b.move(ctx, g, 10); err != nil {
				t.Fatal(err)
			}
			err = g.Commit(ctx)
			if i == 0 && err != nil {
				t.Fatalf("votes %v: first Commit: %v", votes, err)
			}
			if i == 1 && !errors.Is(err, coordinator.ErrExists) {
				t.Fatalf("votes %v: the retry's Commit = %v, want ErrExists", votes, err)
			}
		}
		if st, err := c.Attach(ctx, "transfer-1"); err != nil || st != twopc.StatusCommitted {
			t.Fatalf("Attach = %v, %v; want committed", st, err)
		}
		b.NoPrepared()
		b.WantBalances(startBalance-10, startBalance+10)
	}
}
