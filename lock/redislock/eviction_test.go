package redislock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/redislock"
)

// privateRedis starts a redis-server of the test's own (Debian's, from PATH) on a unix socket,
// with extra configuration args (such as "--maxmemory-policy", "volatile-lru"), and stops it when
// the test ends. It returns the socket's path. The shared servers' configuration is never touched.
func privateRedis(t *testing.T, args ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs redis-server")
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found (Debian's redis-server package): %v", err)
	}
	dir, err := os.MkdirTemp("", "txkit-redis-") // short: a socket's path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "redis.sock")
	var out bytes.Buffer
	cmd := exec.Command(bin, append([]string{"--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
		"--dir", dir, "--save", "", "--appendonly", "no", "--loglevel", "warning", "--maxmemory", "32mb"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { // registered first: runs after the clients' cleanups
		_ = cmd.Process.Kill()
		<-exited
		_ = os.RemoveAll(dir)
	})
	rdb := privateClient(t, sock, "", "")
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		select {
		case <-exited:
			t.Fatalf("redis-server exited: %s", out.String()) // out is complete once Wait returned
		default:
		}
		return rdb.Ping(t.Context()).Err() == nil
	}, "the private redis-server on %s to answer PING", sock)
	return sock
}

// privateClient returns a go-redis client on the private server's socket, as user (empty: the
// default user), closed when the test ends.
func privateClient(t *testing.T, sock, user, password string) *redis.Client {
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, Username: user, Password: password,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// logBuffer collects a logger's output.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestIntegrationRedisEvictionPolicy: against a server whose maxmemory-policy is volatile-lru
// (which evicts keys with a TTL, as lock keys are), TryLock and Lock refuse at once with
// ErrEvictionPolicy — a Client, and a Redlock with that server as one of three instances — and
// take nothing; once the policy is noeviction (CONFIG SET on a connection of the test's own),
// the same Client and Redlock take the lock.
func TestIntegrationRedisEvictionPolicy(t *testing.T) {
	t.Parallel()
	sock := privateRedis(t, "--maxmemory-policy", "volatile-lru")
	shared := testenv.Redlock(t)
	rdb := privateClient(t, sock, "", "")
	c := newClient(t, rdb)
	r, err := redislock.NewRedlock([]redis.UniversalClient{newRedis(t, shared[0]), newRedis(t, shared[1]), rdb},
		redislock.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	name := lockName(t)
	m := newMutex(t, c, name)
	rm := newRedlockMutex(t, r, name)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	for what, try := range map[string]func(context.Context) (lock.Lease, error){
		"Client TryLock": m.TryLock, "Client Lock": m.Lock, "Redlock TryLock": rm.TryLock, "Redlock Lock": rm.Lock,
	} {
		_, err := try(ctx)
		if !errors.Is(err, redislock.ErrEvictionPolicy) || !strings.Contains(err.Error(), "volatile-lru") {
			t.Fatalf("%s against maxmemory-policy volatile-lru: %v, want an error wrapping ErrEvictionPolicy that names the policy", what, err)
		}
		t.Logf("%s: %v", what, err)
	}
	if n, err := rdb.Exists(ctx, key(name)).Result(); err != nil || n != 0 {
		t.Fatalf("the lock key exists (%d, %v) after the refusals", n, err)
	}

	admin := privateClient(t, sock, "", "")
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryLock(ctx); err != nil {
		t.Fatalf("Client TryLock after CONFIG SET maxmemory-policy noeviction: %v", err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := rm.Lock(ctx); err != nil {
		t.Fatalf("Redlock Lock after CONFIG SET maxmemory-policy noeviction: %v", err)
	}
	if err := rm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationRedisConfigGetRefused: a user whose ACL refuses CONFIG cannot read the policy;
// the Client takes the lock (the policy may be right: it cannot tell) and warns, once.
func TestIntegrationRedisConfigGetRefused(t *testing.T) {
	t.Parallel()
	sock := privateRedis(t, "--maxmemory-policy", "allkeys-lru")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := privateClient(t, sock, "", "").Do(ctx, "ACL", "SETUSER", "locker", "on", ">secret", "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := privateClient(t, sock, "locker", "secret")
	if err := rdb.ConfigGet(ctx, "maxmemory-policy").Err(); err == nil {
		t.Fatal("CONFIG GET allowed for a user without +config: the test would prove nothing")
	}
	var logs logBuffer
	c, err := redislock.New(rdb, redislock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	m := newMutex(t, c, lockName(t))
	for range 2 {
		if _, err := m.Lock(ctx); err != nil {
			t.Fatalf("Lock with CONFIG GET refused: %v", err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "cannot read maxmemory-policy"); n != 1 {
		t.Fatalf("%d warnings about maxmemory-policy, want 1; log:\n%s", n, logs.String())
	}
	t.Logf("warned: %s", strings.TrimSpace(logs.String()))
}
