package shardbench_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/bench/concbench"
	"github.com/txkit/txkit/bench/cpustat"
	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/coordinator/shard"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/saga"
	"github.com/txkit/txkit/tcc"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// clients is how many goroutines begin transactions at once (TXKIT_SHARDBENCH_CLIENTS, default 32).
func clients() int {
	if n, err := strconv.Atoi(os.Getenv("TXKIT_SHARDBENCH_CLIENTS")); err == nil && n > 0 {
		return n
	}
	return 32
}

// logShard is one shard's database as the benchmark sees it: a pool counting its commits and
// the pid of its server's postmaster, whose process tree's processor time is the shard's.
type logShard struct {
	pool       *pgxpool.Pool
	schema     string
	commits    *concbench.Commits
	postmaster int
}

func shards(b *testing.B, n, conns int) []logShard {
	b.Helper()
	var out []logShard
	for _, db := range testenv.PGShards(b, n) {
		c := &concbench.Commits{}
		pool, err := c.Pool(b.Context(), db.URL, int32(conns))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		var backend int
		if err := pool.QueryRow(b.Context(), `select pg_backend_pid()`).Scan(&backend); err != nil {
			b.Fatal(err)
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", backend))
		if err != nil {
			b.Fatalf("the shard's server runs elsewhere (its CPU cannot be read): %v", err)
		}
		out = append(out, logShard{pool: pool, schema: db.Name, commits: c, postmaster: cpustat.Parent(stat)})
	}
	return out
}

// BenchmarkShards: TCC transactions (two in-process branches: try, try, commit) and sagas (two
// in-process steps) begun by clients() goroutines through a shard.Router over 1, 2 and 3 log
// shards, each its own PostgreSQL server. Per transaction: PostgreSQL commits (all shards), the
// processor time of each shard's server and of this process; the machine's busy share.
func BenchmarkShards(b *testing.B) {
	for _, proto := range []string{"tcc", "saga"} {
		for n := 1; n <= 3; n++ {
			b.Run(fmt.Sprintf("%s/shards=%d", proto, n), func(b *testing.B) { run(b, proto, n) })
		}
	}
}

func run(b *testing.B, proto string, n int) {
	c := clients()
	ls := shards(b, n, c+4)
	noop := participant.ParticipantFunc(func(context.Context, participant.Request) error { return nil })
	var op func(ctx context.Context) error
	switch proto {
	case "tcc":
		r := build(b, ls, tcc.New)
		h := setup(b, r, noop)
		op = func(ctx context.Context) error {
			g, err := r.Begin(ctx)
			if err != nil {
				return err
			}
			for _, name := range []string{"stock", "pay"} {
				if err := g.Try(ctx, tcc.Branch{Name: name, Participant: h}); err != nil {
					return err
				}
			}
			return g.Commit(ctx)
		}
	case "saga":
		r := build(b, ls, saga.New)
		h := setup(b, r, noop)
		op = func(ctx context.Context) error {
			s, err := r.Begin(ctx)
			if err != nil {
				return err
			}
			for _, name := range []string{"stock", "pay"} {
				if err := s.Add(saga.Step{Name: name, Participant: h}); err != nil {
					return err
				}
			}
			return s.Submit(ctx)
		}
	}

	commits0 := make([]int64, n)
	cpu0 := make([]time.Duration, n)
	for i, s := range ls {
		commits0[i], cpu0[i] = s.commits.Load(), cpustat.Tree(s.postmaster)
	}
	t0 := cpustat.Read()
	start := time.Now()
	b.ResetTimer()
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		first atomic.Pointer[error]
	)
	for range c {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := op(b.Context()); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	took := time.Since(start)
	if err := first.Load(); err != nil {
		b.Fatal(*err)
	}
	d := cpustat.Read().Sub(t0)
	var commits int64
	var pg time.Duration
	for i, s := range ls {
		k := s.commits.Load() - commits0[i]
		cpu := cpustat.Tree(s.postmaster) - cpu0[i]
		commits += k
		pg += cpu
		b.ReportMetric(cpustat.PerOp(cpu, b.N), fmt.Sprintf("shard%d-pg-cpu-ms/op", i))
		b.ReportMetric(float64(k)/float64(b.N), fmt.Sprintf("shard%d-commits/op", i))
	}
	b.ReportMetric(float64(b.N)/took.Seconds(), "tx/s")
	b.ReportMetric(float64(commits)/float64(b.N), "pg-commits/op")
	b.ReportMetric(cpustat.PerOp(pg, b.N), "pg-cpu-ms/op")
	b.ReportMetric(cpustat.PerOp(d.Self, b.N), "go-cpu-ms/op")
	b.ReportMetric(d.BusyShare(), "busy")
}

// build returns a router over coordinators made by newFn (tcc.New, saga.New) on the shards.
func build[G any, C shard.Coordinator[G]](b *testing.B, ls []logShard, newFn func(*pgxpool.Pool, ...coordinator.Option) (C, error)) *shard.Router[G, C] {
	b.Helper()
	var cs []C
	for _, s := range ls {
		c, err := newFn(s.pool, coordinator.WithSchema(s.schema))
		if err != nil {
			b.Fatal(err)
		}
		cs = append(cs, c)
	}
	r, err := shard.New(cs...)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// setup migrates the router's shards and registers the participant with every one.
func setup(b *testing.B, r interface {
	Migrate(context.Context) error
	Register(string, participant.Participant) (participant.Participant, error)
}, p participant.Participant) participant.Participant {
	b.Helper()
	if err := r.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	h, err := r.Register("p", p)
	if err != nil {
		b.Fatal(err)
	}
	return h
}
