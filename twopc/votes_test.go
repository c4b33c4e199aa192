package twopc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/prepared"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/twopc"
)

// votes returns the vote rows of the test's coordinators: branch id → yes.
func (b *bank) votes(c *twopc.Coordinator) map[string]bool {
	b.T.Helper()
	rows, err := b.Log.Pool.Query(b.T.Context(), "select id, yes from "+c.VoteTable())
	if err != nil {
		b.T.Fatalf("read the vote table: %v", err)
	}
	out := map[string]bool{}
	var (
		id  string
		yes bool
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &yes}, func() error {
		out[id] = yes
		return nil
	}); err != nil {
		b.T.Fatalf("read the vote table: %v", err)
	}
	return out
}

// voteByHand runs, on a connection of pool, the branch db of gid as Commit would with vote
// markers: the work (delta on account), then its vote and PREPARE TRANSACTION. With open it
// stops after the vote row's insert and returns the open transaction instead (nil otherwise).
func voteByHand(t *testing.T, c *twopc.Coordinator, pool *pgxpool.Pool, gid, db, account string, delta int, open bool) pgx.Tx {
	t.Helper()
	ctx := t.Context()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := update(account, delta)(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if open {
		if _, err := tx.Exec(ctx, "insert into "+c.VoteTable()+" (id, yes) values ($1, true)", c.PreparedID(gid, db)); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	if _, err := tx.Exec(ctx, c.VoteSQL(gid, db)); err != nil {
		t.Fatalf("vote of %s/%s: %v", gid, db, err)
	}
	return nil
}

// votesSwept follows TestIntegrationCommit/votes, after "transfer-1" committed: each branch left
// a yes row, which the in-doubt pass deletes once the transaction is finished and the row older
// than the grace — not the row of a transaction still voting.
func votesSwept(t *testing.T, b *bank, c *twopc.Coordinator) {
	ctx := t.Context()
	want := map[string]bool{c.PreparedID("transfer-1", "east"): true, c.PreparedID("transfer-1", "west"): true}
	if got := b.votes(c); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("vote rows %v, want %v", got, want)
	}

	// A transaction still voting keeps its rows, however old: east committed (by hand here).
	if err := c.RecordVoting(ctx, "voting-1", time.Hour, "east", "west"); err != nil {
		t.Fatal(err)
	}
	voteByHand(t, c, b.East.Pool, "voting-1", "east", "alice", 0, false)
	if _, err := b.East.Pool.Exec(ctx, "commit prepared "+prepared.Quote(c.PreparedID("voting-1", "east"))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // past the grace
	res, err := c.ResolveInDoubt(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Swept != 2 {
		t.Fatalf("ResolveInDoubt %+v, want 2 vote rows swept", res)
	}
	want = map[string]bool{c.PreparedID("voting-1", "east"): true}
	if got := b.votes(c); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("vote rows after the sweep %v, want %v", got, want)
	}
}

// A branch that cannot vote yes — here its vote row is taken by a tombstone, as a leader's would
// be — makes Commit withdraw: every branch is rolled back and the transaction is aborted.
func TestIntegrationVotesNoWithdraws(t *testing.T) {
	ctx := t.Context()
	b := newBank(t)
	c := b.coordinator(twopc.WithVoteMarkers(true))
	if err := c.RecordVoting(ctx, "setup", time.Hour, "east"); err != nil { // creates the vote table
		t.Fatal(err)
	}
	if _, err := b.Log.Pool.Exec(ctx, "insert into "+c.VoteTable()+" (id, yes) values ($1, false)", c.PreparedID("transfer-1", "west")); err != nil {
		t.Fatal(err)
	}
	g, _ := c.Begin(ctx, coordinator.WithGID("transfer-1"))
	if err := b.move(ctx, g, 30); err != nil {
		t.Fatal(err)
	}
	err := g.Commit(ctx)
	var pe *pgconn.PgError
	if !errors.Is(err, twopc.ErrAborted) || !errors.As(err, &pe) || pe.Code != "23505" {
		t.Fatalf("Commit = %v, want ErrAborted wrapping west's unique violation", err)
	}
	b.WantBalances(startBalance, startBalance)
	b.NoPrepared()
	if s := status(t, c, "transfer-1"); s != twopc.StatusAborted {
		t.Fatalf("status %s, want aborted", s)
	}
}

// The leader settles a voting transaction whose starter is gone from what each database says:
// committed or prepared is yes, anything else no — made final by a tombstone, so a branch that
// was only slow can never prepare afterwards.
func TestIntegrationVotesLeaderSettles(t *testing.T) {
	tests := []struct {
		name       string
		east, west string // "prepared", "committed", "none"
		want       coordinator.Status
	}{
		{"both prepared", "prepared", "prepared", twopc.StatusCommitted},
		{"one committed, one prepared", "committed", "prepared", twopc.StatusCommitted},
		{"one never prepared", "prepared", "none", twopc.StatusAborted},
		{"none prepared", "none", "none", twopc.StatusAborted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			b := newBank(t)
			c := b.coordinator(coordinator.WithLease(300*time.Millisecond), coordinator.WithElector(b.elector("leader")))
			const gid = "settle-1"
			if err := c.RecordVoting(ctx, gid, time.Hour, "east", "west"); err != nil {
				t.Fatal(err)
			}
			for _, br := range []struct{ db, state, account string }{{"east", tt.east, "alice"}, {"west", tt.west, "bob"}} {
				pool := b.East.Pool
				if br.db == "west" {
					pool = b.West.Pool
				}
				if br.state == "none" {
					continue
				}
				voteByHand(t, c, pool, gid, br.db, br.account, 10, false)
				if br.state == "committed" {
					if _, err := pool.Exec(ctx, "commit prepared "+prepared.Quote(c.PreparedID(gid, br.db))); err != nil {
						t.Fatal(err)
					}
				}
			}
			run(t, c)
			testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() bool {
				s, err := c.Status(ctx, gid)
				return err == nil && s == tt.want
			}, "the leader did not settle the transaction as "+tt.want.String())
			b.NoPrepared()
			if tt.want == twopc.StatusCommitted {
				b.WantBalances(startBalance+10, startBalance+10) // alice +10 in east, bob +10 in west
			} else {
				b.WantBalances(startBalance, startBalance)
			}
			// The first branch found neither prepared nor committed got the leader's tombstone: its
			// late vote fails, so it can never prepare.
			late, pool := "east", b.East.Pool
			switch {
			case tt.east == "none":
			case tt.west == "none":
				late, pool = "west", b.West.Pool
			default:
				return
			}
			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			var pe *pgconn.PgError
			if _, err := tx.Exec(ctx, c.VoteSQL(gid, late)); !errors.As(err, &pe) || pe.Code != "23505" {
				t.Fatalf("%s's late vote = %v, want a unique violation", late, err)
			}
			b.NoPrepared()
		})
	}
}

