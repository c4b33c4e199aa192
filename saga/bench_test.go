package saga_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/saga"
)

// BenchmarkSaga measures three-step sequential sagas whose steps are HTTP participants on
// localhost, each an httptest server running barrier.Barrier.Handler over the benchmark's
// schema (the action increments a counter row, the compensation decrements it).
//
//   - "coordinator": Begin + 3×Add + Submit through the saga Coordinator; tx/s, p50/p99 of one
//     saga, and the PostgreSQL transactions the coordinator ran per saga (its dedicated pool's
//     acquire count: 2 — the insert of the saga with its steps, and the finish; see the package
//     doc).
//
//   - "bare": the same three action calls in sequence, no coordinator, no log: the ceiling.
//
//   - "ratio": blocks of both alternated (which goes first alternates too), coordinator/bare
//     throughput; the target is ≥ 0.5. The coordinator commits 2 PostgreSQL transactions per saga
//     in sequence with the three calls, against three calls alone.
//
//     go test -run '^$' -bench Saga -benchtime 3s ./saga/
func BenchmarkSaga(b *testing.B) {
	ctx := context.Background()
	pg := testenv.PG(b)
	if _, err := pg.Pool.Exec(ctx, `create table bench_counter (name text primary key, done bigint not null);
		insert into bench_counter values ('p0', 0), ('p1', 0), ('p2', 0)`); err != nil {
		b.Fatal(err)
	}
	// One signing client for the branches and the coordinator's own calls (WithHTTPClient).
	const secret = "bench-secret-0123456789abcdef" // participants verify signatures, as by default
	ops := []participant.Op{participant.OpAction, participant.OpCompensate}
	apply := func(ctx context.Context, tx pgx.Tx, name string, req participant.Request) error {
		delta := 1
		switch req.Op {
		case participant.OpAction:
		case participant.OpCompensate:
			delta = -1
		default:
			return fmt.Errorf("no %s: %w", req.Op, participant.ErrBadRequest)
		}
		_, err := tx.Exec(ctx, `update bench_counter set done = done + $1 where name = $2`, delta, name)
		return err
	}
	parts, client := coretest.BenchParticipants(b, pg, secret, 3, apply, ops)
	newCoordinator := func(b *testing.B) (*saga.Coordinator, *pgxpool.Pool) {
		return coretest.BenchCoordinator(b, saga.New, pg, coordinator.WithHTTPClient(client))
	}
	// coordinatedOn is one transaction through c over ps.
	coordinatedOn := func(ps []participant.HTTP) func(*saga.Coordinator) error {
		return func(c *saga.Coordinator) error {
			s, err := c.Begin(ctx)
			if err != nil {
				return err
			}
			for i, p := range ps {
				if err := s.Add(saga.Step{Name: fmt.Sprint("s", i), Participant: p}); err != nil {
					return err
				}
			}
			return s.Submit(ctx)
		}
	}
	coordinated := coordinatedOn(parts)
	bare := func() error {
		gid := uuid.Must(uuid.NewV7()).String()
		for i, p := range parts {
			p.Client = client // a coordinator signs with its own; the bare calls need it too
			if err := p.Do(ctx, participant.Request{GID: gid, Branch: fmt.Sprint("s", i), Op: participant.OpAction}); err != nil {
				return err
			}
		}
		return nil
	}

	b.Run("coordinator", func(b *testing.B) {
		c, pool := newCoordinator(b)
		coretest.TimedOnPool(b, "sagas/s", "saga", pool, func() error { return coordinated(c) })
	})
	b.Run("bare", func(b *testing.B) {
		for b.Loop() {
			if err := bare(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sagas/s")
	})
	// metrics-ratio and observed-ratio: the cost of metrics, and of metrics with tracing.
	coretest.OverheadRatios(b, saga.New, pg, coordinated, func(b *testing.B, tp trace.TracerProvider) func(*saga.Coordinator) error {
		ps, _ := coretest.BenchParticipants(b, pg, secret, 3, apply, ops, barrier.WithTelemetry(nil, tp))
		return coordinatedOn(ps)
	}, coordinator.WithHTTPClient(client))
	b.Run("ratio", func(b *testing.B) {
		c, _ := newCoordinator(b)
		took, _ := coretest.Rotate(b, 20, func() error { return coordinated(c) }, bare)
		b.ReportMetric(float64(took[1])/float64(took[0]), "coordinator/bare-throughput")
	})
	// group-commit/clients=N: coordinator.WithGroupCommit on against off at 1, 16 and 64
	// concurrent sagas.
	coretest.GroupCommit(b, "group-commit", saga.New, pg, coretest.GroupWindow, coordinated, coordinator.WithHTTPClient(client))
}
