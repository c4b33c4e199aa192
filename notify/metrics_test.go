package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/txkit/txkit/internal/obs/obstest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/notify"
)

// failing returns a receiver that answers every delivery with status (closed when the test ends).
func failing(t *testing.T, status int) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		http.Error(rw, "broken", status)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// runUntil runs n until the returned stop is called (or the test ends); stop waits for Run.
func runUntil(t *testing.T, n *notify.Notifier) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// Deliveries that succeed, fail and give up move the counters and the latency histogram; the due
// gauge counts what waits behind a busy receiver, and goes back to 0 when the notifier stops
// leading.
func TestIntegrationMetricsDeliveries(t *testing.T) {
	w := newWorld(t)
	reg := prometheus.NewRegistry()
	broken := failing(t, http.StatusBadGateway)
	release := make(chan struct{})
	busy := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = rw.Write([]byte("ok"))
	}))
	t.Cleanup(busy.Close)
	n := w.notifier(w.receivers(notify.Receiver{Name: "broken", URL: broken.URL, Secrets: []string{secret}},
		notify.Receiver{Name: "busy", URL: busy.URL, Secrets: []string{secret}, Concurrency: 1}),
		notify.WithElector(zkenv.Elector(t, w.path, "a")), notify.WithTelemetry(reg, nil), notify.WithTick("@every 100ms", 100))
	stop := runUntil(t, n)

	ok1, ok2 := w.enqueue(n, "shop", "m1", 1), w.enqueue(n, "shop", "m2", 1)
	bad := w.enqueue(n, "broken", "m3", 1)
	w.waitStatus(n, ok1, notify.StatusDelivered, 10*time.Second)
	w.waitStatus(n, ok2, notify.StatusDelivered, 10*time.Second)
	w.waitStatus(n, bad, notify.StatusFailed, 15*time.Second)
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"txkit_notify_delivered_total", nil, 2},
		{"txkit_notify_given_up_total", nil, 1},
		{"txkit_notify_attempts_total", []string{"result", "ok"}, 2},
		{"txkit_notify_attempts_total", []string{"result", "refused"}, 4}, // 1 + a schedule of 3
		{"txkit_notify_attempts_total", []string{"result", "error"}, 0},
		{"txkit_notify_delivery_seconds", nil, 6},
	}
	for _, c := range checks {
		testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() bool { return obstest.Value(t, reg, c.name, c.labels...) == c.want },
			"%s%v = %v, want %v", c.name, c.labels, obstest.Value(t, reg, c.name, c.labels...), c.want)
	}

	// Three notifications to a receiver that takes one at a time and hangs: all three are due.
	for i := range 3 {
		w.enqueue(n, "busy", fmt.Sprint("q", i), 1)
	}
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool { return obstest.Value(t, reg, "txkit_notify_due") == 3 },
		"txkit_notify_due = %v, want 3", obstest.Value(t, reg, "txkit_notify_due"))
	close(release)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool { return obstest.Value(t, reg, "txkit_notify_due") == 0 },
		"txkit_notify_due = %v after the deliveries, want 0", obstest.Value(t, reg, "txkit_notify_due"))
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool { return obstest.Value(t, reg, "txkit_notify_delivered_total") == 5 },
		"txkit_notify_delivered_total = %v, want 5", obstest.Value(t, reg, "txkit_notify_delivered_total"))
	stop()
	if got := obstest.Value(t, reg, "txkit_notify_due"); got != 0 {
		t.Fatalf("txkit_notify_due = %v after Run returned, want 0", got)
	}
}

// Failing receivers open their circuits: the gauge shows each of the first MetricReceiversForTest
// receivers by name and sums the rest under "other"; held-back deliveries count as circuit_open
// attempts; every circuit shows closed once the notifier stops leading.
func TestIntegrationMetricsCircuitBoundedReceivers(t *testing.T) {
	w := newWorld(t)
	reg := prometheus.NewRegistry()
	broken := failing(t, http.StatusServiceUnavailable)
	rcvs := w.receivers(notify.Receiver{Name: "broken1", URL: broken.URL, Secrets: []string{secret}, Concurrency: 1},
		notify.Receiver{Name: "broken2", URL: broken.URL, Secrets: []string{secret}, Concurrency: 1})
	n := w.notifier(rcvs, notify.WithElector(zkenv.Elector(t, w.path, "a")), notify.WithTelemetry(reg, nil),
		notify.MetricReceiversForTest(2), notify.WithBreaker(2, time.Hour))
	// shop and broken1 are the first two: series of their own; broken2 is "other".
	if got, err := testutil.GatherAndCount(reg, "txkit_notify_circuit_open"); err != nil || got != 3 {
		t.Fatalf("circuit_open series = %d, %v; want 3 (shop, broken1, other)", got, err)
	}
	// Enqueued before the notifier runs, so that its first take queues all five of each broken
	// receiver: two fail and open the circuit, and the three queued behind them are held back.
	// (Enqueued while it ran, they could be taken one at a time, none left queued when the circuit
	// opened: a loaded CI machine did that once.)
	for i := range 5 {
		w.enqueue(n, "broken1", fmt.Sprint("a", i), 1)
		w.enqueue(n, "broken2", fmt.Sprint("b", i), 1)
	}
	stop := runUntil(t, n)
	ok := w.enqueue(n, "shop", "fine", 1)
	w.waitStatus(n, ok, notify.StatusDelivered, 10*time.Second)
	for _, c := range []struct{ receiver string }{{"broken1"}, {"other"}} {
		testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
			return obstest.Value(t, reg, "txkit_notify_circuit_open", "receiver", c.receiver) == 1
		}, "circuit_open{receiver=%q} = %v, want 1", c.receiver, obstest.Value(t, reg, "txkit_notify_circuit_open", "receiver", c.receiver))
	}
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		return obstest.Value(t, reg, "txkit_notify_attempts_total", "result", "circuit_open") > 0
	}, "no attempt counted as circuit_open")
	if got := obstest.Value(t, reg, "txkit_notify_circuit_open", "receiver", "shop"); got != 0 {
		t.Fatalf("circuit_open{receiver=shop} = %v, want 0", got)
	}
	if got, err := testutil.GatherAndCount(reg, "txkit_notify_circuit_open"); err != nil || got != 3 {
		t.Fatalf("circuit_open series = %d, %v; want 3", got, err)
	}
	stop()
	for _, r := range []string{"shop", "broken1", "other"} {
		if got := obstest.Value(t, reg, "txkit_notify_circuit_open", "receiver", r); got != 0 {
			t.Fatalf("circuit_open{receiver=%q} = %v after Run returned, want 0", r, got)
		}
	}
}

