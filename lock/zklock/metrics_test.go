package zklock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/txkit/txkit/internal/obs/obstest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
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

// Two instrumented ZooKeeper mutexes on one registry count every acquisition (a reentrant one
// too) in shared series, and the second one's wait for the first; releases are not losses.
func TestIntegrationInstrumentZooKeeper(t *testing.T) {
	servers, path := testenv.ZK(t), testenv.ZKRoot(t)+"/metrics"
	reg := prometheus.NewRegistry()
	a := instrument(t, mutex(t, session(t, servers), path), "zookeeper", reg)
	b := instrument(t, mutex(t, session(t, servers), path), "zookeeper", reg)
	if _, err := a.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.TryLock(t.Context()); err != nil { // reentrant
		t.Fatal(err)
	}
	started := make(chan struct{})
	got := make(chan error, 1)
	go func() {
		close(started)
		_, err := b.Lock(t.Context())
		got <- err
	}()
	<-started
	const hold = 300 * time.Millisecond
	time.Sleep(hold) // the wait being measured, not an ordering: b waits at least this long
	for range 2 {
		if err := a.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-got; err != nil {
		t.Fatalf("b.Lock: %v", err)
	}
	if err := b.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := obstest.Value(t, reg, "txkit_lock_acquisitions_total", "backend", "zookeeper"); got != 3 {
		t.Fatalf("acquisitions = %v, want 3", got)
	}
	if sum, n := obstest.Histogram(t, reg, "txkit_lock_wait_seconds", "backend", "zookeeper"); n != 3 || sum < (hold-50*time.Millisecond).Seconds() {
		t.Fatalf("wait histogram: %d samples, %.3fs in all; want 3 and b's wait of at least %v", n, sum, hold)
	}
	if got := obstest.Value(t, reg, "txkit_lock_session_losses_total", "backend", "zookeeper"); got != 0 {
		t.Fatalf("session losses = %v after releases, want 0", got)
	}
}

// A ZooKeeper election counts the terms it wins, once per term however many components join it,
// and shows 1 while it leads; resigning brings the gauge back to 0: NewElector passes the option on.
func TestIntegrationElectionMetrics(t *testing.T) {
	path := testenv.ZKRoot(t) + "/leader"
	reg := prometheus.NewRegistry()
	el, err := zklock.NewElector(session(t, testenv.ZK(t)), path, "a", lock.WithElectionRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	isLeader := func() float64 { return obstest.Value(t, reg, "txkit_lock_is_leader", "election", path) }
	changes := func() float64 { return obstest.Value(t, reg, "txkit_lock_leadership_changes_total", "election", path) }
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

// Instrument a ZooKeeper mutex and an election, on the service's own registry.
func Example_instrument() {
	ctx := context.Background()
	sess, err := zklock.NewSession(ctx, exampleServers(), zklock.WithSessionTimeout(5*time.Second), exampleAuth())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sess.Close()
	root := "/txkit-example/" + uuid.NewString()
	defer deleteAll(sess, root+"/lock")
	defer deleteAll(sess, root+"/leader")

	reg := prometheus.NewRegistry() // served on /metrics with promhttp.HandlerFor(reg, ...)
	m, _ := zklock.NewMutex(sess, root+"/lock")
	l, err := lock.Instrument(m, "zookeeper", reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := l.Lock(ctx); err != nil {
		fmt.Println(err)
		return
	}
	_ = l.Unlock(ctx)

	el, _ := zklock.NewElector(sess, root+"/leader", "host-1", lock.WithElectionRegisterer(reg))
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
