package rocketmq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/obs/obstest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

// counts returns nil when the counter vector name in reg has exactly the given values by result
// label, and an error saying what it has otherwise.
func counts(reg prometheus.Gatherer, name string, want map[string]int) error {
	var b strings.Builder
	for _, r := range []string{"commit", "duplicate", "handled", "poison", "retry", "rollback", "unknown"} {
		if n, ok := want[r]; ok {
			fmt.Fprintf(&b, "%s{result=%q} %d\n", name, r, n)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		return err
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return testutil.GatherAndCompare(reg, strings.NewReader("# HELP "+name+" "+mf.GetHelp()+"\n# TYPE "+name+" counter\n"+b.String()), name)
		}
	}
	return fmt.Errorf("no %s in the registry", name)
}

// TestIntegrationConsumerMetrics: a consumer's results, counted on a registry after real
// deliveries — a message handled, the same message id published again (duplicate), a message the
// handler refuses for good (poison), and one that fails once before it is handled (retry, then
// handled) — and the handler's transaction timed once per attempt.
func TestIntegrationConsumerMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	var (
		handled = uuid.New()
		refused = uuid.New()
		flaky   = uuid.New()
	)
	rec := &recorder{}
	h := rec.handler(func(m outbox.Message, call int) error {
		switch {
		case m.ID == refused:
			return fmt.Errorf("body does not parse: %w", rocketmq.ErrPoison)
		case m.ID == flaky && call == 1:
			return errBoom
		}
		return nil
	})
	c := newConsumer(t, e, group(t, "metrics"), h, rocketmq.WithOrderly(100*time.Millisecond),
		rocketmq.WithTelemetry(reg, nil))
	if err := counts(reg, "txkit_rocketmq_consumed_total", map[string]int{"handled": 0, "duplicate": 0, "poison": 0, "retry": 0}); err != nil {
		t.Fatalf("before any message: %v", err)
	}
	run(t, c)
	pub := newPublisher(t, e, rocketmq.WithTelemetry(reg, nil)) // fits, and registers nothing
	for _, id := range []uuid.UUID{handled, handled, refused, flaky} {
		if err := pub.Publish(t.Context(), outbox.Message{ID: id, Topic: e.topic, Key: "k", Body: []byte("m")}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int{"handled": 2, "duplicate": 1, "poison": 1, "retry": 1}
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool {
		return counts(reg, "txkit_rocketmq_consumed_total", want) == nil
	}, "consumed_total %v (stats %+v)", want, c.Stats())
	if s := c.Stats(); s != (rocketmq.Stats{Applied: 2, Duplicates: 1, Poison: 1, Failed: 1}) {
		t.Errorf("stats %+v disagree with the metrics", s)
	}
	if n := obstest.Value(t, reg, "txkit_rocketmq_handler_seconds"); n != 5 {
		t.Errorf("handler_seconds has %v samples, want 5 (one per transaction)", n)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 5 {
		t.Errorf("%d series on the registry (err %v), want the consumer's 5 and none of the publisher's", n, err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("metric lint: %v %v", problems, err)
	}
}

// TestIntegrationConsumersShareMetrics: two consumers (two groups of one topic) on one registry
// register without error and count into the same series.
func TestIntegrationConsumersShareMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	rec := &recorder{}
	c1 := newConsumer(t, e, group(t, "one"), rec.handler(nil), rocketmq.WithTelemetry(reg, nil))
	c2 := newConsumer(t, e, group(t, "two"), rec.handler(nil), rocketmq.WithTelemetry(reg, nil))
	run(t, c1)
	run(t, c2)
	pub := newPublisher(t, e)
	const n = 3
	for range n {
		if err := pub.Publish(t.Context(), outbox.Message{ID: uuid.New(), Topic: e.topic, Body: []byte("m")}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool {
		return counts(reg, "txkit_rocketmq_consumed_total", map[string]int{"handled": 2 * n, "duplicate": 0, "poison": 0, "retry": 0}) == nil
	}, "each group handles each message (stats %+v, %+v)", c1.Stats(), c2.Stats())
	if got := obstest.Value(t, reg, "txkit_rocketmq_handler_seconds"); got != 2*n {
		t.Errorf("handler_seconds has %v samples, want %d", got, 2*n)
	}
}

// TestIntegrationTxProducerCheckbackMetrics: the check-backs a TxProducer answers, counted by
// answer: commit (its own message whose second phase was withheld after the local commit),
// rollback (an orphan half message of its group, older than the grace period, with no local
// transaction) and unknown (a half message of its group that is not one of a TxProducer's).
func TestIntegrationTxProducerCheckbackMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	createUsers(t, e)
	reg := prometheus.NewRegistry()
	g := group(t, "txm")
	tp := startTxProducer(t, e, rocketmq.NewWithheldTxProducer, g, rocketmq.CheckGraceForTest(3*time.Second),
		rocketmq.WithTelemetry(reg, nil))
	if err := counts(reg, "txkit_rocketmq_checkbacks_total", map[string]int{"commit": 0, "rollback": 0, "unknown": 0}); err != nil {
		t.Fatalf("before any check-back: %v", err)
	}

	// Half messages left by another producer of the group, which then goes away.
	orphan := outbox.Message{ID: uuid.New(), Topic: e.topic, Body: []byte("orphan")}
	om, err := rocketmq.Encode(orphan)
	if err != nil {
		t.Fatal(err)
	}
	om.WithProperty(rocketmq.PropertyTxID, orphan.ID.String())
	leaveHalfMessages(t, e, g, om, primitive.NewMessage(e.topic, []byte("not a txkit transaction")))

	// The TxProducer's own message, committed locally, delivered after a check-back.
	if err := tp.Send(t.Context(), outbox.Message{ID: uuid.New(), Topic: e.topic, Body: []byte("mine")}, insertUser(uuid.New())); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitFor, 100*time.Millisecond, func() bool {
		const name = "txkit_rocketmq_checkbacks_total"
		return obstest.Value(t, reg, name, "result", "commit") >= 1 && obstest.Value(t, reg, name, "result", "rollback") >= 1 && obstest.Value(t, reg, name, "result", "unknown") >= 1
	}, "check-backs answered commit, rollback and unknown")
	if s := txState(t, e, orphan.ID); s != "rolled back" {
		t.Errorf("the orphan's transaction id is %s, want rolled back", s)
	}
}

