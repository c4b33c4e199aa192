package tcc_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/tcc"
)

// BenchmarkTCC measures global TCC transactions of three HTTP participants on localhost. Each
// participant is an httptest server whose one handler is barrier.Barrier.Handler over the
// benchmark's PostgreSQL schema: try, confirm and cancel each run in a transaction of their own
// that writes the barrier marker and updates the participant's counter row (reserved, used).
//
//   - "coordinator": Begin + 3×Try (one after the other) + Commit through tcc, with the default
//     options (Commit calls the three confirms concurrently, WithConcurrency 8). It reports tx/s,
//     the latency of one global transaction (p50-ms, p99-ms), and what the coordinator writes to
//     PostgreSQL per global transaction (see writes below).
//   - "bare": the same six participant calls — three tries, then three confirms, one after the
//     other — with no coordinator and no log: the ceiling on this machine. It reports tx/s.
//   - "ratio": alternates blocks of 20 coordinator and 20 bare transactions (which one goes first
//     alternates too), so load changes on the shared machine weigh on both alike, and reports the
//     coordinator's throughput as a fraction of bare's (coordinator/bare-throughput; target ≥ 0.5).
//
// Both variants use a new gid per transaction, the same participants and the same barrier table.
//
//	go test -run '^$' -bench TCC -benchtime 3s ./tcc/
func BenchmarkTCC(b *testing.B) {
	ctx := context.Background()
	pg := testenv.PG(b)
	if _, err := pg.Pool.Exec(ctx, `create table bench_counter (name text primary key, reserved bigint not null, used bigint not null);
		insert into bench_counter values ('p0', 0, 0), ('p1', 0, 0), ('p2', 0, 0)`); err != nil {
		b.Fatal(err)
	}
	// One signing client for the branches and the coordinator's own calls (WithHTTPClient).
	const secret = "bench-secret-0123456789abcdef" // participants verify signatures, as by default
	ops := []participant.Op{participant.OpTry, participant.OpConfirm, participant.OpCancel}
	apply := func(ctx context.Context, tx pgx.Tx, name string, req participant.Request) error {
		var sql string
		switch req.Op {
		case participant.OpTry:
			sql = `update bench_counter set reserved = reserved + 1 where name = $1`
		case participant.OpConfirm:
			sql = `update bench_counter set reserved = reserved - 1, used = used + 1 where name = $1`
		case participant.OpCancel:
			sql = `update bench_counter set reserved = reserved - 1 where name = $1`
		default:
			return fmt.Errorf("no %s: %w", req.Op, participant.ErrBadRequest)
		}
		_, err := tx.Exec(ctx, sql, name)
		return err
	}
	parts, client := coretest.BenchParticipants(b, pg, secret, 3, apply, ops)

	// newCoordinator returns a migrated Coordinator on a pool of its own, so that the pool's
	// acquire count is the coordinator's alone (the participants use pg.Pool).
	newCoordinator := func(b *testing.B) (*tcc.Coordinator, *pgxpool.Pool) {
		return coretest.BenchCoordinator(b, tcc.New, pg, coordinator.WithHTTPClient(client))
	}
	// coordinatedOn is one transaction through c over ps.
	coordinatedOn := func(ps []participant.HTTP) func(*tcc.Coordinator) error {
		return func(c *tcc.Coordinator) error {
			g, err := c.Begin(ctx)
			if err != nil {
				return err
			}
			for i, p := range ps {
				if err := g.Try(ctx, tcc.Branch{Name: fmt.Sprint("b", i), Participant: p}); err != nil {
					_ = g.Rollback(ctx)
					return err
				}
			}
			return g.Commit(ctx)
		}
	}
	coordinated := coordinatedOn(parts)
	bare := func() error {
		gid := uuid.Must(uuid.NewV7()).String()
		for _, op := range []participant.Op{participant.OpTry, participant.OpConfirm} {
			for i, p := range parts {
				p.Client = client // a coordinator signs with its own; the bare calls need it too
				if err := p.Do(ctx, participant.Request{GID: gid, Branch: fmt.Sprint("b", i), Op: op}); err != nil {
					return err
				}
			}
		}
		return nil
	}

	b.Run("coordinator", func(b *testing.B) {
		c, pool := newCoordinator(b)
		// Nothing has written the coordinator's tables yet (the first sub-benchmark created them).
		tuples0 := settledTupleWrites(b, pg)
		acq0 := pool.Stat().AcquireCount()
		// Warm the connections outside the timed part; its writes are counted with the rest.
		if err := coordinated(c); err != nil {
			b.Fatal(err)
		}
		coretest.Timed(b, "tx/s", func() error { return coordinated(c) })
		n := float64(b.N)

		// writes: what the coordinator wrote to PostgreSQL per global transaction, two ways.
		//
		// pg-tx/gtx is the pool's acquire count per global transaction. Every coordinator
		// statement acquires the (dedicated) pool once and runs as one PostgreSQL transaction,
		// and on the happy path each of them writes: one insert per Try (the first with the
		// global row), Commit's decision and its finishing statement — the N+2 = 5 of docs/coordinators.md. (pg_stat_database's
		// xact_commit would count the participants' and other sessions' commits in the same
		// database, so it is not used.)
		//
		// tuple-writes/gtx is the rows those transactions wrote, from pg_stat_user_tables
		// (n_tup_ins + n_tup_upd + n_tup_del) on the coordinator's two tables, read once the
		// pool is closed so that every backend has flushed its statistics: 1 global + 3 branch
		// inserts, the decision's update of the global row, and the finish's update of the
		// global row and the 3 branches = 9.
		//
		// Both counts include the warm-up transaction: n+1 global transactions in all. A
		// backend that flushed less than a second ago defers its next flush by up to 10 s, so
		// the pool is closed first: exiting backends flush at once.
		acq := pool.Stat().AcquireCount() - acq0
		pool.Close()
		tuples := settledTupleWrites(b, pg) - tuples0
		b.ReportMetric(float64(acq)/(n+1), "pg-tx/gtx")
		b.ReportMetric(float64(tuples)/(n+1), "tuple-writes/gtx")
	})
	b.Run("bare", func(b *testing.B) {
		if err := bare(); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := bare(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tx/s")
	})
	// metrics-ratio and observed-ratio: the cost of metrics, and of metrics with tracing.
	coretest.OverheadRatios(b, tcc.New, pg, coordinated, func(b *testing.B, tp trace.TracerProvider) func(*tcc.Coordinator) error {
		ps, _ := coretest.BenchParticipants(b, pg, secret, 3, apply, ops, barrier.WithTelemetry(nil, tp))
		return coordinatedOn(ps)
	}, coordinator.WithHTTPClient(client))
	b.Run("ratio", func(b *testing.B) {
		c, _ := newCoordinator(b)
		const block = 20
		took, rounds := coretest.Rotate(b, block, func() error { return coordinated(c) }, bare)
		coord, ceiling := took[0], took[1]
		b.ReportMetric(float64(ceiling)/float64(coord), "coordinator/bare-throughput")
		b.ReportMetric(float64(rounds*block)/coord.Seconds(), "coordinator-tx/s")
		b.ReportMetric(float64(rounds*block)/ceiling.Seconds(), "bare-tx/s")
	})

	// group-commit/clients=N: coordinator.WithGroupCommit on against off at 1, 16 and 64
	// concurrent transactions.
	coretest.GroupCommit(b, "group-commit", tcc.New, pg, coretest.GroupWindow, coordinated, coordinator.WithHTTPClient(client))
	// group-commit-inproc/clients=N: the same with three in-process participants that do
	// nothing, so that the coordinator's log writes are most of the work.
	var mu sync.Mutex
	noops := map[*tcc.Coordinator][]participant.Participant{}
	noop := participant.ParticipantFunc(func(context.Context, participant.Request) error { return nil })
	inproc := func(c *tcc.Coordinator) error {
		mu.Lock()
		ps, ok := noops[c]
		for i := 0; !ok && i < 3; i++ {
			p, err := c.Register(fmt.Sprint("noop", i), noop)
			if err != nil {
				mu.Unlock()
				return err
			}
			ps = append(ps, p)
		}
		noops[c] = ps
		mu.Unlock()
		g, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		for i, p := range ps {
			if err := g.Try(ctx, tcc.Branch{Name: fmt.Sprint("b", i), Participant: p}); err != nil {
				return err
			}
		}
		return g.Commit(ctx)
	}
	coretest.GroupCommit(b, "group-commit-inproc", tcc.New, pg, coretest.GroupWindow, inproc)

	// Every global transaction confirmed: nothing is left reserved.
	var reserved int64
	if err := pg.Pool.QueryRow(ctx, `select sum(reserved) from bench_counter`).Scan(&reserved); err != nil {
		b.Fatal(err)
	}
	if reserved != 0 {
		b.Errorf("%d reservations left after the benchmark, want 0", reserved)
	}
}

// settledTupleWrites returns n_tup_ins + n_tup_upd + n_tup_del of the coordinator's tables in
// pg's schema once the value has stopped changing: the writers' backends have exited (and so
// flushed their statistics) or have been idle long enough to flush. It reads until two readings
// 1.5 s apart agree.
func settledTupleWrites(b *testing.B, pg *testenv.Schema) int64 {
	b.Helper()
	read := func() int64 {
		var n int64
		if err := pg.Pool.QueryRow(context.Background(), `select coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint
			from pg_stat_user_tables where schemaname = $1 and relname in ('txkit_global', 'txkit_branch')`, pg.Name).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	last := read()
	for range 20 {
		time.Sleep(1500 * time.Millisecond) // waiting for PostgreSQL's statistics flush, not ordering events
		n := read()
		if n == last {
			return n
		}
		last = n
	}
	b.Fatalf("the table statistics of %s did not settle", pg.Name)
	return 0
}
