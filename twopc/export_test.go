package twopc

import (
	"context"
	"time"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
)

// WithTablePrefixForTest sets the prefix of the log's table names, which users cannot: a test
// gives one New must refuse.
func WithTablePrefixForTest(p string) coordinator.Option {
	return func(c *core.Config) { c.Prefix = p }
}

// WithVoteScanForTest sets how many vote rows one query of the sweep reads (default voteScan), so
// that a test pages with few rows.
func WithVoteScanForTest(n int) coordinator.Option {
	return own("WithVoteScanForTest", func(o *options) { o.voteScan = n })
}

// RecordVoting records gid as voting with the database branches dbs, as Commit with vote markers
// does beside the PREPAREs: a test then prepares (or not) each branch by hand with VoteSQL and
// lets the leader settle it.
func (c *Coordinator) RecordVoting(ctx context.Context, gid string, timeout time.Duration, dbs ...string) error {
	recs := make([]core.Branch, len(dbs))
	for i, name := range dbs {
		d, err := c.dbs.Get(name)
		if err != nil {
			return err
		}
		if err := c.votes.Ensure(ctx, d.DB); err != nil {
			return err
		}
		recs[i] = core.Branch{Name: name, Seq: i, Target: d.Target}
	}
	return c.b.Log.CreateIn(ctx, gid, core.Kind2PC, core.StatusVoting, timeout, nil, recs...)
}

// VoteSQL returns what the branch db of gid runs to end phase one with vote markers.
func (c *Coordinator) VoteSQL(gid, db string) string { return c.votes.PrepareSQL(c.ns.ID(gid, db)) }

// PreparedID returns the name of the prepared transaction of the branch db of gid.
func (c *Coordinator) PreparedID(gid, db string) string { return c.ns.ID(gid, db) }

// VoteTable returns the quoted name of the vote table.
func (c *Coordinator) VoteTable() string { return c.votes.Table() }
