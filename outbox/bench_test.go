package outbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/txkit/txkit/internal/testkit/mqtest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/outbox"
)

// BenchmarkEnqueue measures business transactions per second — begin, insert a business row,
// commit — without an outbox ("bare"), with Enqueue ("enqueue", which NOTIFYs) and with Enqueue
// under NotifyForTest(false) ("enqueue-nonotify"), on one pool. "ratio" and "ratio-nonotify"
// alternate bare and the Enqueue variant in blocks, so load changes on the shared machine weigh on
// both alike, and report the Enqueue variant's transactions/s as a fraction of bare's.
// "parallel-ratio" does the same with 16 goroutines, where NOTIFY's commit-time lock can show.
//
//	go test -run '^$' -bench Enqueue -count 3 ./outbox/
func BenchmarkEnqueue(b *testing.B) {
	pg := testenv.PG(b)
	ctx := context.Background()
	ob, err := outbox.New(pg.Pool)
	if err != nil {
		b.Fatal(err)
	}
	quiet, err := outbox.New(pg.Pool, outbox.WithTable("", "txkit_outbox_quiet"), outbox.NotifyForTest(false))
	if err != nil {
		b.Fatal(err)
	}
	for _, o := range []*outbox.Outbox{ob, quiet} {
		if err := o.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pg.Pool.Exec(ctx, `create table orders (id uuid primary key, total bigint not null, created_at timestamptz not null default now())`); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 256)
	txs := map[string]func() error{}
	for name, o := range map[string]*outbox.Outbox{"bare": nil, "enqueue": ob, "enqueue-nonotify": quiet} {
		txs[name] = func() error {
			return pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error {
				id := uuid.New()
				if _, err := tx.Exec(ctx, `insert into orders (id, total) values ($1, $2)`, id, 4200); err != nil {
					return err
				}
				if o == nil {
					return nil
				}
				_, err := o.Enqueue(ctx, tx, outbox.Message{Topic: "order-created", Key: id.String(), Body: body})
				return err
			})
		}
	}
	for _, name := range []string{"bare", "enqueue", "enqueue-nonotify"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if err := txs[name](); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tx/s")
		})
	}
	ratio := func(variant string, workers int) func(b *testing.B) {
		return func(b *testing.B) {
			const block = 50
			var spent [2]time.Duration
			for b.Loop() {
				for i, name := range []string{variant, "bare"} {
					start := time.Now()
					var wg sync.WaitGroup
					errs := make(chan error, workers)
					for range workers {
						wg.Go(func() {
							for range block {
								if err := txs[name](); err != nil {
									errs <- err
									return
								}
							}
						})
					}
					wg.Wait()
					close(errs)
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
					spent[i] += time.Since(start)
				}
			}
			b.ReportMetric(float64(spent[1])/float64(spent[0]), variant+"/bare-tx")
		}
	}
	b.Run("ratio", ratio("enqueue", 1))
	b.Run("ratio-nonotify", ratio("enqueue-nonotify", 1))
	b.Run("parallel-ratio", ratio("enqueue", 16))
	b.Run("parallel-ratio-nonotify", ratio("enqueue-nonotify", 16))
}

// firstCall notes when the relay first called the publisher.
type firstCall struct {
	next  outbox.Publisher
	once  sync.Once
	start atomic.Int64
}

func (f *firstCall) Publish(ctx context.Context, msg outbox.Message) error {
	f.once.Do(func() { f.start.Store(time.Now().UnixNano()) })
	return f.next.Publish(ctx, msg)
}

