package threepc_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/twopc"
)

// BenchmarkProtocols compares three-phase commit with two-phase commit on the same transfer — 1
// taken from alice in one database, 1 given to bob in another (two schemas of the test server,
// registered as "east" and "west" with both coordinators, each coordinator with a log schema of
// its own) — in the same run:
//
//   - "2pc": Begin, Enlist east (the debit runs now), Enlist west (the credit), Commit through
//     twopc: the two PREPARE TRANSACTIONs at once, the decision (the record, created decided:
//     presumed abort writes nothing before), then the two COMMIT PREPAREDs at once with the
//     record of the outcome.
//
//   - "3pc": Begin, Enlist east and west with a [threepc.DBWork] each, as a user writes it: a
//     CanCommit check that reads (alice holds at least 1, bob exists) in a READ ONLY transaction,
//     and a PreCommit doing the update; Commit runs the votes, the record, the PreCommits (work +
//     PREPARE TRANSACTION, one database after the other), the decision, then the COMMIT
//     PREPAREDs and, after them, the record of the outcome.
//
//     Both report tx/s, the p50-ms and p99-ms latency of one transfer, pg-tx/gtx (the
//     coordinator's log pool acquire count per transfer: its own statements on the log, each one
//     PostgreSQL transaction — 2 for 2PC, 3 for 3PC) and pg-writes/gtx: the PostgreSQL write
//     transactions per transfer, the growth of pg_current_xact_id() (every transaction that
//     writes takes a transaction id; read-only ones — 3PC's CanCommit votes — do not) divided by
//     the transfers. It counts the whole server, not the benchmark alone: run it alone for exact
//     numbers (4 for 2PC: two branches, two log writes; 5 for 3PC); other tests or benchmarks
//     running at the same time inflate it.
//
//   - "ratio": alternates blocks of 20 of each (the order rotates, so load changes on the shared
//     machine weigh on both alike) and reports 3pc/2pc (3PC's throughput over 2PC's) and the
//     tx/s of each.
//
// At the end no prepared transaction of either coordinator may be left.
//
//	go test -run '^$' -bench Protocols -benchtime 3s ./threepc/
func BenchmarkProtocols(b *testing.B) {
	ctx := context.Background()
	log2, log3, east, west := testenv.PG(b), testenv.PG(b), testenv.PG(b), testenv.PG(b)
	for _, s := range []*testenv.Schema{east, west} {
		if _, err := s.Pool.Exec(ctx, `create table accounts (id text primary key, balance bigint not null check (balance >= 0));
			insert into accounts values ('alice', 1000000000), ('bob', 1000000000)`); err != nil {
			b.Fatal(err)
		}
	}
	dbs := map[string]*pgxpool.Pool{"east": east.Pool, "west": west.Pool}
	c2, pool2 := coretest.BenchCoordinator(b, twopc.New, log2)
	b.Cleanup(func() { _ = c2.Close() })
	c3, pool3 := coretest.BenchCoordinator(b, threepc.New, log3)
	b.Cleanup(func() { _ = c3.Close() })
	for name, p := range dbs {
		if err := c2.RegisterDB(name, p); err != nil {
			b.Fatal(err)
		}
		if err := c3.RegisterDB(name, p); err != nil {
			b.Fatal(err)
		}
	}

	transfer2 := func() error {
		g, err := c2.Begin(ctx)
		if err != nil {
			return err
		}
		for _, w := range []struct {
			db   string
			work func(context.Context, pgx.Tx) error
		}{{"east", update("alice", -1)}, {"west", update("bob", 1)}} {
			if err := g.Enlist(ctx, w.db, w.work); err != nil {
				_ = g.Abort(ctx)
				return err
			}
		}
		return g.Commit(ctx)
	}
	transfer3 := func() error {
		g, err := c3.Begin(ctx)
		if err != nil {
			return err
		}
		if err := move(g, 1); err != nil {
			_ = g.Abort(ctx)
			return err
		}
		return g.Commit(ctx)
	}

	// xid is the server's next transaction id as pg_current_xact_id() gives it; the call takes
	// one itself (and its transaction writes nothing else).
	xid := func(b *testing.B) int64 {
		var x int64
		if err := east.Pool.QueryRow(ctx, `select pg_current_xact_id()::text::bigint`).Scan(&x); err != nil {
			b.Fatal(err)
		}
		return x
	}
	timed := func(name string, pool *pgxpool.Pool, f func() error) {
		b.Run(name, func(b *testing.B) {
			calls := 0
			x0 := xid(b)
			coretest.TimedOnPool(b, "tx/s", "gtx", pool, func() error { calls++; return f() })
			// The second reading's own xid is not the transfers'.
			b.ReportMetric(float64(xid(b)-x0-1)/float64(calls), "pg-writes/gtx")
		})
	}
	timed("2pc", pool2, transfer2)
	timed("3pc", pool3, transfer3)
	b.Run("ratio", func(b *testing.B) {
		const block = 20
		took, rounds := coretest.Rotate(b, block, transfer2, transfer3)
		b.ReportMetric(float64(took[0])/float64(took[1]), "3pc/2pc")
		b.ReportMetric(float64(rounds*block)/took[0].Seconds(), "2pc-tx/s")
		b.ReportMetric(float64(rounds*block)/took[1].Seconds(), "3pc-tx/s")
	})

	var left int
	if err := log2.Pool.QueryRow(ctx, `select count(*) from pg_prepared_xacts where database = current_database()
		and (position($1 in gid) > 0 or position($2 in gid) > 0)`, log2.Name, log3.Name).Scan(&left); err != nil {
		b.Fatal(err)
	}
	if left != 0 {
		b.Errorf("%d prepared transactions left after the benchmark", left)
	}
}
