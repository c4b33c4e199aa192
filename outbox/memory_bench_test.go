package outbox_test

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
)

// maxRelayRSS is the peak resident set size a relay process may reach while it drains a backlog:
// the relay holds one batch at a time, so its memory must not grow with the backlog.
const maxRelayRSS = 150 << 20

// BenchmarkRelayBacklogMemory loads a backlog of 100,000 ("100k") and 1,000,000 ("1M") pending
// messages (1000 keys, ~10-byte bodies) into a fresh outbox with one INSERT ... SELECT FROM
// generate_series, then drains it with one relay process (the test binary re-executed, as in
// TestIntegrationKeyOrderAcrossRelayFailover; batch size 128) publishing to RocketMQ, and reports
// that process's peak RSS (peak-RSS-MB, from its rusage) and the drain rate (msgs/s, from the first
// deleted batch to an empty outbox). A peak RSS above 150 MB fails the benchmark.
//
// Each sub-benchmark drains its backlog once, whatever b.N is: pass -benchtime 1x. 1M takes
// minutes, so give the binary a long -timeout; with a -timeout below 30 minutes (go test's
// default is 10) "1M" is skipped and says so.
//
//	go test -run '^$' -bench RelayBacklogMemory -benchtime 1x -timeout 60m ./outbox/
func BenchmarkRelayBacklogMemory(b *testing.B) {
	for _, c := range []struct {
		name string
		rows int
	}{{"100k", 100_000}, {"1M", 1_000_000}} {
		b.Run(c.name, func(b *testing.B) {
			if c.rows >= 1_000_000 && timeoutBelow(30*time.Minute) {
				b.Skip("draining 1M messages takes minutes: run with -benchtime 1x -timeout 60m")
			}
			backlogMemory(b, c.rows)
		})
	}
}

// timeoutBelow reports whether the test binary's -test.timeout is set and below d.
func timeoutBelow(d time.Duration) bool {
	f := flag.Lookup("test.timeout")
	if f == nil {
		return false
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	t, ok := g.Get().(time.Duration)
	return ok && t > 0 && t < d
}

func backlogMemory(b *testing.B, rows int) {
	ctx := context.Background()
	pg := testenv.PG(b)
	ob, err := outbox.New(pg.Pool, outbox.WithTable(pg.Name, ""))
	if err != nil {
		b.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	topic := testenv.Topic(b)
	election := testenv.ZKRoot(b) + "/relay"

	start := time.Now()
	table := pgx.Identifier{pg.Name, outbox.DefaultTable}.Sanitize()
	if _, err := pg.Pool.Exec(ctx, `insert into `+table+` (msg_id, topic, key, body)
		select gen_random_uuid(), $1, 'k' || (i % 1000), convert_to('message ' || i, 'UTF8')
		from generate_series(1, $2::int) as i`, topic, rows); err != nil {
		b.Fatal(err)
	}
	if _, err := pg.Pool.Exec(ctx, `analyze `+table); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d pending messages inserted in %v", rows, time.Since(start).Round(time.Millisecond))
	pending := func() int64 {
		p, _, err := ob.Backlog(ctx, pg.Pool)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}

	var rss int64
	var rate float64
	drained := false
	for b.Loop() {
		if drained {
			continue // the backlog is gone: one drain is the measurement, whatever b.N is
		}
		drained = true
		began := time.Now()
		p := startRelayWorker(b, relayWorkerConfig{PG: pg.URL, Schema: pg.Name, Election: election, Batch: 128,
			SessionTimeout: 4 * time.Second})
		// Wait for the backlog to empty (at least 400 msgs/s), logging progress every 25%.
		deadline := time.Now().Add(time.Minute + time.Duration(rows)*2500*time.Microsecond)
		var firstAt time.Time
		var firstPending int64
		nextLog := int64(rows) * 3 / 4
		for {
			n := pending()
			now := time.Now()
			if n < int64(rows) && firstAt.IsZero() {
				firstAt, firstPending = now, n
			}
			if n <= nextLog && n > 0 {
				b.Logf("%d pending after %v", n, now.Sub(began).Round(time.Second))
				nextLog = n - int64(rows)/4
			}
			if n == 0 {
				rate = float64(firstPending) / now.Sub(firstAt).Seconds()
				break
			}
			if p.exited() {
				b.Fatalf("the relay process exited with %d messages pending: %v", n, p.err)
			}
			if now.After(deadline) {
				b.Fatalf("%d of %d messages still pending after %v", n, rows, now.Sub(began).Round(time.Second))
			}
			time.Sleep(500 * time.Millisecond) // a benchmark's own polling, not a test ordering events
		}
		if err := p.stop(); err != nil {
			b.Fatalf("relay process: %v", err)
		}
		rss = p.peakRSS()
	}
	mb := float64(rss) / (1 << 20)
	b.ReportMetric(mb, "peak-RSS-MB")
	b.ReportMetric(rate, "msgs/s")
	b.Logf("%d messages drained at %.0f msgs/s; relay peak RSS %.1f MB", rows, rate, mb)
	if rss > maxRelayRSS {
		b.Errorf("relay peak RSS %.1f MB draining %d messages, above %d MB", mb, rows, maxRelayRSS>>20)
	}
}
