package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/locktest"
	"github.com/txkit/txkit/lock/redislock"
)

func TestMain(m *testing.M) {
	if locktest.IsWorker() {
		os.Exit(locktest.RunWorker(conformanceBackend))
	}
	testenv.VerifyNoLeaks(m)
}

// newRedis returns a go-redis client on addr, closed when the test ends. Its timeouts are short
// and honour ctx deadlines, as the package documentation advises.
func newRedis(t testing.TB, addr string) *redis.Client { return newNamedRedis(t, addr, "") }

// newNamedRedis is newRedis with a client name (CLIENT SETNAME) on every connection, so that
// CLIENT LIST shows what the client's connections do (see [waiterState]).
func newNamedRedis(t testing.TB, addr, name string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ClientName:            name,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waiterState reads CLIENT LIST on admin's server: whether a connection named name is subscribed
// (a waiter's release subscription) and whether one last ran a script (its attempt).
func waiterState(ctx context.Context, admin *redis.Client, name string) (subscribed, attempted bool) {
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		return false, false
	}
	for line := range strings.Lines(list) {
		f := strings.Fields(line)
		if !slices.Contains(f, "name="+name) {
			continue
		}
		subscribed = subscribed || slices.Contains(f, "sub=1")
		attempted = attempted || slices.Contains(f, "cmd=evalsha") || slices.Contains(f, "cmd=eval")
	}
	return subscribed, attempted
}

// newClient returns a Client on rdb with the test's logger, closed when the test ends (before rdb).
func newClient(t testing.TB, rdb redis.UniversalClient, opts ...redislock.Option) *redislock.Client {
	t.Helper()
	c, err := redislock.New(rdb, append([]redislock.Option{redislock.WithLogger(testenv.Logger(t))}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newMutex(t testing.TB, c *redislock.Client, name string, opts ...redislock.MutexOption) *redislock.Mutex {
	t.Helper()
	m, err := c.NewMutex(name, opts...)
	if err != nil {
		t.Fatalf("NewMutex(%s): %v", name, err)
	}
	return m
}

// lockName returns a lock name of the test's own.
// lockName returns a lock name of the test's own. When the test ends, its keys — the fencing
// counter has no TTL — are deleted from every Redis server of `make up` (the replica follows its
// primary).
func lockName(t testing.TB) string {
	name := "test-" + testenv.Name(t)
	t.Cleanup(func() {
		var addrs []string
		for _, env := range []string{testenv.EnvRedis, testenv.EnvRedlock, testenv.EnvRedisPrimary} {
			if v := os.Getenv(env); v != "" {
				addrs = append(addrs, strings.Split(v, ",")...)
			}
		}
		for _, a := range addrs {
			rdb := redis.NewClient(&redis.Options{Addr: a, DialTimeout: time.Second, ReadTimeout: time.Second})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = rdb.Del(ctx, key(name), key(name)+":fence", key(name+"-election"), key(name+"-election")+":fence").Err()
			cancel()
			_ = rdb.Close()
		}
	})
	return name
}

// key is the lock key of name under the default prefix.
func key(name string) string { return "txkit:lock:{" + name + "}" }

// mustContend runs contend for at most a minute, fails the test on its error or a missing hold,
// logs how long it took, and returns the tokens.
func mustContend(t *testing.T, goroutines, holds int, newLocker func() (lock.Locker, error)) []lock.Token {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	start := time.Now()
	tokens, err := contend(ctx, goroutines, holds, newLocker)
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens) != goroutines*holds {
		t.Fatalf("%d holds, want %d", len(tokens), goroutines*holds)
	}
	t.Logf("%d holds by %d contenders in %v", len(tokens), goroutines, time.Since(start).Round(time.Millisecond))
	return tokens
}

// contend runs goroutines goroutines, each with its own Locker from newLocker, each making holds
// holds. It returns the tokens of the holds in the order they were taken, and an error when a
// hold began while another was running, when a hold was lost before its work, or when a call
// failed.
func contend(ctx context.Context, goroutines, holds int, newLocker func() (lock.Locker, error)) ([]lock.Token, error) {
	var (
		inside atomic.Int32 // holds running now
		mu     sync.Mutex
		tokens []lock.Token
		errs   []error
		wg     sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for range goroutines {
		l, err := newLocker()
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			for range holds {
				lease, err := l.Lock(ctx)
				if err != nil {
					fail(err)
					return
				}
				if n := inside.Add(1); n > 1 {
					fail(fmt.Errorf("%d holders at once (token %s)", n, lease.Token()))
				}
				mu.Lock()
				tokens = append(tokens, lease.Token())
				mu.Unlock()
				if lease.Err() != nil {
					fail(fmt.Errorf("hold %s lost before its work: %w", lease.Token(), lease.Err()))
				}
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for i := 1; i < len(tokens); i++ {
		if !tokens[i-1].Less(tokens[i]) {
			errs = append(errs, fmt.Errorf("hold %d has token %s, not above the one before, %s", i, tokens[i], tokens[i-1]))
		}
	}
	return tokens, errors.Join(errs...)
}
