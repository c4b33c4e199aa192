package notify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/bench/cpustat"
	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/notify"
	"github.com/txkit/txkit/notify/inbox"
)

// BenchmarkDeliver measures deliveries per second to a local receiver, side by side in one run:
//
//   - "notifier": blocks of 500 notifications are enqueued (in one transaction, not timed), then
//     timed until the running leader has delivered and recorded them all: taking them from the
//     table, posting each signed, and recording every attempt (status, latency) and delivery.
//   - "bare": the same 500 signed POSTs (same bodies and headers) from a plain http.Client, with
//     the same number of requests in flight (the receiver's concurrency, 8), recording nothing.
//   - The blocks alternate (which goes first alternates too); the ratio is notifier/bare
//     throughput, target ≥ 0.8.
//   - CPU per delivery during the timed parts, of this process and of PostgreSQL's server
//     processes (from /proc; 0 where it cannot be read), shows where the difference goes.
//
// Two receivers: "ack" answers "success" and does nothing else (the strictest comparison: the
// whole cost of the notifier's bookkeeping shows); "inbox" is a inbox.Inbox that verifies the
// signature and applies each notification once in PostgreSQL, as a real receiver does.
//
//	go test -run '^$' -bench Deliver -benchtime 20x ./notify/
func BenchmarkDeliver(b *testing.B) {
	b.Run("ack", func(b *testing.B) {
		benchDeliver(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = w.Write([]byte("success"))
		}))
	})
	b.Run("inbox", func(b *testing.B) {
		rcv := testenv.PG(b)
		if _, err := rcv.Pool.Exec(context.Background(), `create table credits (id uuid primary key, amount int)`); err != nil {
			b.Fatal(err)
		}
		store, err := idempotency.New(rcv.Pool, idempotency.WithTable(rcv.Name, ""))
		if err != nil {
			b.Fatal(err)
		}
		if err := store.Migrate(context.Background()); err != nil {
			b.Fatal(err)
		}
		in, err := inbox.New(rcv.Pool, store, "r", []string{secret}, func(ctx context.Context, tx pgx.Tx, d notify.Delivery) error {
			_, err := tx.Exec(ctx, `insert into credits values ($1, 1)`, d.ID)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		benchDeliver(b, in)
	})
}

func benchDeliver(b *testing.B, h http.Handler) {
	const block, conc = 500, 8
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	pg := testenv.PG(b)
	n, err := notify.New(pg.Pool, []notify.Receiver{{Name: "r", URL: srv.URL, Secrets: []string{secret}, Echo: "success", Concurrency: conc}},
		notify.WithTable(pg.Name, ""), notify.WithLogger(testenv.Logger(b)), notify.WithHTTPClient(client), notify.WithPlainHTTP(),
		notify.WithElector(zkenv.Elector(b, testenv.ZKRoot(b)+"/bench", "a")), notify.WithTick("@every 1s", 500))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := n.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	testenv.Run(b, n.Run)

	round := 0
	var ncpu, bcpu cpustat.Times // CPU spent during the timed parts
	notifier := func() time.Duration {
		round++
		err := pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error {
			for i := range block {
				if _, err := n.Enqueue(ctx, tx, notify.Notification{Receiver: "r", Key: fmt.Sprintf("%d-%d", round, i),
					Payload: json.RawMessage(`{"amount":1}`)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		want := n.Stats().Delivered + block
		start := time.Now()
		defer measure(&ncpu)()
		if err := n.WakeForTest(ctx); err != nil { // as Enqueue's NOTIFY did: the leader's path, not its tick
			b.Fatal(err)
		}
		for n.Stats().Delivered < want {
			time.Sleep(200 * time.Microsecond) // polling the counter, not ordering events
			if time.Since(start) > time.Minute {
				b.Fatalf("%d of %d delivered after a minute", n.Stats().Delivered, want)
			}
		}
		return time.Since(start)
	}
	bare := func() time.Duration {
		// The notifications, as they were taken from the table; their bodies are built and signed
		// in the timed part, as the notifier does.
		reqs := make(chan notify.Delivery, block)
		for range block {
			reqs <- notify.Delivery{ID: uuid.Must(uuid.NewV7()), Receiver: "r", Key: "k", Payload: json.RawMessage(`{"amount":1}`), CreatedAt: time.Now()}
		}
		close(reqs)
		start := time.Now()
		defer measure(&bcpu)()
		var wg sync.WaitGroup
		for range conc {
			wg.Go(func() {
				for d := range reqs {
					body, err := json.Marshal(d)
					if err != nil {
						b.Error(err)
						return
					}
					r, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, bytes.NewReader(body))
					r.Header.Set("Content-Type", "application/json")
					r.Header.Set(notify.HeaderID, d.ID.String())
					r.Header.Set(notify.HeaderReceiver, "r")
					ts := time.Now().Unix()
					r.Header.Set(notify.HeaderTimestamp, strconv.FormatInt(ts, 10))
					r.Header.Set(notify.HeaderSignature, notify.Sign(secret, ts, http.MethodPost, "/", body))
					resp, err := client.Do(r)
					if err != nil {
						b.Error(err)
						return
					}
					answer, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || string(answer) != "success" {
						b.Errorf("bare post: HTTP %d %q", resp.StatusCode, answer)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	notifier() // warm up: connections, statement caches
	var tn, tb time.Duration
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			tn += notifier()
			tb += bare()
		} else {
			tb += bare()
			tn += notifier()
		}
		i++
	}
	b.ReportMetric(float64(i*block)/tn.Seconds(), "notifier-deliveries/s")
	b.ReportMetric(float64(i*block)/tb.Seconds(), "bare-posts/s")
	b.ReportMetric(float64(tb)/float64(tn), "notifier/bare-throughput")
	// Where the time goes: CPU per delivery of this process (HTTP client, receiver, notifier) and
	// of the PostgreSQL server processes, in each part.
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(i*block) }
	b.ReportMetric(per(ncpu.Self), "notifier-go-µs/op")
	b.ReportMetric(per(ncpu.Postgres), "notifier-pg-µs/op")
	b.ReportMetric(per(bcpu.Self), "bare-go-µs/op")
	b.ReportMetric(per(bcpu.Postgres), "bare-pg-µs/op")
}