// TestRegistererClash: a metric name of the Consumer's or the TxProducer's registered as another
// kind makes the constructor fail with ErrInvalidOption, before any I/O; two Consumers on one
// registry share it; a nil registerer, typed or not, registers nothing.
func TestRegistererClash(t *testing.T) {
	ns := []string{"127.0.0.1:1"} // never dialled
	pool := &pgxpool.Pool{}
	store, err := idempotency.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, pgx.Tx, outbox.Message) error { return nil }
	clash := prometheus.NewRegistry()
	clash.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "txkit_rocketmq_consumed_total", Help: "not the consumer's"}))
	clash.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "txkit_rocketmq_checkbacks_total", Help: "not the producer's"}))
	if _, err := rocketmq.NewConsumer(ns, "g", "t", pool, store, h, rocketmq.WithTelemetry(clash, nil)); !errors.Is(err, rocketmq.ErrInvalidOption) {
		t.Errorf("NewConsumer on a clashing registry: %v, want ErrInvalidOption", err)
	}
	if _, err := rocketmq.NewTxProducer(t.Context(), ns, "g", pool, rocketmq.WithTelemetry(clash, nil)); !errors.Is(err, rocketmq.ErrInvalidOption) {
		t.Errorf("NewTxProducer on a clashing registry: %v, want ErrInvalidOption", err)
	}
	shared := prometheus.NewRegistry()
	for _, reg := range []prometheus.Registerer{nil, (*prometheus.Registry)(nil), shared, shared} {
		if _, err := rocketmq.NewConsumer(ns, "g", "t", pool, store, h, rocketmq.WithTelemetry(reg, nil)); err != nil {
			t.Errorf("NewConsumer with registerer %#v: %v", reg, err)
		}
	}
	if n, err := testutil.GatherAndCount(shared, "txkit_rocketmq_consumed_total"); err != nil || n != 4 {
		t.Errorf("consumed_total has %d series (err %v), want 4, once each", n, err)
	}
}
