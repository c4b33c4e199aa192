package core_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

// BenchmarkGroupCommitLone measures what group commit adds to a lone transaction's writes: the
// log writes of a TCC transaction of two branches (the first Try's insert with its branch, the
// second branch, the decision and the finish: 4 writes) made one after the other, with nothing
// else writing, through a log with group commit (window coretest.GroupWindow) and one without,
// each on a pool of its own, in rotating blocks of 50 transactions. It reports each side's
// p50-ms and p99-ms per transaction, and the difference of the medians (added-p50-us).
//
//	go test -run '^$' -bench GroupCommitLone -benchtime 3s ./internal/core/
func BenchmarkGroupCommitLone(b *testing.B) {
	s := testenv.PG(b)
	logs := make([]*core.Log, 2)
	for i, opts := range [][]core.LogOption{{core.WithGroupCommit(coretest.GroupWindow)}, nil} {
		pool, err := pgxpool.New(b.Context(), s.URL)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		if logs[i], err = core.New(pool, append(opts, core.WithSchema(s.Name))...); err != nil {
			b.Fatal(err)
		}
	}
	if err := logs[0].Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	var n int
	var lat [2][]time.Duration
	tx := func(i int) func() error {
		return func() error {
			ctx, l := b.Context(), logs[i]
			n++
			gid := fmt.Sprint("lone-", n)
			start := time.Now()
			err := tccLogWrites(ctx, l, gid)
			lat[i] = append(lat[i], time.Since(start))
			return err
		}
	}
	coretest.Rotate(b, 50, tx(0), tx(1))
	if st := logs[0].GroupCommitStats(); st.Immediate != st.Flushes || st.Writes != st.Flushes {
		b.Fatalf("a lone write waited or was batched: %+v", st)
	}
	var p50 [2]time.Duration
	for i, side := range []string{"on", "off"} {
		slices.Sort(lat[i])
		p50[i] = lat[i][len(lat[i])/2]
		b.ReportMetric(float64(p50[i])/float64(time.Millisecond), side+"-p50-ms")
		b.ReportMetric(float64(lat[i][len(lat[i])*99/100])/float64(time.Millisecond), side+"-p99-ms")
	}
	b.ReportMetric(float64(p50[0]-p50[1])/float64(time.Microsecond), "added-p50-us")
}
