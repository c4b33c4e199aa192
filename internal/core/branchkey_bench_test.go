package core_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/bench/concbench"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

// BenchmarkBranchKey measures what the foreign key from the branch table to the global one, which
// the schema no longer has, cost the log: two logs in schemas of their own, one migrated as today
// and one given the old key back, each written by 16 clients in rotating blocks of 1 s (b.N
// rounds). An operation is a TCC transaction's log writes with two branches — the first Try's
// insert with its branch, the second branch, the decision, the finish — and a saga's — its record
// with three steps, its finish. It reports each side's transactions per second and PostgreSQL
// processor time per transaction, and the ratio without/with.
//
//	go test -run '^$' -bench BranchKey -benchtime 5x ./internal/core/
func BenchmarkBranchKey(b *testing.B) {
	ctx := b.Context()
	logs := make([]*core.Log, 2)
	for i := range logs {
		s := testenv.PG(b)
		cfg, err := pgxpool.ParseConfig(s.URL)
		if err != nil {
			b.Fatal(err)
		}
		cfg.MaxConns = 16
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		if logs[i], err = core.New(pool, core.WithSchema(s.Name)); err != nil {
			b.Fatal(err)
		}
		if err := logs[i].Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		if i == 1 { // the schema as it was
			if _, err := pool.Exec(ctx, `alter table `+pgx.Identifier{s.Name, "txkit_branch"}.Sanitize()+
				` add foreign key (gid) references `+pgx.Identifier{s.Name, "txkit_global"}.Sanitize()+` (gid) on delete cascade`); err != nil {
				b.Fatal(err)
			}
		}
	}
	var n atomic.Int64
	op := func(l *core.Log) concbench.Op {
		return func(ctx context.Context, _ int) error {
			if err := tccLogWrites(ctx, l, fmt.Sprint("t-", n.Add(1))); err != nil {
				return err
			}
			gid := fmt.Sprint("s-", n.Add(1))
			if err := l.Create(ctx, gid, core.KindSaga, time.Minute, nil, httpBranch("a"), httpBranch("b"), httpBranch("c")); err != nil {
				return err
			}
			return l.Record(ctx, lock.Token{}, core.Progress{GID: gid, From: core.StatusRunning, Next: core.StatusSucceeded})
		}
	}
	r := concbench.NewRotation(16, time.Second, nil, op(logs[0]), op(logs[1]))
	for range b.N {
		if err := r.Round(ctx); err != nil {
			b.Fatal(err)
		}
	}
	f := r.Figures()
	for i, side := range []string{"without", "with"} {
		b.ReportMetric(f[i].PerSecond(), side+"-tx/s")
		b.ReportMetric(float64(f[i].CPU.Postgres)/float64(time.Millisecond)/float64(f[i].Ops), side+"-pg-cpu-ms/op")
	}
	b.ReportMetric(f[0].PerSecond()/f[1].PerSecond(), "ratio")
}
