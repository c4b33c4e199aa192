package leader_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

// TestIntegrationShardsBalanceByHeartbeatOnPGLeases: on PostgreSQL leases (lock/pglock), whose
// waiters are not listed, two instances count each other through a Heartbeat table and share 4
// partitions 2 and 2; when one stops (its row deleted), the other leads all 4.
func TestIntegrationShardsBalanceByHeartbeatOnPGLeases(t *testing.T) {
	db := testenv.PG(t)
	f := migratedFence(t, db)
	const parts, ttl = 4, 2 * time.Second
	instance := func(id string) (*leader.Shards, func()) {
		pool, c := pgLockClient(t, db, ttl, "")
		hb, err := leader.NewHeartbeat(pool, db.Name, "members", "", id, ttl)
		if err != nil {
			t.Fatal(err)
		}
		s, err := leader.NewShards(parts, func(p int) (lock.Elector, error) {
			return c.NewElector(fmt.Sprintf("job/p%d", p), id)
		}, pool, f, "job", func(ctx context.Context, _ *leader.Term) error {
			<-ctx.Done()
			return nil
		}, leader.WithMembership(hb), leader.WithBalanceEvery(200*time.Millisecond), leader.WithPause(500*time.Millisecond),
			leader.WithLogger(testenv.Logger(t)))
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(rctx) }()
		stop := func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: Run: %v", id, err)
			}
		}
		return s, stop
	}
	a, stopA := instance("a")
	defer stopA()
	testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool { return len(a.Led()) == parts }, "a alone does not lead all")
	b, stopB := instance("b")
	start := time.Now()
	testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		la, lb := a.Led(), b.Led()
		return len(la) == 2 && len(lb) == 2 && !slices.ContainsFunc(la, func(p int) bool { return slices.Contains(lb, p) })
	}, "a %v and b %v do not share the partitions 2 and 2", a.Led, b.Led)
	t.Logf("b joined: a leads %v, b %v after %v", a.Led(), b.Led(), time.Since(start).Round(time.Millisecond))
	stopB()
	start = time.Now()
	testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool { return len(a.Led()) == parts }, "a does not take b's partitions")
	t.Logf("b left: a leads %v after %v", a.Led(), time.Since(start).Round(time.Millisecond))
}

// heartbeatInstance runs a Shards of parts partitions for instance id on PostgreSQL leases
// (lock/pglock, TTL ttl, in schema lockSchema: "" for db's), counting through a Heartbeat with no
// group of its own (the fence resource "job"), until the test ends.
func heartbeatInstance(t *testing.T, db *testenv.Schema, f *fence.Fence, lockSchema, id string, parts int,
	ttl time.Duration, opts ...leader.Option) *leader.Shards {
	t.Helper()
	pool, c := pgLockClient(t, db, ttl, lockSchema)
	hb, err := leader.NewHeartbeat(pool, db.Name, "members", "", id, ttl)
	if err != nil {
		t.Fatal(err)
	}
	s, err := leader.NewShards(parts, func(p int) (lock.Elector, error) {
		return c.NewElector(fmt.Sprintf("job/p%d", p), id)
	}, pool, f, "job", func(ctx context.Context, _ *leader.Term) error {
		<-ctx.Done()
		return nil
	}, append([]leader.Option{leader.WithMembership(hb), leader.WithBalanceEvery(200 * time.Millisecond),
		leader.WithPause(300 * time.Millisecond), leader.WithLogger(testenv.Logger(t).With("instance", id))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: Run: %v", id, err)
		}
	})
	return s
}

