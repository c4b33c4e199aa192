package coretest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
)

// BenchParticipants starts n HTTP participants named p0, p1, … for a coordinator benchmark: each
// an httptest server (closed when b ends) whose one handler is the Handler of one barrier over
// pg (with opts), verifying signatures with secret, accepting only ops, and running fn(ctx, tx,
// name, req) in the barrier's transaction. It returns them, and the signing client to give the
// coordinator (coordinator.WithHTTPClient), which they are called with.
func BenchParticipants(b *testing.B, pg *testenv.Schema, secret string, n int,
	fn func(ctx context.Context, tx pgx.Tx, name string, req participant.Request) error, ops []participant.Op,
	opts ...barrier.Option) ([]participant.HTTP, *http.Client) {
	b.Helper()
	bar, err := barrier.New(pg.Pool, append([]barrier.Option{barrier.WithLogger(testenv.Logger(b)),
		barrier.WithSecrets(secret)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	if err := bar.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	client, err := participant.NewSigningClient(secret, nil)
	if err != nil {
		b.Fatal(err)
	}
	parts := make([]participant.HTTP, n)
	for i := range parts {
		name := fmt.Sprint("p", i)
		srv := httptest.NewServer(bar.Handler(func(ctx context.Context, tx pgx.Tx, req participant.Request) error {
			return fn(ctx, tx, name, req)
		}, barrier.WithAllowedOps(ops...)))
		b.Cleanup(srv.Close)
		parts[i] = participant.HTTP{URL: srv.URL} // called with the coordinator's client
	}
	return parts, client
}

// BenchCoordinator returns a migrated coordinator made by newFn (tcc.New, saga.New, twopc.New)
// on a pool of its own on pg's schema — so that the pool's acquire count is the coordinator's
// alone — with the benchmark's logger and opts. The pool closes when b ends.
func BenchCoordinator[C coordinator.Base](b *testing.B, newFn func(*pgxpool.Pool, ...coordinator.Option) (C, error),
	pg *testenv.Schema, opts ...coordinator.Option) (C, *pgxpool.Pool) {
	b.Helper()
	pool, err := pgxpool.New(context.Background(), pg.URL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	c, err := newFn(pool, append([]coordinator.Option{coordinator.WithSchema(pg.Name), coordinator.WithLogger(testenv.Logger(b))}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	return c, pool
}

// Timed calls f once per b.Loop iteration, failing the benchmark on its error, and reports the
// throughput under unit ("tx/s", "sagas/s") and the p50-ms and p99-ms latency of one call.
func Timed(b *testing.B, unit string, f func() error) {
	b.Helper()
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
	slices.Sort(lat)
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[min(len(lat)-1, len(lat)*99/100)]), "p99-ms")
}

// TimedOnPool is Timed after one call of f that warms the connections, and also reports pool's
// acquire count per timed call under "pg-tx/"+per: pool is the coordinator's own, and each of its
// statements acquires it once and runs as one PostgreSQL transaction.
func TimedOnPool(b *testing.B, unit, per string, pool *pgxpool.Pool, f func() error) {
	b.Helper()
	if err := f(); err != nil {
		b.Fatal(err)
	}
	acq0 := pool.Stat().AcquireCount()
	Timed(b, unit, f)
	b.ReportMetric(float64(pool.Stat().AcquireCount()-acq0)/float64(b.N), "pg-tx/"+per)
}

// Rotate times blocks of block calls of each of fs, once per b.Loop iteration, the order rotating
// by one each iteration (so load changes on a shared machine weigh on all alike), failing the
// benchmark on an error. It returns the time each of fs took in all and the iterations run (each
// ran rounds*block calls).
func Rotate(b *testing.B, block int, fs ...func() error) (took []time.Duration, rounds int) {
	b.Helper()
	took = make([]time.Duration, len(fs))
	for b.Loop() {
		for k := range fs {
			i := (k + rounds) % len(fs)
			start := time.Now()
			for range block {
				if err := fs[i](); err != nil {
					b.Fatal(err)
				}
			}
			took[i] += time.Since(start)
		}
		rounds++
	}
	return took, rounds
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// OverheadRatios runs the sub-benchmarks "metrics-ratio" and "observed-ratio" of a coordinator
// benchmark: one global transaction through a coordinator made by newFn on pg with opts and its
// metrics on a registry — and, for "observed", tracing through the OpenTelemetry SDK with a batch
// exporter to a sink that drops the spans, in the coordinator and in its participants' barriers —
// against one with neither (the default global tracer provider is a no-op), in rotating blocks of
// 20. run is the transaction on the plain participants; traced(b, tp) returns it on participants
// whose barriers trace with tp. Each reports the throughput with over the one without
// ("with/without-metrics", "observed/plain").
func OverheadRatios[C coordinator.Base](b *testing.B, newFn func(*pgxpool.Pool, ...coordinator.Option) (C, error),
	pg *testenv.Schema, run func(C) error, traced func(b *testing.B, tp trace.TracerProvider) func(C) error, opts ...coordinator.Option) {
	b.Helper()
	ratio := func(b *testing.B, unit string, runWith func(C) error, extra ...coordinator.Option) {
		plain, _ := BenchCoordinator(b, newFn, pg, opts...)
		with, _ := BenchCoordinator(b, newFn, pg, append(append([]coordinator.Option{}, opts...), extra...)...)
		took, _ := Rotate(b, 20, func() error { return runWith(with) }, func() error { return run(plain) })
		b.ReportMetric(float64(took[1])/float64(took[0]), unit)
	}
	b.Run("metrics-ratio", func(b *testing.B) {
		ratio(b, "with/without-metrics", run, coordinator.WithTelemetry(prometheus.NewRegistry(), nil))
	})
	b.Run("observed-ratio", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		ratio(b, "observed/plain", traced(b, tp), coordinator.WithTelemetry(prometheus.NewRegistry(), nil), coordinator.WithTelemetry(nil, tp))
	})
}
