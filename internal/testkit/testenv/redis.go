package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Redis returns the address of the single Redis server for the single-node lock (TXKIT_REDIS,
// 127.0.0.1:26379 after `make up`) after checking that it answers PING. It skips the test only
// under -short; an unset variable or a server that does not answer fails it.
func Redis(t testing.TB) string {
	t.Helper()
	addr := Lookup(t, EnvRedis)
	if err := redisPing(addr); err != nil {
		t.Fatalf("Redis at %s=%s does not answer PING (is `make up` running?): %v", EnvRedis, addr, err)
	}
	return addr
}

// Redlock returns the addresses of the independent Redis servers for Redlock (TXKIT_REDLOCK, three
// comma-separated addresses after `make up`) after checking that every one answers PING. It skips
// the test only under -short; an unset variable or a server that does not answer fails it.
func Redlock(t testing.TB) []string {
	t.Helper()
	v := Lookup(t, EnvRedlock)
	addrs := strings.Split(v, ",")
	var errs []error
	for i, a := range addrs {
		addrs[i] = strings.TrimSpace(a)
		if err := redisPing(addrs[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		t.Fatalf("Redis servers in %s=%s do not answer PING (is `make up` running?): %v", EnvRedlock, v, errors.Join(errs...))
	}
	return addrs
}

// RedisPair returns the addresses of a Redis primary (TXKIT_REDIS_PRIMARY) and its replica
// (TXKIT_REDIS_REPLICA), for failover tests, after checking that both answer PING and that the
// replica replicates the primary with its link up; it waits up to 10 s for the link. It skips the
// test only under -short; an unset variable, a server that does not answer or a pair left swapped by
// an earlier failover test fails it (`deploy/local/redis reset-pair` restores the pair).
func RedisPair(t testing.TB) (primary, replica string) {
	t.Helper()
	primary = Lookup(t, EnvRedisPrimary)
	replica = Lookup(t, EnvRedisReplica)
	if err := redisPing(primary); err != nil {
		t.Fatalf("Redis at %s=%s does not answer PING (is `make up` running?): %v", EnvRedisPrimary, primary, err)
	}
	if err := redisPing(replica); err != nil {
		t.Fatalf("Redis at %s=%s does not answer PING (is `make up` running?): %v", EnvRedisReplica, replica, err)
	}
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err = redisReplicates(primary, replica); err == nil {
			return primary, replica
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("Redis %s=%s does not replicate %s=%s (run deploy/local/redis reset-pair): %v",
		EnvRedisReplica, replica, EnvRedisPrimary, primary, err)
	return "", ""
}

// redisReplicates checks that primary is a primary and that replica replicates it with its link up.
func redisReplicates(primary, replica string) error {
	info, err := redisDo(primary, "INFO", "replication")
	if err != nil {
		return err
	}
	if role := infoField(info, "role"); role != "master" {
		return fmt.Errorf("%s: role %s, not master", primary, role)
	}
	info, err = redisDo(replica, "INFO", "replication")
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(primary)
	if role, mp, link := infoField(info, "role"), infoField(info, "master_port"), infoField(info, "master_link_status"); role != "slave" || mp != port || link != "up" {
		return fmt.Errorf("%s: role %s, master_port %q, master_link_status %q", replica, role, mp, link)
	}
	return nil
}

// infoField returns the value of field in an INFO reply ("field:value" lines).
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), field+":"); ok {
			return v
		}
	}
	return ""
}

func redisPing(addr string) error {
	reply, err := redisDo(addr, "PING")
	if err != nil {
		return err
	}
	if reply != "PONG" {
		return fmt.Errorf("%s: answered %q to PING", addr, reply)
	}
	return nil
}

// redisDo sends one command to the Redis server at addr on a connection of its own and returns the
// reply: a simple string, or a bulk string's content. An error reply is an error.
func redisDo(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(dialTimeout))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return "", fmt.Errorf("%s: %w", addr, err)
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("%s: %s: %w", addr, args[0], err)
	}
	line = strings.TrimSuffix(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "+"):
		return line[1:], nil
	case strings.HasPrefix(line, "-"):
		return "", fmt.Errorf("%s: %s: %s", addr, args[0], line[1:])
	case strings.HasPrefix(line, "$"):
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("%s: %s: unexpected reply %q", addr, args[0], line)
		}
		buf := make([]byte, n+2) // the content and its \r\n
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", fmt.Errorf("%s: %s: %w", addr, args[0], err)
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("%s: %s: unexpected reply %q", addr, args[0], line)
	}
}

// The Redis Sentinel set of deploy/local/redis-sentinel (deploy/local/env prints them).
const (
	EnvRedisSentinels      = "TXKIT_REDIS_SENTINELS"       // three Sentinels, comma-separated
	EnvRedisSentinelMaster = "TXKIT_REDIS_SENTINEL_MASTER" // the master name they monitor
)

// RedisSentinel returns the Sentinels' addresses (TXKIT_REDIS_SENTINELS) and the master name they
// monitor (TXKIT_REDIS_SENTINEL_MASTER) once the set is whole: a Sentinel names a primary that is
// one, with a replica whose link is up. It waits up to 60 s for that (a failover test before may
// have left a failover or a restarted server's resync under way). It skips the test only under
// -short; an unset variable or a set that does not become whole fails it
// (`deploy/local/redis-sentinel start` restarts what is missing).
func RedisSentinel(t testing.TB) (sentinels []string, master string) {
	t.Helper()
	v := Lookup(t, EnvRedisSentinels)
	master = Lookup(t, EnvRedisSentinelMaster)
	for a := range strings.SplitSeq(v, ",") {
		sentinels = append(sentinels, strings.TrimSpace(a))
	}
	var err error
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if err = sentinelWhole(sentinels, master); err == nil {
			return sentinels, master
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("the Redis Sentinel set %s=%s (master %s) is not whole (run deploy/local/redis-sentinel start): %v",
		EnvRedisSentinels, v, master, err)
	return nil, ""
}

// sentinelWhole checks that every Sentinel names the same primary, that it is a primary, and that
// it has a replica with its link up.
func sentinelWhole(sentinels []string, master string) error {
	var primary string
	for _, s := range sentinels {
		info, err := redisDo(s, "INFO", "sentinel")
		if err != nil {
			return err
		}
		i := strings.Index(info, "name="+master+",")
		if i < 0 {
			return fmt.Errorf("sentinel %s does not monitor %s", s, master)
		}
		line, _, _ := strings.Cut(info[i:], "\n")
		addr := ""
		for f := range strings.SplitSeq(strings.TrimSpace(line), ",") {
			if a, ok := strings.CutPrefix(f, "address="); ok {
				addr = a
			}
		}
		if !strings.Contains(line, "status=ok") || !strings.Contains(line, "slaves=1") {
			return fmt.Errorf("sentinel %s: %s", s, line)
		}
		if primary != "" && addr != primary {
			return fmt.Errorf("sentinels disagree on the primary: %s and %s", primary, addr)
		}
		primary = addr
	}
	info, err := redisDo(primary, "INFO", "replication")
	if err != nil {
		return err
	}
	if role := infoField(info, "role"); role != "master" {
		return fmt.Errorf("%s: role %s, not master", primary, role)
	}
	if infoField(info, "connected_slaves") != "1" || !strings.Contains(infoField(info, "slave0"), "state=online") {
		return fmt.Errorf("%s: no replica online (%s)", primary, infoField(info, "slave0"))
	}
	return nil
}