// TestIntegrationShardsCampaignFailureIsNotMembership: 4 partitions; B runs beside A with the
// same heartbeat table but its every campaign fails (its lease table does not exist); A leads
// all 4 within 3 leases and keeps them until B has run for 2 leases — B, unable to campaign, is
// never counted for a share it would leave unled.
func TestIntegrationShardsCampaignFailureIsNotMembership(t *testing.T) {
	db := testenv.PG(t)
	f := migratedFence(t, db)
	const parts, ttl = 4, 2 * time.Second
	start := time.Now()
	b := heartbeatInstance(t, db, f, "missing_"+db.Name, "b", parts, ttl)
	a := heartbeatInstance(t, db, f, "", "a", parts, ttl)
	var led []int
	testenv.Eventually(t, 3*ttl, 50*time.Millisecond, func() bool { led = a.Led(); return len(led) == parts },
		"a leads %v, not all %d partitions, while b (whose campaigns fail) runs", &led, parts)
	t.Logf("a leads %v after %v; b leads %v", a.Led(), time.Since(start).Round(time.Millisecond), b.Led())
	// Hold: B, had it counted, would be counted from one TTL after it started.
	for time.Since(start) < 2*ttl {
		if led := a.Led(); len(led) != parts {
			t.Fatalf("a leads %v after %v, not all %d, while b's campaigns fail", led, time.Since(start).Round(time.Millisecond), parts)
		}
		select {
		case <-t.Context().Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	if len(b.Led()) != 0 {
		t.Errorf("b leads %v with failing campaigns", b.Led())
	}
}

// TestIntegrationShardsFreePartitionTakenAndUnledMetric: A is alone, but a member that never
// campaigns (an instance of another version, say) heartbeats in its group, so once it counts A's
// share is 2 of 4. The 2 others are free: A leads 2 and the unled gauge reports 2, then A takes
// them whatever the share once they have been free for 3 leases, and the gauge goes back to 0.
func TestIntegrationShardsFreePartitionTakenAndUnledMetric(t *testing.T) {
	db := testenv.PG(t)
	f := migratedFence(t, db)
	const parts, ttl = 4, time.Second
	ghost, err := leader.NewHeartbeat(db.Pool, db.Name, "members", "job", "ghost", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ghost.Members(t.Context()); err != nil {
		t.Fatal(err)
	}
	beats, stopBeats := context.WithCancel(context.Background())
	beaten := make(chan struct{})
	go func() {
		defer close(beaten)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-beats.Done():
				return
			case <-tick.C:
				_, _ = ghost.Members(beats)
			}
		}
	}()
	t.Cleanup(func() { stopBeats(); <-beaten })
	reg := prometheus.NewRegistry()
	unled := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "txkit_leader_partitions_unled" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "resource" && l.GetValue() == "job" {
						return m.GetGauge().GetValue()
					}
				}
			}
		}
		return -1
	}
	a := heartbeatInstance(t, db, f, "", "a", parts, ttl, leader.WithRegisterer(reg))
	var seen struct {
		Led   []int
		Unled float64
	}
	// Once the ghost counts (a TTL after its first beat), a leads its share, 2.
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool {
		seen.Led, seen.Unled = a.Led(), unled()
		return len(seen.Led) == 2 && seen.Unled == 2
	}, "a does not lead 2 with the unled gauge at 2 (a sees %+v)", &seen)
	stalled := time.Now()
	testenv.Eventually(t, 3*ttl+5*time.Second, 50*time.Millisecond, func() bool {
		seen.Led, seen.Unled = a.Led(), unled()
		return len(seen.Led) == parts && seen.Unled == 0
	}, "the free partitions were not taken (a sees %+v)", &seen)
	t.Logf("a leads %v, unled gauge 0, %v after the gauge reported 2", a.Led(), time.Since(stalled).Round(time.Millisecond))
}

// TestIntegrationHeartbeatGroupIsTheFenceResource: a Heartbeat without a group of its own, counted
// by a Shards through MembersFunc (as coordinator.HeartbeatCount and notify.HeartbeatCount hand it
// over), keeps its row in the group named by the Shards' fence resource; counted outside a Shards
// it refuses with ErrInvalidOption.
func TestIntegrationHeartbeatGroupIsTheFenceResource(t *testing.T) {
	db := testenv.PG(t)
	f := migratedFence(t, db)
	const ttl = 2 * time.Second
	pool, c := pgLockClient(t, db, ttl, "")
	hb, err := leader.NewHeartbeat(pool, db.Name, "members", "", "a", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hb.Members(t.Context()); !errors.Is(err, leader.ErrInvalidOption) {
		t.Fatalf("Members outside a Shards = %v, want ErrInvalidOption", err)
	}
	s, err := leader.NewShards(2, func(p int) (lock.Elector, error) {
		return c.NewElector(fmt.Sprintf("orders/p%d", p), "a")
	}, pool, f, "outbox:orders", func(ctx context.Context, _ *leader.Term) error {
		<-ctx.Done()
		return nil
	}, leader.WithMembership(leader.MembersFunc(hb.Members)), leader.WithBalanceEvery(100*time.Millisecond),
		leader.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var groups []string
	testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		rows, err := db.Pool.Query(t.Context(), `select grp from members where id = 'a'`)
		if err != nil {
			return false
		}
		groups, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err == nil && len(groups) == 1
	}, "a's heartbeat rows are in groups %v", &groups)
	if groups[0] != "outbox:orders" {
		t.Errorf("a's heartbeat group is %q, want the fence resource %q", groups[0], "outbox:orders")
	}
}
