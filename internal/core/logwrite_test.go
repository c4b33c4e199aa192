package core_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txkit/txkit/bench/cpustat"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/lock"
)

// BenchmarkLogWrites is the Go cost of the coordinators' log writes alone, at 16 clients: 16
// goroutines each record transactions through one Log with the coordinators' defaults (group
// commit core.DefaultGroupCommitWindow, deferred finish), b.N transactions in all. saga: the
// record with its 3 steps (running), then the success (running → succeeded, written before it
// returns); tcc: the record with its 2 branches (trying), the decision (→ confirming) and the
// deferred finish (→ confirmed). go-cpu-us/op is the process's processor time per transaction, flushes/op the round trips its writes
// took (group commit's). Its allocs/op and B/op count every goroutine of the process (the
// group writer's and pgx's included): unlike its ns/op they do not depend on the machine's load.
//
//	go test -run '^$' -bench LogWrites -benchmem -benchtime 2000x ./internal/core/
func BenchmarkLogWrites(b *testing.B) {
	const clients = 16
	l := newLog(b, core.WithGroupCommit(core.DefaultGroupCommitWindow), core.WithDeferredFinish())
	bs := []core.Branch{httpBranch("a"), httpBranch("b"), httpBranch("c")}
	for i := range bs {
		bs[i].Seq = i
	}
	sides := []struct {
		name string
		tx   func(gid string) error
	}{
		{"saga", func(gid string) error {
			ctx := b.Context()
			if err := l.CreateIn(ctx, gid, core.KindSaga, core.StatusRunning, time.Minute, []byte(`{}`), bs...); err != nil {
				return err
			}
			return l.Record(ctx, lock.Token{}, core.Progress{GID: gid, From: core.StatusRunning, Next: core.StatusSucceeded})
		}},
		{"tcc", func(gid string) error {
			ctx := b.Context()
			if err := l.CreateIn(ctx, gid, core.KindTCC, core.StatusTrying, time.Minute, nil, bs[:2]...); err != nil {
				return err
			}
			if _, err := l.Decide(ctx, gid, core.StatusTrying, core.StatusConfirming); err != nil {
				return err
			}
			return l.Record(ctx, lock.Token{}, core.Progress{GID: gid, From: core.StatusConfirming, Next: core.StatusConfirmed})
		}},
	}
	var run atomic.Int64
	for _, side := range sides {
		b.Run(side.name, func(b *testing.B) {
			// Warm up: the pool's connections and their prepared statements.
			if err := logWritesAt(clients, 4*clients, &run, side.tx); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			before, stats := cpustat.Read(), l.GroupCommitStats()
			if err := logWritesAt(clients, b.N, &run, side.tx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(cpustat.Read().Sub(before).Self.Microseconds())/float64(b.N), "go-cpu-us/op")
			after := l.GroupCommitStats()
			b.ReportMetric(float64(after.Flushes-stats.Flushes)/float64(b.N), "flushes/op")
			if err := l.Flush(b.Context()); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// logWritesAt makes n transactions with tx from clients goroutines, and returns the first error.
func logWritesAt(clients, n int, run *atomic.Int64, tx func(gid string) error) error {
	var next atomic.Int64
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	batch := run.Add(1)
	for range clients {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if err := tx(fmt.Sprintf("lw-%d-%d", batch, i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// The log's writes at 16 clients, through the group writer with the coordinators' defaults (group
// commit, deferred finish), cost a bounded number of allocations per saga (the record with its 3
// steps, the success: BenchmarkLogWrites), counted with testing.AllocsPerRun around rounds of 16
// sagas on 16 goroutines (every goroutine of the process). Issue 33: 75 before the arguments
// pointed into the write (args.go), a queued write took one channel (two before) and the window
// timers were reused; 45 after. The bound leaves room for the pools' and the runtime's goroutines.
func TestIntegrationLogWritesAllocs(t *testing.T) {
	const clients, max = 16, 55
	l := newLog(t, core.WithGroupCommit(core.DefaultGroupCommitWindow), core.WithDeferredFinish())
	bs := []core.Branch{httpBranch("a"), httpBranch("b"), httpBranch("c")}
	for i := range bs {
		bs[i].Seq = i
	}
	ctx := t.Context()
	saga := func(gid string) error {
		if err := l.CreateIn(ctx, gid, core.KindSaga, core.StatusRunning, time.Minute, []byte(`{}`), bs...); err != nil {
			return err
		}
		return l.Record(ctx, lock.Token{}, core.Progress{GID: gid, From: core.StatusRunning, Next: core.StatusSucceeded})
	}
	var run atomic.Int64
	var err error
	round := func() {
		if e := logWritesAt(clients, clients, &run, saga); e != nil && err == nil {
			err = e
		}
	}
	coretest.AllocsAtMost(t, fmt.Sprint(clients, " sagas"), 40, clients*max, round)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}