// A branch between its vote and its PREPARE holds its vote row: the leader cannot know its vote,
// leaves the transaction voting (counting the attempt) and settles it once the branch prepared.
func TestIntegrationVotesLeaderWaitsForAVoteInFlight(t *testing.T) {
	ctx := t.Context()
	b := newBank(t)
	c := b.coordinator(coordinator.WithLease(300*time.Millisecond), coordinator.WithElector(b.elector("leader")))
	const gid = "settle-2"
	if err := c.RecordVoting(ctx, gid, time.Hour, "east", "west"); err != nil {
		t.Fatal(err)
	}
	voteByHand(t, c, b.East.Pool, gid, "east", "alice", 10, false)
	tx := voteByHand(t, c, b.West.Pool, gid, "west", "bob", 10, true)
	run(t, c)
	row := func() (status string, attempts int, lastError string) {
		t.Helper()
		if err := b.Log.Pool.QueryRow(ctx, `select status, attempts, coalesce(last_error, '') from txkit_2pc_global where gid = $1`,
			gid).Scan(&status, &attempts, &lastError); err != nil {
			t.Fatal(err)
		}
		return status, attempts, lastError
	}
	testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() bool {
		_, attempts, _ := row()
		return attempts >= 1
	}, "the leader did not try to settle the transaction")
	if st, _, lastError := row(); st != "voting" || !strings.Contains(lastError, "still voting") {
		t.Fatalf("while west votes: %s, last error %q; want voting, still voting", st, lastError)
	}
	if _, err := tx.Exec(ctx, "prepare transaction "+prepared.Quote(c.PreparedID(gid, "west"))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() bool {
		s, err := c.Status(ctx, gid)
		return err == nil && s == twopc.StatusCommitted
	}, "the leader did not commit once west prepared")
	b.NoPrepared()
	b.WantBalances(startBalance+10, startBalance+10)
}

