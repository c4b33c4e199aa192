package zklock_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/internal/obs/obstest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
)

// Two instrumented ZooKeeper mutexes on one registry count every acquisition (a reentrant one
// too) in shared series, and the second one's wait for the first; releases are not losses.
func TestIntegrationInstrumentZooKeeper(t *testing.T) {
	servers, path := testenv.ZK(t), testenv.ZKRoot(t)+"/metrics"
	reg := prometheus.NewRegistry()
	var ls [2]lock.Locker
	for i := range ls {
		l, err := lock.Instrument(mutex(t, session(t, servers), path), "zookeeper", reg)
		if err != nil {
			t.Fatalf("Instrument: %v", err)
		}
		ls[i] = l
	}
	a, b := ls[0], ls[1]
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

// NewElector passes lock.WithElectionRegisterer on to the Election: its gauge shows 1 while it
// leads and 0 after it resigns (lock's TestIntegrationElectionMetrics checks the counting itself).
func TestIntegrationElectionMetrics(t *testing.T) {
	path := testenv.ZKRoot(t) + "/leader"
	reg := prometheus.NewRegistry()
	el, err := zklock.NewElector(session(t, testenv.ZK(t)), path, "a", lock.WithElectionRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	isLeader := func() float64 { return obstest.Value(t, reg, "txkit_lock_is_leader", "election", path) }
	l, err := el.Campaign(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if changes := obstest.Value(t, reg, "txkit_lock_leadership_changes_total", "election", path); isLeader() != 1 || changes != 1 {
		t.Fatalf("leading: is_leader %v, changes %v; want 1 and 1", isLeader(), changes)
	}
	if err := l.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool { return isLeader() == 0 },
		"is_leader = %v after resigning, want 0", isLeader())
}