// BenchmarkRelay measures how fast the relay empties a backlog through the real RocketMQ
// publisher, by batch size, against the raw publisher's send rate measured in the same run, in
// rotating blocks so that load changes on the shared machine weigh on both sides alike. Each
// iteration runs one block of each side (which goes first alternates): the relay side loads 2000
// messages (256-byte bodies, 16 keys round robin) into the outbox, starts a relay (default
// concurrency 16) and times its first publish to the table being empty; the raw side sends 2000
// messages by calling Publish directly from 16 goroutines, 16 keys. relay-msgs/s and raw-msgs/s
// are each side's messages over its total time, relay/raw their ratio. Both share one
// publisher, one broker and one topic.
//
// Measured on the 2-core development machine, shared with the servers and other work, before the
// pipelined relay (the figures, sides timed one after the other, four runs): relay/raw
// 0.09–0.13 at batch 1, 0.50–0.60 at batch 16, 0.54–0.90 at batch 128, the raw side swinging
// from 9,800 to 15,500 sends/s between runs. See docs/outbox.md for the figures since.
//
// "metrics-ratio" measures the cost of the relay's Prometheus metrics ([outbox.WithTelemetry]):
// each iteration drains 2000 messages (batch 128) with a registry and 2000 without, in turn
// (which goes first alternates), and it reports the first's msgs/s as a fraction of the second's
// (1 is no cost), and both rates.
//
//	go test -run '^$' -bench '^BenchmarkRelay$/batch' -benchtime 6x -count 3 ./outbox/
//	go test -run '^$' -bench '^BenchmarkRelay$/metrics-ratio' -benchtime 30x -count 3 ./outbox/
//	go test -run '^$' -bench '^BenchmarkRelay$/observed-ratio' -benchtime 30x -count 3 ./outbox/
func BenchmarkRelay(b *testing.B) {
	pub := mqtest.Publisher(b)
	topic := testenv.Topic(b)
	zkServers := testenv.ZK(b)
	body := make([]byte, 256)
	const keys, senders = 16, 16
	// Warm the route to the topic.
	if err := pub.Publish(context.Background(), outbox.Message{ID: uuid.New(), Topic: topic, Body: body}); err != nil {
		b.Fatal(err)
	}
	raw := func(n int) float64 {
		var next atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for range senders {
			wg.Go(func() {
				for {
					i := next.Add(1)
					if i > int64(n) {
						return
					}
					msg := outbox.Message{ID: uuid.New(), Topic: topic, Key: fmt.Sprintf("key-%d", i%keys), Body: body}
					if err := pub.Publish(context.Background(), msg); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return float64(n) / time.Since(start).Seconds()
	}
	// newOutbox returns an empty outbox in the sub-benchmark's schema.
	newOutbox := func(b *testing.B) (*outbox.Outbox, *pgxpool.Pool) {
		pg := testenv.PG(b)
		ob, err := outbox.New(pg.Pool)
		if err != nil {
			b.Fatal(err)
		}
		if err := ob.Migrate(context.Background()); err != nil {
			b.Fatal(err)
		}
		return ob, pg.Pool
	}
	// drain loads n messages into ob and relays them with a relay of its own; it returns the
	// relay's rate, from its first publish to the table being empty, and its stats.
	drain := func(b *testing.B, ob *outbox.Outbox, pool *pgxpool.Pool, n int, opts ...outbox.RelayOption) (float64, outbox.Stats) {
		ctx := context.Background()
		load(b, pool, ob, topic, keys, body, n)
		sess, err := zklock.NewSession(ctx, zkServers, zkenv.Auth(b))
		if err != nil {
			b.Fatal(err)
		}
		defer sess.Close()
		el, err := zklock.NewElector(sess, testenv.ZKRoot(b)+"/relay", "bench")
		if err != nil {
			b.Fatal(err)
		}
		fc := &firstCall{next: pub}
		r, err := outbox.NewRelay(ob, fc, append([]outbox.RelayOption{outbox.WithElector(el),
			outbox.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		for r.Stats().Published < int64(n) {
			time.Sleep(time.Millisecond) // a benchmark's own polling, not a test ordering events
		}
		for {
			p, _, err := ob.Backlog(ctx, pool)
			if err != nil {
				b.Fatal(err)
			}
			if p == 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		rate := float64(n) / time.Since(time.Unix(0, fc.start.Load())).Seconds()
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		return rate, r.Stats()
	}
	for _, batch := range []int{1, 16, 128} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			const block = 2000
			ob, pool := newOutbox(b)
			var relayTook, rawTook time.Duration
			var blocks, published, batches int64
			first := true
			for b.Loop() {
				for _, relay := range []bool{first, !first} {
					if relay {
						rate, st := drain(b, ob, pool, block, outbox.WithSchedule("@every 1s", batch))
						relayTook += time.Duration(float64(block) / rate * float64(time.Second))
						published, batches = published+st.Published, batches+st.Batches
					} else {
						rawTook += time.Duration(float64(block) / raw(block) * float64(time.Second))
					}
				}
				blocks++
				first = !first
			}
			relayRate := float64(blocks*block) / relayTook.Seconds()
			rawRate := float64(blocks*block) / rawTook.Seconds()
			b.ReportMetric(relayRate, "relay-msgs/s")
			b.ReportMetric(rawRate, "raw-msgs/s")
			b.ReportMetric(relayRate/rawRate, "relay/raw")
			b.ReportMetric(float64(published)/float64(max(batches, 1)), "msgs/batch")
		})
	}
	// ratio drains n messages with opts and n without, in turn (which goes first alternates, so
	// that neither always follows the other), and reports the first's msgs/s as a fraction of the
	// second's under unit.
	ratio := func(b *testing.B, unit string, opts ...outbox.RelayOption) {
		const n = 2000
		ob, pool := newOutbox(b)
		var on, off []float64
		first := true
		for b.Loop() {
			for _, with := range []bool{first, !first} {
				if with {
					rate, _ := drain(b, ob, pool, n, append([]outbox.RelayOption{outbox.WithSchedule("@every 1s", 128)}, opts...)...)
					on = append(on, rate)
				} else {
					rate, _ := drain(b, ob, pool, n, outbox.WithSchedule("@every 1s", 128))
					off = append(off, rate)
				}
			}
			first = !first
		}
		// The harmonic means: total messages over total time, per variant.
		hmean := func(rates []float64) float64 {
			var inv float64
			for _, r := range rates {
				inv += 1 / r
			}
			return float64(len(rates)) / inv
		}
		b.ReportMetric(hmean(on), unit+"-msgs/s")
		b.ReportMetric(hmean(off), "plain-msgs/s")
		b.ReportMetric(hmean(on)/hmean(off), unit+"/plain")
	}
	b.Run("metrics-ratio", func(b *testing.B) { ratio(b, "metrics", outbox.WithTelemetry(prometheus.NewRegistry(), nil)) })
	// observed-ratio: metrics and tracing through the OpenTelemetry SDK with a batch exporter to a
	// sink that drops the spans, against neither.
	b.Run("observed-ratio", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		ratio(b, "observed", outbox.WithTelemetry(prometheus.NewRegistry(), nil), outbox.WithTelemetry(nil, tp))
	})
}

// load puts n messages into the outbox with COPY: the benchmark measures the relay, not Enqueue.
func load(b *testing.B, pool *pgxpool.Pool, ob *outbox.Outbox, topic string, keys int, body []byte, n int) {
	b.Helper()
	rows := make([][]any, n)
	for i := range rows {
		id, _ := uuid.NewV7()
		rows[i] = []any{id, topic, fmt.Sprintf("key-%d", i%keys), body}
	}
	if _, err := pool.CopyFrom(context.Background(), pgx.Identifier{ob.Table()}, []string{"msg_id", "topic", "key", "body"},
		pgx.CopyFromRows(rows)); err != nil {
		b.Fatal(err)
	}
}
