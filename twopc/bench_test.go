package twopc_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/twopc"
)

// BenchmarkTransfer measures transfers — 1 taken from an account of one database, 1 given to an
// account of another (two schemas of the test server, each a registered participant) — three
// ways:
//
//   - "coordinator": Begin, Enlist east, Enlist west, Commit through twopc: the two prepares run
//     concurrently, then the decision, then the two COMMIT PREPAREDs concurrently. It reports
//     tx/s, p50/p99 latency, and pg-tx/gtx: the coordinator's own PostgreSQL transactions per
//     transfer (its pool's acquire count): the record with its branches, the decision, the
//     outcome = 3.
//
//   - "bare-2pc": the same updates with a hand-written pgx sequence and no coordinator: a
//     transaction on each database doing its update, PREPARE TRANSACTION on both concurrently,
//     COMMIT PREPARED on both concurrently — the same statements the coordinator sends to the
//     databases, without the log (so without recovery).
//
//   - "single-db": both updates in one ordinary transaction of one database: the ceiling.
//
//   - "ratio": alternates blocks of 20 of each (the order rotates), so load changes on the shared
//     machine weigh on all alike, and reports coordinator/bare-2pc (target ≥ 0.6) and
//     coordinator/single-db throughput.
//
//   - "group-commit/clients=N" and "votes/clients=N": coordinator.WithGroupCommit and
//     [twopc.WithVoteMarkers] on against off at N concurrent transfers ([coretest.OnOff]).
//
//     go test -run '^$' -bench Transfer -benchtime 3s ./twopc/
func BenchmarkTransfer(b *testing.B) {
	ctx := context.Background()
	log, east, west := testenv.PG(b), testenv.PG(b), testenv.PG(b)
	for _, s := range []*testenv.Schema{east, west} {
		if _, err := s.Pool.Exec(ctx, `create table accounts (id text primary key, balance bigint not null);
			insert into accounts values ('alice', 1000000000), ('bob', 1000000000)`); err != nil {
			b.Fatal(err)
		}
	}
	// single-db's two accounts live in east under other ids.
	if _, err := east.Pool.Exec(ctx, `insert into accounts values ('carol', 1000000000), ('dave', 1000000000)`); err != nil {
		b.Fatal(err)
	}
	newCoordinator := func(b *testing.B) (*twopc.Coordinator, *pgxpool.Pool) {
		c, pool := coretest.BenchCoordinator(b, twopc.New, log)
		b.Cleanup(func() { _ = c.Close() })
		for name, s := range map[string]*testenv.Schema{"east": east, "west": west} {
			if err := c.RegisterDB(name, s.Pool); err != nil {
				b.Fatal(err)
			}
		}
		return c, pool
	}
	const debit, credit = `update accounts set balance = balance - 1 where id = 'alice'`, `update accounts set balance = balance + 1 where id = 'bob'`
	coordinated := func(c *twopc.Coordinator) error {
		g, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		for db, sql := range map[string]string{"east": debit, "west": credit} {
			if err := g.Enlist(ctx, db, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, sql)
				return err
			}); err != nil {
				_ = g.Abort(ctx)
				return err
			}
		}
		return g.Commit(ctx)
	}
	// bare is what one writes by hand with pgx: a transaction on each database doing its update,
	// PREPARE TRANSACTION on both at once, then COMMIT PREPARED on both at once.
	bare := func() error {
		id := "bench:" + uuid.NewString()
		type side struct {
			pool *pgxpool.Pool
			sql  string
			tx   pgx.Tx
		}
		sides := []*side{{pool: east.Pool, sql: debit}, {pool: west.Pool, sql: credit}}
		for _, s := range sides {
			conn, err := s.pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if s.tx, err = conn.Begin(ctx); err != nil {
				return err
			}
			if _, err := s.tx.Exec(ctx, s.sql); err != nil {
				return err
			}
		}
		var g errgroup.Group
		for i, s := range sides {
			g.Go(func() error { _, err := s.tx.Exec(ctx, fmt.Sprintf("prepare transaction '%s:%d'", id, i)); return err })
		}
		if err := g.Wait(); err != nil {
			return err
		}
		for i, s := range sides {
			g.Go(func() error { _, err := s.pool.Exec(ctx, fmt.Sprintf("commit prepared '%s:%d'", id, i)); return err })
		}
		return g.Wait()
	}
	single := func() error {
		return pgx.BeginFunc(ctx, east.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `update accounts set balance = balance - 1 where id = 'carol'`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `update accounts set balance = balance + 1 where id = 'dave'`)
			return err
		})
	}

	b.Run("coordinator", func(b *testing.B) {
		c, pool := newCoordinator(b)
		coretest.TimedOnPool(b, "tx/s", "gtx", pool, func() error { return coordinated(c) })
	})
	loop := func(name string, f func() error) {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if err := f(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tx/s")
		})
	}
	loop("bare-2pc", bare)
	loop("single-db", single)
	b.Run("ratio", func(b *testing.B) {
		c, _ := newCoordinator(b)
		const block = 20
		took, round := coretest.Rotate(b, block, func() error { return coordinated(c) }, bare, single)
		b.ReportMetric(float64(took[1])/float64(took[0]), "coordinator/bare-2pc")
		b.ReportMetric(float64(took[2])/float64(took[0]), "coordinator/single-db")
		b.ReportMetric(float64(round*block)/took[0].Seconds(), "coordinator-tx/s")
	})

	// group-commit/clients=N: coordinator.WithGroupCommit on against off at 1, 16 and 64
	// concurrent transfers, each between a random pair of 256 accounts (east's a<i> to west's
	// a<i>, east first: concurrent transfers of one pair queue on its row locks, never deadlock).
	const accounts = 256
	for _, s := range []*testenv.Schema{east, west} {
		if _, err := s.Pool.Exec(ctx, `insert into accounts select 'a' || i, 1000000000 from generate_series(0, $1 - 1) i`, accounts); err != nil {
			b.Fatal(err)
		}
	}
	transfer := func(c *twopc.Coordinator) error {
		g, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		id := fmt.Sprint("a", rand.IntN(accounts))
		for _, db := range []struct{ name, sql string }{
			{"east", `update accounts set balance = balance - 1 where id = $1`},
			{"west", `update accounts set balance = balance + 1 where id = $1`},
		} {
			if err := g.Enlist(ctx, db.name, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, db.sql, id)
				return err
			}); err != nil {
				_ = g.Abort(ctx)
				return err
			}
		}
		return g.Commit(ctx)
	}
	withDBs := func(p *pgxpool.Pool, opts ...coordinator.Option) (*twopc.Coordinator, error) {
		c, err := twopc.New(p, opts...)
		if err != nil {
			return nil, err
		}
		b.Cleanup(func() { _ = c.Close() })
		for name, s := range map[string]*testenv.Schema{"east": east, "west": west} {
			if err := c.RegisterDB(name, s.Pool); err != nil {
				return nil, err
			}
		}
		return c, nil
	}
	coretest.GroupCommit(b, "group-commit", withDBs, log, coretest.GroupWindow, transfer)
	// votes/clients=N: WithVoteMarkers on against off, the same way.
	coretest.OnOff(b, "votes", withDBs, log, []coordinator.Option{twopc.WithVoteMarkers(true)}, transfer, twopc.WithVoteMarkers(false))

	var prepared int
	if err := log.Pool.QueryRow(ctx, `select count(*) from pg_prepared_xacts where database = current_database()`).Scan(&prepared); err != nil {
		b.Fatal(err)
	}
	if prepared != 0 {
		b.Errorf("%d prepared transactions left after the benchmark", prepared)
	}
}
