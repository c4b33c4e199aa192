package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/txkit/txkit/internal/obs/obstest"
	"github.com/txkit/txkit/internal/testkit/mqtest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
)

// TestIntegrationRelayMetrics: N messages relayed through the real broker move the counters and
// histograms by N, and leave the backlog gauges at 0.
func TestIntegrationRelayMetrics(t *testing.T) {
	e := newRelayEnv(t)
	reg := prometheus.NewRegistry()
	const n = 20
	for i := range n {
		e.enqueue(t, fmt.Sprintf("k%d", i%3), fmt.Sprintf("m%d", i))
	}
	r := e.relay(t, "relay-1", mqtest.Publisher(t), outbox.WithSchedule("@every 1s", 8), outbox.WithTelemetry(reg, nil))
	run(t, r)
	e.waitEmpty(t, 30*time.Second)
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return obstest.Value(t, reg, "txkit_outbox_published_total") == n && r.Stats().Wakeups >= 1
	}, "published_total to reach %d", n)
	// The gauges are set after the drain that emptied the table; the next pass (a tick) sets them
	// again, so wait for a pass after the table was empty.
	w := r.Stats().Wakeups
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return r.Stats().Wakeups > w+1 },
		"two more passes")
	if b, age := obstest.Value(t, reg, "txkit_outbox_backlog"), obstest.Value(t, reg, "txkit_outbox_oldest_pending_seconds"); b != 0 || age != 0 {
		t.Errorf("backlog %v, oldest pending %v s after the drain; want 0, 0", b, age)
	}
	if sum, c := obstest.Histogram(t, reg, "txkit_outbox_batch_size"); c < 3 || sum != n {
		t.Errorf("batch_size: %d batches of %v messages in all; want at least 3 (batch size 8) and %d", c, sum, n)
	}
	if sum, c := obstest.Histogram(t, reg, "txkit_outbox_commit_to_publish_seconds"); c != n || sum <= 0 {
		t.Errorf("commit_to_publish_seconds: %d samples, sum %v; want %d, positive", c, sum, n)
	}
	for _, name := range []string{"txkit_outbox_publish_failures_total", "txkit_outbox_dead_total"} {
		if v := obstest.Value(t, reg, name); v != 0 {
			t.Errorf("%s = %v, want 0", name, v)
		}
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("metric lint: %v %v", problems, err)
	}
}

// TestIntegrationRelayMetricsFailures: failed publishes count as failures, and a message that
// fails WithRetry's attempts times as dead. While a message waits out its backoff, the leader's gauges
// show it; a relay that stops leading sets them to 0. The relays follow each other on one
// registry, as relays restarted in one process would, and their counts add up.
func TestIntegrationRelayMetricsFailures(t *testing.T) {
	e := newRelayEnv(t)
	reg := prometheus.NewRegistry()
	var stuck atomic.Bool
	stuck.Store(true)
	rec := &recorder{next: mqtest.Publisher(t)}
	rec.setFail(func(_ context.Context, m outbox.Message) error {
		if string(m.Body) == "poison" || string(m.Body) == "stuck" && stuck.Load() {
			return errInjected
		}
		return nil
	})
	relay := func(id string, maxAttempts int) *outbox.Relay {
		return e.relay(t, id, rec, outbox.WithRetry(maxAttempts, time.Millisecond, 5*time.Millisecond),
			outbox.WithSchedule("@every 100ms", 128), outbox.WithTelemetry(reg, nil))
	}

	// A message that always fails: dead after maxAttempts publishes.
	const maxAttempts = 3
	e.enqueue(t, "p", "poison")
	r1 := relay("relay-1", maxAttempts)
	stop1 := run(t, r1)
	e.waitOneDead(t, "the poison message to be dead")
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return obstest.Value(t, reg, "txkit_outbox_dead_total") == 1
	}, "dead_total to reach 1")
	if f := obstest.Value(t, reg, "txkit_outbox_publish_failures_total"); f != maxAttempts {
		t.Errorf("publish_failures_total = %v, want %d", f, maxAttempts)
	}
	stop1()

	// A message that fails for a while: the gauges show it, and go to 0 when the relay stops.
	e.enqueue(t, "s", "stuck")
	r2 := relay("relay-2", 1000)
	stop2 := run(t, r2)
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool {
		return r2.Stats().Failed >= 2 && obstest.Value(t, reg, "txkit_outbox_backlog") == 1 &&
			obstest.Value(t, reg, "txkit_outbox_oldest_pending_seconds") > 0
	}, "the stuck message failing and shown by the gauges")
	stop2()
	if b, age := obstest.Value(t, reg, "txkit_outbox_backlog"), obstest.Value(t, reg, "txkit_outbox_oldest_pending_seconds"); b != 0 || age != 0 {
		t.Errorf("backlog %v, oldest pending %v s once the relay stopped leading; want 0, 0", b, age)
	}

	stuck.Store(false)
	r3 := relay("relay-3", 1000)
	run(t, r3)
	e.waitOneDead(t, "the stuck message to be published")
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return obstest.Value(t, reg, "txkit_outbox_published_total") == 1
	}, "published_total to reach 1")
	failed := r1.Stats().Failed + r2.Stats().Failed + r3.Stats().Failed
	if f := obstest.Value(t, reg, "txkit_outbox_publish_failures_total"); f != float64(failed) {
		t.Errorf("publish_failures_total = %v, the relays' Stats().Failed add up to %d", f, failed)
	}
	if d := obstest.Value(t, reg, "txkit_outbox_dead_total"); d != 1 {
		t.Errorf("dead_total = %v, want 1", d)
	}
}

