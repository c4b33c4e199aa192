package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/tcc"
)

// Every coordinator's New refuses unusable partitions.
func TestIntegrationNewRefusesBadPartitions(t *testing.T) {
	pool := testenv.PG(t).Pool
	el := func(int) (lock.Elector, error) { return &lock.Election{}, nil }
	for name, newC := range constructors() {
		for what, opt := range map[string]coordinator.Option{
			"zero partitions":     coordinator.WithPartitions(0, el, nil),
			"too many partitions": coordinator.WithPartitions(1025, el, nil),
			"no electors":         coordinator.WithPartitions(4, nil, nil),
		} {
			if err := newC(pool, opt); !errors.Is(err, coordinator.ErrInvalidOption) {
				t.Errorf("%s.New with %s = %v, want ErrInvalidOption", name, what, err)
			}
		}
		if err := newC(pool, coordinator.WithPartitions(4, el, nil)); err != nil {
			t.Errorf("%s.New with 4 partitions: %v", name, err)
		}
	}
	if _, err := coordinator.HeartbeatCount(pool, "", "", "g", "a", time.Second); !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Errorf("HeartbeatCount without a table = %v, want ErrInvalidOption", err)
	}
}

// confirms counts the confirm calls per transaction.
type confirms struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *confirms) Do(_ context.Context, req participant.Request) error {
	if req.Op == participant.OpConfirm {
		c.mu.Lock()
		c.n[req.GID]++
		c.mu.Unlock()
	}
	return nil
}

// TestIntegrationPartitionedRecoveryConfirmsOnce: two tcc instances recover a log split into 4
// partitions (ZooKeeper elections, balanced by ContenderCount); decided transactions whose
// starter is gone are confirmed by the leaders of their partitions, each branch once; when one
// instance stops, the other takes its partitions and confirms the next ones, once each too.
func TestIntegrationPartitionedRecoveryConfirmsOnce(t *testing.T) {
	s := testenv.PG(t)
	ctx := t.Context()
	root := testenv.ZKRoot(t) + "/tcc"
	paths := make([]string, 4)
	for p := range paths {
		paths[p] = fmt.Sprintf("%s/p%d", root, p)
	}
	party := &confirms{n: map[string]int{}}
	instance := func(id string) (stop func()) {
		sess, err := zklock.NewSession(ctx, testenv.ZK(t), zklock.WithSessionTimeout(2*time.Second), zklock.WithLogger(testenv.Logger(t)), zkenv.Auth(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sess.Close() })
		c := coretest.New(t, tcc.New, s.Pool, s.Name, coordinator.WithLease(200*time.Millisecond),
			coordinator.WithPartitions(4, func(p int) (lock.Elector, error) { return zklock.NewElector(sess, paths[p], id) },
				coordinator.ContenderCount(sess.Inspector(), paths...)))
		coretest.Register(t, c, "stock", party)
		rctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(rctx) }()
		var once sync.Once
		stop = func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("%s: Run: %v", id, err)
				}
			})
		}
		t.Cleanup(stop)
		return stop
	}
	l, err := core.New(s.Pool, core.WithSchema(s.Name), core.WithLease(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	decided := func(from, to int) {
		for i := from; i < to; i++ {
			// Decided to confirm, and the starter gone: only the recovery calls the confirm.
			if err := l.CreateIn(ctx, fmt.Sprintf("g%03d", i), core.KindTCC, core.StatusConfirming, time.Hour, nil,
				core.Branch{Name: "stock", Target: core.Target{Kind: core.TargetInProc, Ref: "stock"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	confirmed := func(n int) {
		t.Helper()
		var got int
		testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool {
			if err := s.Pool.QueryRow(ctx, `select count(*) from txkit_global where status = 'confirmed'`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			return got == n
		}, "%d transactions confirmed, want %d", &got, n)
	}
	stopA := instance("a")
	instance("b")
	decided(0, 40)
	confirmed(40)
	stopA()
	decided(40, 80)
	confirmed(80)
	party.mu.Lock()
	defer party.mu.Unlock()
	for i := range 80 {
		if gid := fmt.Sprintf("g%03d", i); party.n[gid] != 1 {
			t.Errorf("%s confirmed %d times, want once", gid, party.n[gid])
		}
	}
}