// Two notifiers on one registry share the series; a name taken by another kind of metric, or a
// negative receiver bound, fails New with ErrInvalidOption.
func TestIntegrationMetricsRegistry(t *testing.T) {
	w := newWorld(t)
	reg := prometheus.NewRegistry()
	a := w.running("a", w.receivers(), notify.WithTelemetry(reg, nil))
	other := testenv.PG(t)
	b, err := notify.New(other.Pool, w.receivers(), notify.WithTable(other.Name, ""), notify.WithPlainHTTP(), notify.WithTelemetry(reg, nil),
		notify.WithElector(zkenv.Elector(t, testenv.ZKRoot(t)+"/other", "b")))
	if err != nil {
		t.Fatalf("a second notifier on the registry: %v", err)
	}
	if err := b.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, b.Run)
	w.waitStatus(a, w.enqueue(a, "shop", "x", 1), notify.StatusDelivered, 10*time.Second)
	w.waitStatus(b, w.enqueue(b, "shop", "y", 1), notify.StatusDelivered, 10*time.Second)
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() bool { return obstest.Value(t, reg, "txkit_notify_delivered_total") == 2 },
		"txkit_notify_delivered_total = %v, want 2 (one per notifier)", obstest.Value(t, reg, "txkit_notify_delivered_total"))

	clash := prometheus.NewRegistry()
	clash.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "txkit_notify_delivered_total", Help: "not a counter"}))
	if _, err := notify.New(w.sender.Pool, w.receivers(), notify.WithPlainHTTP(), notify.WithTelemetry(clash, nil)); !errors.Is(err, notify.ErrInvalidOption) {
		t.Fatalf("New on a clashing registry = %v, want ErrInvalidOption", err)
	}
	if _, err := notify.New(w.sender.Pool, w.receivers(), notify.WithPlainHTTP(), notify.MetricReceiversForTest(-1)); !errors.Is(err, notify.ErrInvalidOption) {
		t.Fatalf("MetricReceiversForTest(-1) = %v, want ErrInvalidOption", err)
	}
}

// ExampleWithTelemetry exposes a notifier's metrics on the service's own registry: one delivery,
// counted once acknowledged.
func ExampleWithTelemetry() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, schemas, done, ok := testenv.ExampleDB(ctx, "example_")
	if !ok {
		return
	}
	defer done()
	schema := schemas[0]
	sess, err := zklock.NewSession(ctx, strings.Split(os.Getenv(testenv.EnvZK), ","), zklock.WithDigestAuth(zkenv.Digest()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sess.Close()
	path := "/txkit-example/" + schema
	el, _ := zklock.NewElector(sess, path+"/notify", "host-1")
	shop := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { _, _ = rw.Write([]byte("success")) }))
	defer shop.Close()

	reg := prometheus.NewRegistry() // served on /metrics with promhttp.HandlerFor(reg, ...)
	n, err := notify.New(pool, []notify.Receiver{{Name: "shop", URL: shop.URL, Secrets: []string{"example-secret-0123456789"}, Echo: "success"}},
		notify.WithTable(schema, ""), notify.WithElector(el), notify.WithPlainHTTP(), notify.WithTelemetry(reg, nil))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := n.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- n.Run(rctx) }()
	defer func() {
		stop()
		<-ran
		_ = sess.Conn().Delete(path+"/notify", -1) // the election's nodes
		_ = sess.Conn().Delete(path, -1)
	}()
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := n.Enqueue(ctx, tx, notify.Notification{Receiver: "shop", Key: "order-7", Payload: json.RawMessage(`{"amount":1}`)})
		return err
	}); err != nil {
		fmt.Println(err)
		return
	}
	delivered := func() float64 {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "txkit_notify_delivered_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return 0
	}
	for delivered() < 1 && ctx.Err() == nil { // the leader delivers and records it
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Println("delivered:", delivered())
	// Output:
	// delivered: 1
}
