package zklock_test

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
)

// TestIntegrationNoSecondHolderWhileZKServerRestarts is the ZooKeeper half of the failover
// comparison (lock/redislock's TestIntegrationDisruptiveRedisFailoverTwoHolders is the Redis
// half, where a promoted replica grants the lock a second time). Holder A's ZooKeeper server is
// stopped while A holds the lock; B, on another session, tries TryLock again and again until A's
// session is back on another server, and for a session timeout more while the server is still
// down. A's node was written to a quorum before A's Lock returned, so no server forgets it: A
// reconnects within the session timeout, its lease never ends, and B never holds the lock.
//
// A's session is kept off the ensemble's leader (its dialer refuses that address), so that
// stopping A's server does not also force a leader election; TestIntegrationExclusionWhileZKServerRestarts
// stops the leader. It runs without -race (the Makefile's ZK_RECONNECT_TESTS): the race detector
// slows the reconnection past the session timeout on a loaded machine.
func TestIntegrationNoSecondHolderWhileZKServerRestarts(t *testing.T) {
	servers := testenv.ZK(t)
	if len(servers) < 3 {
		t.Fatalf("this test needs the three-node ensemble (%s has %d servers)", testenv.EnvZK, len(servers))
	}
	path := testenv.ZKRoot(t) + "/failover"
	ctx := t.Context()
	leader := servers[zkLeader(t, servers)-1]
	sa := session(t, servers, zklock.WithDialer(func(network, addr string, timeout time.Duration) (net.Conn, error) {
		if addr == leader {
			return nil, fmt.Errorf("test: holder A keeps off the ensemble's leader %s", addr)
		}
		return net.DialTimeout(network, addr, timeout)
	}))
	sb := session(t, servers)
	a, b := mutex(t, sa, path), mutex(t, sb, path)
	la, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	server := sa.Conn().Server()
	n := slices.Index(servers, server) + 1
	if n == 0 {
		t.Fatalf("A's session is on %q, not one of %v", server, servers)
	}

	stopped := time.Now() // deploy/local/zk stop returns once the server is gone
	zkNode(t, "stop", n)
	t.Logf("zk%d stopped in %v", n, time.Since(stopped).Round(time.Millisecond))
	var tries, refused, failed int
	try := func() {
		tries++
		lb, err := b.TryLock(ctx)
		switch {
		case err == nil:
			t.Errorf("B holds the lock (token %s) while A holds it (token %s, lease err %v), %v after zk%d stopped",
				lb.Token(), la.Token(), la.Err(), time.Since(stopped).Round(time.Millisecond), n)
			_ = b.Unlock(ctx)
		case errors.Is(err, lock.ErrLocked):
			refused++
		default: // B's own connection was on the stopped server, or is moving
			failed++
		}
		if la.Err() != nil {
			t.Fatalf("A's lease ended %v after zk%d stopped: %v", time.Since(stopped).Round(time.Millisecond), n, la.Err())
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	back := func() bool {
		return sa.Conn().State() == zk.StateHasSession && sa.Conn().Server() != server
	}
	for !back() {
		if time.Since(stopped) > testSessionTimeout {
			t.Fatalf("A's session not back on another server %v after zk%d stopped (state %v, server %s)",
				testSessionTimeout, n, sa.Conn().State(), sa.Conn().Server())
		}
		try()
		<-tick.C
	}
	reconnected := time.Since(stopped)
	for time.Since(stopped) < reconnected+testSessionTimeout {
		try()
		<-tick.C
	}
	zkNode(t, "start", n)
	t.Logf("zk%d (A's server) stopped: A's session back on %s at most %v after the stop began; B tried %d times (%d refused with ErrLocked, %d failed) and never held the lock",
		n, sa.Conn().Server(), reconnected.Round(time.Millisecond), tries, refused, failed)
	if refused == 0 {
		t.Error("no TryLock of B reached ZooKeeper")
	}
	if err := la.Err(); err != nil {
		t.Fatalf("A's lease ended: %v", err)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryLock(ctx)
	if err != nil {
		t.Fatalf("B's TryLock after A's Unlock: %v", err)
	}
	if !la.Token().Less(lb.Token()) {
		t.Errorf("B's token %s not above A's %s", lb.Token(), la.Token())
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