// TestIntegrationRelayMetricsShared: two relays of one outbox on one registry (two candidates in
// one process) register without error and count into the same series.
func TestIntegrationRelayMetricsShared(t *testing.T) {
	e := newRelayEnv(t)
	reg := prometheus.NewRegistry()
	pub := mqtest.Publisher(t)
	const n = 10
	r1 := e.relay(t, "relay-1", pub, outbox.WithTelemetry(reg, nil))
	r2 := e.relay(t, "relay-2", pub, outbox.WithTelemetry(reg, nil))
	run(t, r1)
	run(t, r2)
	for i := range n {
		e.enqueue(t, "", fmt.Sprintf("m%d", i))
	}
	e.waitEmpty(t, 30*time.Second)
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return obstest.Value(t, reg, "txkit_outbox_published_total") == n
	}, "published_total to reach %d", n)
	if p := r1.Stats().Published + r2.Stats().Published; p != n {
		t.Errorf("the relays published %d, want %d", p, n)
	}
	if c, err := testutil.GatherAndCount(reg); err != nil || c != 7 {
		t.Errorf("%d series gathered (err %v), want the relay's 7 once", c, err)
	}
}

// TestRelayRegistererClash: a name of the relay's registered as another kind of metric makes
// NewRelay fail with ErrInvalidOption; a nil registerer, typed or not, registers nothing.
func TestRelayRegistererClash(t *testing.T) {
	ob, err := outbox.New(&pgxpool.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	pub := publisherFunc(func(context.Context, outbox.Message) error { return nil })
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "txkit_outbox_backlog", Help: "not the relay's"}))
	if _, err := outbox.NewRelay(ob, pub, outbox.WithTelemetry(reg, nil)); !errors.Is(err, outbox.ErrInvalidOption) {
		t.Errorf("NewRelay with a clashing registry: %v, want ErrInvalidOption", err)
	}
	for _, reg := range []prometheus.Registerer{nil, (*prometheus.Registry)(nil)} {
		if _, err := outbox.NewRelay(ob, pub, outbox.WithTelemetry(reg, nil)); err != nil {
			t.Errorf("NewRelay with registerer %#v: %v", reg, err)
		}
	}
	// The same relay options on a fresh registry: every metric registered, once.
	fresh := prometheus.NewRegistry()
	for range 2 {
		if _, err := outbox.NewRelay(ob, pub, outbox.WithTelemetry(fresh, nil)); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := testutil.GatherAndCount(fresh, "txkit_outbox_backlog", "txkit_outbox_published_total"); err != nil || c != 2 {
		t.Errorf("gathered %d series (err %v), want 2", c, err)
	}
}

type publisherFunc func(context.Context, outbox.Message) error

func (f publisherFunc) Publish(ctx context.Context, m outbox.Message) error { return f(ctx, m) }
