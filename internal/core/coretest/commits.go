package coretest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/bench/concbench"
	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
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

// SyncCommits makes every write of a row of table (a log's branch table, in the schema of
// pool's search_path) record the synchronous_commit its transaction ran with, and returns the
// reader of those records: gid's as "branch setting", in branch order, one per write.
func SyncCommits(t testing.TB, pool *pgxpool.Pool, table string) func(gid string) []string {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `
		create table sync_commits (gid text, branch text, sync text);
		create function sync_commits() returns trigger language plpgsql as $$
		begin
			insert into sync_commits values (new.gid, new.branch, current_setting('synchronous_commit'));
			return new;
		end $$;
		create trigger sync_commits after insert or update on `+pgx.Identifier{table}.Sanitize()+`
			for each row execute function sync_commits()`); err != nil {
		t.Fatal(err)
	}
	return func(gid string) []string {
		t.Helper()
		rows, _ := pool.Query(t.Context(), `select branch || ' ' || sync from sync_commits where gid = $1 order by branch, sync`, gid)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
}

// FinishLeftBranches makes the branch table of the log with table prefix prefix in schema record
// its writes (SyncCommits) and returns a check of a transaction gid finished in a status that
// implies its branches' (core.Status.BranchesImplied): it fails the test unless the finish left
// every branch row as its insert wrote it and the log (Get: the admin API, the console and the
// CLI read it) reports each branch in want.
func FinishLeftBranches(t testing.TB, pool *pgxpool.Pool, schema, prefix string) func(gid string, want core.BranchStatus) {
	t.Helper()
	writes := SyncCommits(t, pool, prefix+"branch")
	l, err := core.New(pool, core.WithSchema(schema), core.WithTablePrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return func(gid string, want core.BranchStatus) {
		t.Helper()
		tx := Get(t, l, gid)
		if w := writes(gid); len(w) != len(tx.Branches) || len(w) == 0 {
			t.Fatalf("%s (%s): %d branch rows written %d times (%q); want once each, by the insert", gid, tx.Status, len(tx.Branches), len(w), w)
		}
		for _, b := range tx.Branches {
			if b.Status != want || !b.UpdatedAt.Equal(tx.UpdatedAt) {
				t.Fatalf("%s (%s): branch %s reported %s as of %v; want %s as of the finish (%v)", gid, tx.Status, b.Name, b.Status, b.UpdatedAt, want, tx.UpdatedAt)
			}
		}
	}
}
