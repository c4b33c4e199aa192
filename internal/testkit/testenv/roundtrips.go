package testenv

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RoundTrips counts what a pool's connections send to PostgreSQL: single statements and batches
// (a batch goes out in one round trip).
type RoundTrips struct{ queries, batches atomic.Int64 }

// Sent returns the statements and batches sent so far.
func (r *RoundTrips) Sent() (queries, batches int64) { return r.queries.Load(), r.batches.Load() }

// During returns the statements and batches fn sends.
func (r *RoundTrips) During(fn func()) (queries, batches int64) {
	q0, b0 := r.Sent()
	fn()
	q, b := r.Sent()
	return q - q0, b - b0
}

func (r *RoundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.queries.Add(1)
	return ctx
}
func (r *RoundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *RoundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.batches.Add(1)
	return ctx
}
func (r *RoundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *RoundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// CountingPool returns a pool on s whose connections count what they send in the returned
// RoundTrips; it is closed when the test ends.
func CountingPool(t testing.TB, s *Schema) (*pgxpool.Pool, *RoundTrips) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	rt := &RoundTrips{}
	cfg.ConnConfig.Tracer = rt
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, rt
}
