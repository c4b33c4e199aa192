package testenv

import (
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestIntegrationRedis checks the Redis helpers against the servers of `make up`: every address
// answers, the Redlock servers are three distinct ones, and the replica replicates the primary.
func TestIntegrationRedis(t *testing.T) {
	single := Redis(t)
	redlock := Redlock(t)
	primary, replica := RedisPair(t)

	if len(redlock) != 3 {
		t.Errorf("Redlock: %d servers %v, want 3", len(redlock), redlock)
	}
	all := append([]string{single, primary, replica}, redlock...)
	sorted := slices.Clone(all)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != len(all) {
		t.Errorf("the Redis addresses are not distinct: %v", all)
	}

	// A key written on the primary reaches the replica.
	key := "txkit-test:" + Name(t)
	if _, err := redisDo(primary, "SET", key, "v", "PX", "60000"); err != nil {
		t.Fatalf("SET on the primary: %v", err)
	}
	t.Cleanup(func() { _, _ = redisDo(primary, "DEL", key) })
	Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		v, err := redisDo(replica, "GET", key)
		return err == nil && v == "v"
	}, "the replica %s to have key %s", replica, key)

	// The replica refuses writes: an error reply is an error.
	if _, err := redisDo(replica, "SET", key, "w"); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Errorf("SET on the replica: err %v, want a READONLY error", err)
	}
}

// TestRedisPingRefused checks that a port nothing listens on is an error, not a PONG.
func TestRedisPingRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	if err := redisPing(addr); err == nil {
		t.Errorf("redisPing(%s) on a closed port: no error", addr)
	}
}