// The sweep pages past the rows of transactions still voting: more than one page of them (2,000
// rows), all older than the grace and all of one instant, come first in id order (and in
// created_at order), and the rows of finished transactions after them are deleted all the same.
// The vote table's only index is its primary key, which the sweep pages on.
func TestIntegrationVotesSweepPagesPastOpenRows(t *testing.T) {
	ctx := t.Context()
	b := newBank(t)
	// Pages of 2,000 rows (the default reads 20,000 a query), so that the open rows fill one.
	c := b.coordinator(twopc.WithVoteMarkers(true), twopc.WithInDoubtResolution("@every 1h", 0), twopc.WithVoteScanForTest(2000))
	// The table as an earlier version left it, with its index on (created_at, id), which the
	// current DDL drops.
	if _, err := b.Log.Pool.Exec(ctx, "create table "+c.VoteTable()+` (id text collate "C" primary key, yes boolean not null,
		created_at timestamptz not null default now()); create index txkit_2pc_vote_age on `+c.VoteTable()+" (created_at, id)"); err != nil {
		t.Fatal(err)
	}
	const openGIDs, doneGIDs = 1001, 10 // two rows each (east, west): 2,002 open rows, 20 finished
	var open, done []string
	for i := range openGIDs {
		gid := fmt.Sprintf("a-open-%04d", i) // before the finished ones in id order too
		if err := c.RecordVoting(ctx, gid, time.Hour, "east", "west"); err != nil {
			t.Fatal(err)
		}
		open = append(open, c.PreparedID(gid, "east"), c.PreparedID(gid, "west"))
	}
	for i := range doneGIDs { // not in the log: finished and forgotten
		gid := fmt.Sprintf("z-done-%04d", i)
		done = append(done, c.PreparedID(gid, "east"), c.PreparedID(gid, "west"))
	}
	insert := "insert into " + c.VoteTable() + " (id, yes, created_at) select unnest($1::text[]), true, now() - $2::interval"
	if _, err := b.Log.Pool.Exec(ctx, insert, open, "2 hours"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Log.Pool.Exec(ctx, insert, done, "1 hour"); err != nil {
		t.Fatal(err)
	}
	res, err := c.ResolveInDoubt(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := b.votes(c)
	left := 0
	for _, id := range done {
		if _, ok := got[id]; ok {
			left++
		}
	}
	if res.Swept != len(done) || left != 0 || len(got) != len(open) {
		t.Fatalf("ResolveInDoubt swept %d rows, %d of the %d finished ones left, %d rows in all; want the %d finished ones swept and the %d open ones kept",
			res.Swept, left, len(done), len(got), len(done), len(open))
	}
	// The primary key is the table's only index (each one more costs every transfer's vote rows).
	var indexes []string
	if err := b.Log.Pool.QueryRow(ctx, `select coalesce(array_agg(c.relname::text || case when i.indisprimary then ' (primary key)' else '' end), '{}')
		from pg_index i join pg_class c on c.oid = i.indexrelid where i.indrelid = $1::regclass`, c.VoteTable()).Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	if len(indexes) != 1 || !strings.HasSuffix(indexes[0], " (primary key)") {
		t.Fatalf("indexes of %s: %q; want its primary key alone", c.VoteTable(), indexes)
	}
}

// Vote markers are the default, and they create a table in every registered database. A role
// that may not create it there learns so at its first Enlist, before any work runs: an error
// wrapping coordinator.ErrInvalidOption that names the way out, WithVoteMarkers(false), with
// which the same role's transfer commits (the decision written between the phases).
func TestIntegrationVotesNeedCreate(t *testing.T) {
	ctx := t.Context()
	b := newBank(t)
	role := "t_" + strings.ReplaceAll(testenv.Name(t), "-", "_")
	ident := pgx.Identifier{role}.Sanitize()
	admin := b.Log.Pool
	if _, err := admin.Exec(ctx, "create role "+ident+" login"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the role's pools close (registered later, so run earlier)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = admin.Exec(ctx, "select pg_terminate_backend(pid) from pg_stat_activity where usename = $1", role)
		if _, err := admin.Exec(ctx, "drop owned by "+ident+"; drop role "+ident); err != nil {
			t.Logf("cleanup: drop role %s: %v", role, err)
		}
	})
	// The role may use the accounts of east and west, and nothing else: no CREATE, and not the
	// coordinator's schema (where the vote table would go).
	for _, s := range []*testenv.Schema{b.East, b.West} {
		q := pgx.Identifier{s.Name}.Sanitize()
		if _, err := admin.Exec(ctx, "grant usage on schema "+q+" to "+ident+"; grant select, update on "+q+".accounts to "+ident); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := pgxpool.ParseConfig(testenv.PGURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User, cfg.MaxConns = role, 4
	limited, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(limited.Close)
	pools := map[string]*pgxpool.Pool{"east": limited, "west": limited}
	move := func(g *twopc.Global) error {
		for _, side := range []struct {
			db  string
			sch *testenv.Schema
			sql string
		}{{"east", b.East, "balance - 10 where id = 'alice'"}, {"west", b.West, "balance + 10 where id = 'bob'"}} {
			if err := g.Enlist(ctx, side.db, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "update "+pgx.Identifier{side.sch.Name}.Sanitize()+".accounts set balance = "+side.sql)
				return err
			}); err != nil {
				return err
			}
		}
		return nil
	}

	c := b.coordinatorOn(pools)
	g, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = move(g)
	if !errors.Is(err, coordinator.ErrInvalidOption) || !strings.Contains(err.Error(), "WithVoteMarkers(false)") ||
		!strings.Contains(err.Error(), c.VoteTable()) {
		t.Fatalf("Enlist on a database where the role may not create the vote table = %v, want an error wrapping ErrInvalidOption naming %s and WithVoteMarkers(false)",
			err, c.VoteTable())
	}
	_ = g.Abort(ctx)
	b.WantBalances(startBalance, startBalance)

	c = b.coordinatorOn(pools, twopc.WithVoteMarkers(false))
	if g, err = c.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	if err := move(g); err != nil {
		t.Fatalf("Enlist without vote markers: %v", err)
	}
	if err := g.Commit(ctx); err != nil {
		t.Fatalf("Commit without vote markers: %v", err)
	}
	b.WantBalances(startBalance-10, startBalance+10)
	b.NoPrepared()
}
