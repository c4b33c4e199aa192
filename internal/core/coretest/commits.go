package coretest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/bench/concbench"
	"github.com/txkit/txkit/coordinator"
)

// CommitCounter counts the PostgreSQL commits made on the pools it hands out
// (concbench.Commits), for tests that bound a coordinator's writes per transaction.
type CommitCounter struct {
	t testing.TB
	c concbench.Commits
}

// NewCommitCounter returns a counter whose pools close when the test ends.
func NewCommitCounter(t testing.TB) *CommitCounter { return &CommitCounter{t: t} }

// Pool returns a pool of 8 connections on url whose commits are counted.
func (cc *CommitCounter) Pool(url string) *pgxpool.Pool {
	cc.t.Helper()
	p, err := cc.c.Pool(cc.t.Context(), url, 8)
	if err != nil {
		cc.t.Fatal(err)
	}
	cc.t.Cleanup(p.Close)
	return p
}

// PerTransaction runs tx once to warm up, then n times one after another, as one client does,
// and returns the commits counted per transaction over the n, c's deferred finishes flushed.
func (cc *CommitCounter) PerTransaction(c coordinator.Base, n int, tx func(ctx context.Context) error) float64 {
	cc.t.Helper()
	ctx := cc.t.Context()
	flush := func() {
		if err := c.Flush(ctx); err != nil {
			cc.t.Fatal(err)
		}
	}
	if err := tx(ctx); err != nil {
		cc.t.Fatal(err)
	}
	flush()
	before := cc.c.Load()
	for range n {
		if err := tx(ctx); err != nil {
			cc.t.Fatal(err)
		}
	}
	flush()
	return float64(cc.c.Load()-before) / float64(n)
}
