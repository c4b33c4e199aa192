package saga_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/saga"
)

// BenchmarkSaga measures three-step sequential sagas whose steps are HTTP participants on
// localhost, each an httptest server running participant.Barrier.Handler over the benchmark's
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
	const secret = "bench-secret-0123456789abcdef" // participants verify signatures, as by default
	bar, err := participant.NewBarrier(pg.Pool, participant.WithBarrierLogger(testLogger(b)), participant.WithSecrets(secret))
	if err != nil {
		b.Fatal(err)
	}
	if err := bar.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := pg.Pool.Exec(ctx, `create table bench_counter (name text primary key, done bigint not null);
		insert into bench_counter values ('p0', 0), ('p1', 0), ('p2', 0)`); err != nil {
		b.Fatal(err)
	}
	// One signing client for the branches and the coordinator's own calls (WithHTTPClient).
	client, err := participant.NewSigningClient(secret, nil)
	if err != nil {
		b.Fatal(err)
	}
	parts := make([]participant.HTTP, 3)
	for i := range parts {
		name := fmt.Sprint("p", i)
		srv := httptest.NewServer(bar.Handler(func(ctx context.Context, tx pgx.Tx, req participant.Request) error {
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
		}, participant.WithAllowedOps(participant.OpAction, participant.OpCompensate)))
		b.Cleanup(srv.Close)
		parts[i] = participant.HTTP{URL: srv.URL, Client: client}
	}
	newCoordinator := func(b *testing.B) (*saga.Coordinator, *pgxpool.Pool) {
		pool, err := pgxpool.New(ctx, pg.URL)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		c, err := saga.New(pool, coordinator.WithSchema(pg.Name), coordinator.WithLogger(testLogger(b)), coordinator.WithHTTPClient(client))
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		return c, pool
	}
	coordinated := func(c *saga.Coordinator) error {
		s, err := c.Begin()
		if err != nil {
			return err
		}
		for i, p := range parts {
			if err := s.Add(saga.Step{Name: fmt.Sprint("s", i), Participant: p}); err != nil {
				return err
			}
		}
		return s.Submit(ctx)
	}
	bare := func() error {
		gid := uuid.Must(uuid.NewV7()).String()
		for i, p := range parts {
			if err := p.Do(ctx, participant.Request{GID: gid, Branch: fmt.Sprint("s", i), Op: participant.OpAction}); err != nil {
				return err
			}
		}
		return nil
	}

	b.Run("coordinator", func(b *testing.B) {
		c, pool := newCoordinator(b)
		if err := coordinated(c); err != nil { // warm the connections
			b.Fatal(err)
		}
		acq0 := pool.Stat().AcquireCount()
		var lat []time.Duration
		for b.Loop() {
			start := time.Now()
			if err := coordinated(c); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sagas/s")
		slices.Sort(lat)
		b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
		b.ReportMetric(ms(lat[min(len(lat)-1, len(lat)*99/100)]), "p99-ms")
		b.ReportMetric(float64(pool.Stat().AcquireCount()-acq0)/float64(b.N), "pg-tx/saga")
	})
	b.Run("bare", func(b *testing.B) {
		for b.Loop() {
			if err := bare(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sagas/s")
	})
	b.Run("ratio", func(b *testing.B) {
		c, _ := newCoordinator(b)
		const block = 20
		var coord, ceiling time.Duration
		timed := func(f func() error) time.Duration {
			start := time.Now()
			for range block {
				if err := f(); err != nil {
					b.Fatal(err)
				}
			}
			return time.Since(start)
		}
		withC := func() error { return coordinated(c) }
		round := 0
		for b.Loop() {
			if round%2 == 0 {
				coord += timed(withC)
				ceiling += timed(bare)
			} else {
				ceiling += timed(bare)
				coord += timed(withC)
			}
			round++
		}
		b.ReportMetric(float64(ceiling)/float64(coord), "coordinator/bare-throughput")
	})
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
