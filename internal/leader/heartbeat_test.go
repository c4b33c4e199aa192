package leader_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/testenv"
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
		pool, c := pgLockClient(t, db, ttl)
		hb, err := leader.NewHeartbeat(pool, db.Name, "members", "job", id, ttl)
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
