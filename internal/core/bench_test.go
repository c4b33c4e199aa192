package core_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/participant"
)

// maxRecoveryHeap is the peak heap the recovering process may reach while it works through the
// backlog: the Recoverer holds one claimed batch at a time, so its memory must not grow with the
// backlog.
const maxRecoveryHeap = 200 << 20

// BenchmarkRecoveryBacklog is the recovery after a long participant outage: 100,000 TCC
// transactions decided confirming, two pending branches each and all due now, are inserted with
// one INSERT ... SELECT FROM generate_series per table. Then a Recoverer (default batch size 100
// and concurrency 16, tick every 100 ms) runs under a real lock.Elector on ZooKeeper, with a
// Driver that calls an in-process participant (which succeeds) for each branch's confirm and
// records the progress with Log.Record (one statement: the global row confirmed, the branches
// marked confirmed), until every transaction is confirmed.
//
// It reports the rate (tx/s, from Run's start — campaign and first tick included — to the last
// transaction recorded) and the process's peak Go heap (peak-heap-MB: runtime.MemStats.HeapInuse
// sampled every 100 ms, the maximum; the test binary, the pgx pool and the ZooKeeper session
// share it), next to the heap before Run (heap-before-MB), and the process's resident set the
// same way (peak-rss-MB: VmRSS of /proc/self/status; rss-before-MB). A peak above
// 200 MB fails the benchmark: memory would be growing with the backlog.
//
// It drains the backlog once, whatever b.N is: pass -benchtime 1x.
//
//	go test -run '^$' -bench RecoveryBacklog -benchtime 1x -timeout 30m ./internal/core/
func BenchmarkRecoveryBacklog(b *testing.B) {
	const rows = 100_000
	ctx := context.Background()
	pg := testenv.PG(b)
	l, err := core.New(pg.Pool, core.WithSchema(pg.Name))
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	global := pgx.Identifier{pg.Name, "txkit_global"}.Sanitize()
	branch := pgx.Identifier{pg.Name, "txkit_branch"}.Sanitize()
	start := time.Now()
	if _, err := pg.Pool.Exec(ctx, `insert into `+global+` (gid, kind, status, timeout_at, next_retry_at)
		select 'backlog-' || lpad(i::text, 6, '0'), $1, $2, now() + interval '1 hour', now()
		from generate_series(1, $3::int) as i`, core.KindTCC.String(), core.StatusConfirming.String(), rows); err != nil {
		b.Fatal(err)
	}
	if _, err := pg.Pool.Exec(ctx, `insert into `+branch+` (gid, branch, seq, target_kind, target, status)
		select 'backlog-' || lpad(i::text, 6, '0'), 'b' || s, s, $1, 'bench', $2
		from generate_series(1, $3::int) as i, generate_series(0, 1) as s`,
		core.TargetInProc.String(), core.BranchPending.String(), rows); err != nil {
		b.Fatal(err)
	}
	if _, err := pg.Pool.Exec(ctx, `analyze `+global+`; analyze `+branch); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d confirming transactions (%d branches) inserted in %v", rows, 2*rows, time.Since(start).Round(time.Millisecond))

	var confirms, finished atomic.Int64
	part := participant.ParticipantFunc(func(context.Context, participant.Request) error {
		confirms.Add(1)
		return nil
	})
	drv := core.DriverFunc(func(ctx context.Context, tok lock.Token, t *core.Transaction) error {
		names := make([]string, 0, len(t.Branches))
		for _, br := range t.Branches {
			if err := part.Do(ctx, participant.Request{GID: t.GID, Branch: br.Name, Op: participant.OpConfirm}); err != nil {
				return err
			}
			names = append(names, br.Name)
		}
		next, _ := t.Status.Outcome()
		if err := l.Record(ctx, tok, core.Progress{GID: t.GID, From: t.Status, Done: names, Next: next}); err != nil {
			return err
		}
		finished.Add(1)
		return nil
	})
	el := elector(b, testenv.ZKRoot(b)+"/leader", "bench")
	r, err := core.NewRecoverer(l, el, map[core.Kind]core.Driver{core.KindTCC: drv},
		core.WithSchedule("@every 100ms"), core.WithLogger(testLogger(b)))
	if err != nil {
		b.Fatal(err)
	}

	var rate, peakMB, beforeMB, peakRSSMB, rssBeforeMB float64
	drained := false
	for b.Loop() {
		if drained {
			continue // the backlog is gone: one drain is the measurement, whatever b.N is
		}
		drained = true
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		beforeMB = float64(ms.HeapInuse) / (1 << 20)

		var peak, peakRSS atomic.Uint64
		rssBefore := rss()
		stop := make(chan struct{})
		var sampler sync.WaitGroup
		sampler.Go(func() {
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			var ms runtime.MemStats
			for {
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peak.Load() {
					peak.Store(ms.HeapInuse)
				}
				if r := rss(); r > peakRSS.Load() {
					peakRSS.Store(r)
				}
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		})

		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		began := time.Now()
		go func() { done <- r.Run(rctx) }()
		deadline := began.Add(20 * time.Minute)
		nextLog := int64(rows / 4)
		var runErr error
	wait:
		for finished.Load() < rows {
			select {
			case runErr = <-done:
				break wait
			case <-time.After(100 * time.Millisecond): // a benchmark's own polling, not a test ordering events
			}
			if n := finished.Load(); n >= nextLog && n < rows {
				b.Logf("%d of %d confirmed after %v", n, rows, time.Since(began).Round(time.Millisecond))
				nextLog += rows / 4
			}
			if time.Now().After(deadline) {
				break
			}
		}
		elapsed := time.Since(began)
		cancel()
		if runErr == nil {
			runErr = <-done
		}
		close(stop)
		sampler.Wait()
		if runErr != nil {
			b.Fatalf("Run: %v", runErr)
		}
		if n := finished.Load(); n < rows {
			b.Fatalf("%d of %d transactions confirmed after %v (stats %+v)", n, rows, elapsed.Round(time.Second), r.Stats())
		}
		rate = float64(rows) / elapsed.Seconds()
		peakMB = float64(peak.Load()) / (1 << 20)
		peakRSSMB, rssBeforeMB = float64(peakRSS.Load())/(1<<20), float64(rssBefore)/(1<<20)
		b.Logf("%d transactions confirmed in %v; stats %+v", rows, elapsed.Round(time.Millisecond), r.Stats())
	}

	var open, pending int64
	// A confirmed transaction's branch rows keep their status (readers imply "confirmed" from the
	// transaction's: Progress.Next.BranchesImplied), so a branch is pending only under a transaction
	// that is not confirmed.
	if err := pg.Pool.QueryRow(ctx, `select (select count(*) from `+global+` where status <> $1),
		(select count(*) from `+branch+` b join `+global+` g using (gid) where g.status <> $1 and b.status <> $2)`,
		core.StatusConfirmed.String(), core.BranchConfirmed.String()).Scan(&open, &pending); err != nil {
		b.Fatal(err)
	}
	if open != 0 || pending != 0 {
		b.Errorf("%d transactions not confirmed and %d branches not confirmed left", open, pending)
	}
	if c := confirms.Load(); c < 2*rows {
		b.Errorf("%d confirms called, want at least %d", c, 2*rows)
	}
	b.ReportMetric(rate, "tx/s")
	b.ReportMetric(peakMB, "peak-heap-MB")
	b.ReportMetric(beforeMB, "heap-before-MB")
	b.ReportMetric(peakRSSMB, "peak-rss-MB")
	b.ReportMetric(rssBeforeMB, "rss-before-MB")
	if peakMB > maxRecoveryHeap>>20 {
		b.Errorf("peak heap %.1f MB while recovering %d transactions, above %d MB", peakMB, rows, maxRecoveryHeap>>20)
	}
}

// rss returns the process's resident set size in bytes (VmRSS of /proc/self/status), 0 when it
// cannot be read (not Linux).
func rss() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
