package admin_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/coordinator/shard"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/tcc"
)

// TestIntegrationAdminListsAcrossShards: an Admin given one LogSource per log shard (each with
// its shard's pool, each shard its own PostgreSQL server) lists the transactions of every shard
// merged in gid order, page after page, finds each one's detail on its shard, and counts the
// unfinished ones of all shards in its overview.
func TestIntegrationAdminListsAcrossShards(t *testing.T) {
	dbs := testenv.PGShards(t, 3)
	var cs []*tcc.Coordinator
	var logs []admin.LogSource
	for i, db := range dbs {
		c, err := tcc.New(db.Pool)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
		logs = append(logs, admin.LogSource{Name: fmt.Sprintf("tcc/%d", i), Prefix: "txkit_", Pool: db.Pool})
	}
	r, err := shard.New(cs...)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	h, err := r.Register("p", participant.ParticipantFunc(func(context.Context, participant.Request) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{} // gid -> log name
	for i := range 9 {
		g, err := r.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Try(t.Context(), tcc.Branch{Name: "stock", Participant: h}); err != nil {
			t.Fatal(err)
		}
		if i%3 != 0 { // every third stays trying: unfinished
			if err := g.Commit(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		want[g.GID()] = fmt.Sprintf("tcc/%d", core.ShardOf(g.GID(), 3))
	}
	for _, c := range cs { // the finishes are written in the background: land them before admin reads
		if err := c.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}

	a, err := admin.New(dbs[0].Pool, admin.WithTables(admin.Tables{Logs: logs}))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	f := admin.TxFilter{Limit: 4}
	for {
		p, err := a.Transactions(t.Context(), f)
		if err != nil {
			t.Fatal(err)
		}
		for _, tx := range p.Items {
			listed = append(listed, tx.GID)
			if tx.Log != want[tx.GID] {
				t.Errorf("%s listed from log %q, want %q", tx.GID, tx.Log, want[tx.GID])
			}
		}
		if p.Next == "" {
			break
		}
		f.After = p.Next
	}
	if len(listed) != len(want) || !slices.IsSorted(listed) {
		t.Fatalf("listed %v (%d), want the %d transactions of the three shards in gid order", listed, len(listed), len(want))
	}
	for gid, log := range want {
		tx, err := a.Transaction(t.Context(), gid)
		if err != nil || tx.Log != log || len(tx.Branches) != 1 {
			t.Errorf("Transaction(%s) = %+v, %v; want it from %s with its branch", gid, tx, err, log)
		}
	}
	ov, err := a.Overview(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if ov.Unfinished != 3 {
		t.Errorf("overview: %d unfinished, want 3 (one trying on each of the shards' turns)", ov.Unfinished)
	}
}
