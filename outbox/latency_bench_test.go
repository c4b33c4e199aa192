package outbox_test

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/testkit/mqtest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

// BenchmarkEndToEndLatency measures the latency from a business transaction's commit (one
// Enqueue in it) to the consumer's handler receiving the message, through the relay, RocketMQ and
// a rocketmq.Consumer (idempotency claim included). 200 messages are committed one every 20 ms,
// and p50-ms and p99-ms are reported:
//
//   - "notify": the Outbox NOTIFYs at commit (the default), which wakes the relay at once; its
//     schedule is "@every 1s".
//   - "cron": NotifyForTest(false), so only the relay's "@every 1s" schedule starts a drain: a message
//     waits for the next tick, about 0.5 s on average.
//
// Each sub-benchmark sends its 200 messages once, whatever b.N is: pass -benchtime 1x.
//
//	go test -run '^$' -bench EndToEndLatency -benchtime 1x ./outbox/
func BenchmarkEndToEndLatency(b *testing.B) {
	for _, c := range []struct {
		name   string
		notify bool
	}{{"notify", true}, {"cron", false}} {
		b.Run(c.name, func(b *testing.B) { endToEndLatency(b, c.notify) })
	}
}

func endToEndLatency(b *testing.B, notify bool) {
	const (
		messages = 200
		interval = 20 * time.Millisecond
	)
	ctx := context.Background()
	pg := testenv.PG(b)
	ob, err := outbox.New(pg.Pool, outbox.WithTable(pg.Name, ""), outbox.NotifyForTest(notify))
	if err != nil {
		b.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	store, err := idempotency.New(pg.Pool, idempotency.WithTable(pg.Name, ""))
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	topic := testenv.Topic(b)

	// The consumer notes when each message first reaches its handler.
	var (
		mu        sync.Mutex
		committed = map[uuid.UUID]time.Time{} // when the enqueuing transaction's commit began
		latency   = map[uuid.UUID]time.Duration{}
		warm      bool
	)
	handler := func(_ context.Context, _ pgx.Tx, msg outbox.Message) error {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if t0, ok := committed[msg.ID]; ok {
			if _, again := latency[msg.ID]; !again { // a handler retried after a failed commit
				latency[msg.ID] = now.Sub(t0)
			}
		} else if msg.Key == "warm-up" {
			warm = true
		}
		return nil
	}
	c, err := rocketmq.NewConsumer(testenv.Namesrv(b), mqtest.ConsumerGroup(b), topic, consumerPool(b, pg.URL), store, handler,
		rocketmq.WithConsumeGoroutines(8)) // as many as the pool has connections
	if err != nil {
		b.Fatal(err)
	}
	background(b, "consumer", c.Run)

	// The relay, in this process.
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	sess, err := zklock.NewSession(sctx, testenv.ZK(b), zkenv.Auth(b))
	cancel()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sess.Close() })
	el, err := zklock.NewElector(sess, testenv.ZKRoot(b)+"/relay", "bench")
	if err != nil {
		b.Fatal(err)
	}
	r, err := outbox.NewRelay(ob, mqtest.Publisher(b), outbox.WithElector(el), outbox.WithSchedule("@every 1s", 128))
	if err != nil {
		b.Fatal(err)
	}
	background(b, "relay", r.Run)

	// Once a warm-up message has gone through, the relay leads and the consumer has its queues.
	if _, err := ob.Enqueue(ctx, pg.Pool, outbox.Message{Topic: topic, Key: "warm-up"}); err != nil {
		b.Fatal(err)
	}
	testenv.Eventually(b, time.Minute, 10*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return warm
	}, "the warm-up message to reach the handler")

	var lat []time.Duration
	measured := false
	for b.Loop() {
		if measured {
			continue // one run of 200 messages is the measurement, whatever b.N is
		}
		measured = true
		tick := time.NewTicker(interval)
		for range messages {
			<-tick.C
			id, err := uuid.NewV7()
			if err != nil {
				b.Fatal(err)
			}
			err = pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error {
				if _, err := ob.Enqueue(ctx, tx, outbox.Message{ID: id, Topic: topic, Key: id.String(), Body: []byte("latency")}); err != nil {
					return err
				}
				mu.Lock()
				committed[id] = time.Now() // BeginFunc commits next
				mu.Unlock()
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		tick.Stop()
		testenv.Eventually(b, time.Minute, 10*time.Millisecond, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(latency) == messages
		}, "all %d messages to reach the handler", messages)
		mu.Lock()
		for _, d := range latency {
			lat = append(lat, d)
		}
		mu.Unlock()
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99)
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p99), "p99-ms")
	b.Logf("commit → handler over %d messages: min %v, p50 %v, p99 %v, max %v", len(lat),
		lat[0].Round(10*time.Microsecond), p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond),
		lat[len(lat)-1].Round(10*time.Microsecond))
}

// percentile returns the nearest-rank p-th percentile of sorted, which must not be empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
