package lock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/txkit/txkit/internal/obs/obstest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/pglock"
)

// instrument is lock.Instrument, failing the test on an error.
func instrument(t *testing.T, l lock.Locker, backend string, reg prometheus.Registerer) lock.Locker {
	t.Helper()
	il, err := lock.Instrument(l, backend, reg)
	if err != nil {
		t.Fatalf("Instrument: %v", err)
	}
	return il
}

// A pglock lease whose connection is cut is lost before its Unlock: it counts as a loss.
func TestIntegrationInstrumentPostgresLeaseLost(t *testing.T) {
	s := testenv.PG(t)
	cfg, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewRawProxy(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	host, port, _ := net.SplitHostPort(proxy.Addr())
	p, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.ConnectTimeout = host, uint16(p), time.Second
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	c, err := pglock.New(pool, pglock.WithTTL(2*time.Second), pglock.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	m, err := c.NewMutex("metrics")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	l := instrument(t, m, "postgres", reg)
	if _, err := l.Lock(t.Context()); err != nil { // a hold released normally first
		t.Fatal(err)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	lease, err := l.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	proxy.Down()
	select {
	case <-lease.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease outlived its connection by 10s")
	}
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool {
		return obstest.Value(t, reg, "txkit_lock_session_losses_total", "backend", "postgres") == 1
	}, "session losses = %v, want 1", obstest.Value(t, reg, "txkit_lock_session_losses_total", "backend", "postgres"))
	proxy.Up()
	_ = l.Unlock(t.Context())
	if got := obstest.Value(t, reg, "txkit_lock_acquisitions_total", "backend", "postgres"); got != 2 {
		t.Fatalf("acquisitions = %v, want 2", got)
	}
	if _, got := obstest.Histogram(t, reg, "txkit_lock_wait_seconds", "backend", "postgres"); got != 2 {
		t.Fatalf("wait samples = %d, want 2", got)
	}
	if got := obstest.Value(t, reg, "txkit_lock_session_losses_total", "backend", "postgres"); got != 1 {
		t.Fatalf("session losses = %v after the Unlock, want still 1", got)
	}
}

// An election counts the terms it wins, once per term however many components join it, and
// shows 1 while it leads; resigning brings the gauge back to 0. The backends' constructors pass
// the option on (lock/zklock tests NewElector's).
func TestIntegrationElectionMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := pgClient(t)
	el, err := c.NewElector("pg-leader", "a", lock.WithElectionRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	isLeader := func() float64 { return obstest.Value(t, reg, "txkit_lock_is_leader", "election", "pg-leader") }
	changes := func() float64 {
		return obstest.Value(t, reg, "txkit_lock_leadership_changes_total", "election", "pg-leader")
	}
	if n, err := testutil.GatherAndCount(reg, "txkit_lock_is_leader"); err != nil || n != 1 || isLeader() != 0 {
		t.Fatalf("before the campaign: %d is_leader series (%v), value %v; want one at 0", n, err, isLeader())
	}
	l1, err := el.Campaign(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	l2, err := el.Campaign(t.Context()) // another component joins the term
	if err != nil {
		t.Fatal(err)
	}
	if isLeader() != 1 || changes() != 1 {
		t.Fatalf("leading: is_leader %v, changes %v; want 1 and 1", isLeader(), changes())
	}
	for _, l := range []lock.Leadership{l1, l2} {
		if err := l.Resign(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool { return isLeader() == 0 },
		"is_leader = %v after resigning, want 0", isLeader())
	if changes() != 1 {
		t.Fatalf("changes = %v after resigning, want 1", changes())
	}
}

// pgClient returns a pglock client on the test's own schema, migrated, closed when the test ends.
func pgClient(t *testing.T) *pglock.Client {
	t.Helper()
	c, err := pglock.New(testenv.PG(t).Pool, pglock.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return c
}

// Bad arguments and a clashing registry fail with ErrInvalidOption.
func TestIntegrationInstrumentRefuses(t *testing.T) {
	if _, err := lock.Instrument(nil, "zookeeper", nil); !errors.Is(err, lock.ErrInvalidOption) {
		t.Fatalf("Instrument(nil) = %v, want ErrInvalidOption", err)
	}
	l, err := pgClient(t).NewMutex("refused")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Instrument(l, "etcd", nil); !errors.Is(err, lock.ErrInvalidOption) {
		t.Fatalf("Instrument(backend etcd) = %v, want ErrInvalidOption", err)
	}
	clash := prometheus.NewRegistry()
	clash.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "txkit_lock_acquisitions_total", Help: "not a counter"}))
	if _, err := lock.Instrument(l, "redis", clash); !errors.Is(err, lock.ErrInvalidOption) {
		t.Fatalf("Instrument on a clashing registry = %v, want ErrInvalidOption", err)
	}
	clash.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "txkit_lock_leadership_changes_total", Help: "not a counter"}))
	if _, err := lock.NewElection(l, "e", "a", func(context.Context) (string, error) { return "", nil }, nil, nil,
		lock.WithElectionRegisterer(clash)); !errors.Is(err, lock.ErrInvalidOption) {
		t.Fatalf("NewElection on a clashing registry = %v, want ErrInvalidOption", err)
	}
}

// Instrument a PostgreSQL mutex and an election, on the service's own registry (every backend's
// Locker and elector are instrumented the same way).
func ExampleInstrument() {
	ctx := context.Background()
	pool, schemas, done, ok := testenv.ExampleDB(ctx, "lock_example_")
	if !ok {
		return
	}
	defer done()
	c, err := pglock.New(pool, pglock.WithSchema(schemas[0]))
	if err == nil {
		err = c.Migrate(ctx)
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	reg := prometheus.NewRegistry() // served on /metrics with promhttp.HandlerFor(reg, ...)
	m, _ := c.NewMutex("orders/lock")
	l, err := lock.Instrument(m, "postgres", reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := l.Lock(ctx); err != nil {
		fmt.Println(err)
		return
	}
	_ = l.Unlock(ctx)

	el, _ := c.NewElector("orders/leader", "host-1", lock.WithElectionRegisterer(reg))
	lead, err := el.Campaign(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	mfs, _ := reg.Gather() // sorted by name
	for _, mf := range mfs {
		switch mf.GetName() {
		case "txkit_lock_acquisitions_total":
			fmt.Println("acquisitions:", mf.GetMetric()[0].GetCounter().GetValue())
		case "txkit_lock_is_leader":
			fmt.Println("leading:", mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	_ = lead.Resign(ctx)
	// Output:
	// acquisitions: 1
	// leading: 1
}
