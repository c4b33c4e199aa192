package coretest

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

// GroupWindow is the group commit window the coordinator benchmarks measure.
const GroupWindow = time.Millisecond

// GroupCommit runs the sub-benchmarks "group-commit/clients=N" of a coordinator benchmark
// ([OnOff] with coordinator.WithGroupCommit(window) against WithGroupCommit(0): group commit is
// on by default). clients=1 measures the lone transaction: what group commit adds to it.
func GroupCommit[C coordinator.Base](b *testing.B, name string, newFn func(*pgxpool.Pool, ...coordinator.Option) (C, error),
	pg *testenv.Schema, window time.Duration, run func(C) error, opts ...coordinator.Option) {
	b.Helper()
	OnOff(b, name, newFn, pg, []coordinator.Option{coordinator.WithGroupCommit(window)}, run,
		append([]coordinator.Option{coordinator.WithGroupCommit(0)}, opts...)...)
}

// OnOff runs the sub-benchmarks "<name>/clients=N" of a coordinator benchmark, N in 1, 16 and 64:
// run (one global transaction) through a coordinator made by newFn on pg with opts and with ("on"),
// against one with opts alone ("off"), each on a pool of its own, in rotating blocks ([Rotate])
// so that load changes on the shared machine weigh on both alike. A block is N goroutines each
// running max(4, 20/N) transactions one after the other. Each reports on-tx/s and off-tx/s,
// on/off-throughput, the latency of one transaction (on-p50-ms, off-p50-ms, on-p99-ms,
// off-p99-ms) and the statements each coordinator sent per transaction (on-pg-tx/gtx,
// off-pg-tx/gtx: its pool's acquires, each one PostgreSQL transaction).
func OnOff[C coordinator.Base](b *testing.B, name string, newFn func(*pgxpool.Pool, ...coordinator.Option) (C, error),
	pg *testenv.Schema, with []coordinator.Option, run func(C) error, opts ...coordinator.Option) {
	b.Helper()
	for _, n := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("%s/clients=%d", name, n), func(b *testing.B) {
			on, onPool := BenchCoordinator(b, newFn, pg, append(append([]coordinator.Option{}, opts...), with...)...)
			off, offPool := BenchCoordinator(b, newFn, pg, opts...)
			// Warm each pool's connections outside the timed part.
			for _, c := range []C{on, off} {
				if err := concurrently(n, 1, func() error { return run(c) }, nil); err != nil {
					b.Fatal(err)
				}
			}
			each := max(4, 20/n)
			var lat [2][]time.Duration
			var errs [2]error
			block := func(i int, c C) func() error {
				return func() error {
					if errs[i] == nil {
						errs[i] = concurrently(n, each, func() error { return run(c) }, &lat[i])
					}
					return nil
				}
			}
			acq0 := [2]int64{onPool.Stat().AcquireCount(), offPool.Stat().AcquireCount()}
			took, rounds := Rotate(b, 1, block(0, on), block(1, off))
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			txs := float64(rounds * n * each)
			b.ReportMetric(txs/took[0].Seconds(), "on-tx/s")
			b.ReportMetric(txs/took[1].Seconds(), "off-tx/s")
			b.ReportMetric(float64(took[1])/float64(took[0]), "on/off-throughput")
			for i, side := range []string{"on", "off"} {
				slices.Sort(lat[i])
				b.ReportMetric(ms(lat[i][len(lat[i])/2]), side+"-p50-ms")
				b.ReportMetric(ms(lat[i][len(lat[i])*99/100]), side+"-p99-ms")
			}
			b.ReportMetric(float64(onPool.Stat().AcquireCount()-acq0[0])/txs, "on-pg-tx/gtx")
			b.ReportMetric(float64(offPool.Stat().AcquireCount()-acq0[1])/txs, "off-pg-tx/gtx")
		})
	}
}

// concurrently runs f each times in each of n goroutines, appending every call's duration to
// lat (when not nil), and returns the first error.
func concurrently(n, each int, f func() error, lat *[]time.Duration) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for range n {
		wg.Go(func() {
			took := make([]time.Duration, 0, each)
			for range each {
				start := time.Now()
				if err := f(); err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
					return
				}
				took = append(took, time.Since(start))
			}
			mu.Lock()
			if lat != nil {
				*lat = append(*lat, took...)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return first
}
