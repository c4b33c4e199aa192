package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txkit/txkit/internal/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/redislock"
)

func TestMain(m *testing.M) {
	testenv.VerifyNoLeaks(m)
}

// newRedis returns a go-redis client on addr, closed when the test ends. Its timeouts are short
// and honour ctx deadlines, as the package documentation advises.
func newRedis(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
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
func lockName(t testing.TB) string { return "test-" + testenv.Name(t) }

// key is the lock key of name under the default prefix.
func key(name string) string { return "txkit:lock:{" + name + "}" }

// history records holds and checks them: never two holders at once, tokens strictly increasing
// from one hold to the next.
type history struct {
	mu      sync.Mutex
	holding int
	last    lock.Token
	holds   int
	errs    []string
}

func (h *history) enter(tok lock.Token) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holding++
	h.holds++
	if h.holding > 1 {
		h.errs = append(h.errs, fmt.Sprintf("two holders at once (token %s)", tok))
	}
	if !h.last.Less(tok) {
		h.errs = append(h.errs, fmt.Sprintf("token %s does not follow %s", tok, h.last))
	}
	h.last = tok
}

func (h *history) exit() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holding--
}

func (h *history) check(t testing.TB, want int) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.errs {
		t.Error(e)
	}
	if h.holds != want {
		t.Errorf("history: %d holds, want %d", h.holds, want)
	}
}

// contend runs goroutines goroutines, each with its own Locker from newLocker, each making holds
// holds, recording them in h; it returns the first error.
func contend(ctx context.Context, goroutines, holds int, newLocker func() (lock.Locker, error), h *history) error {
	errc := make(chan error, goroutines)
	var wg sync.WaitGroup
	for range goroutines {
		l, err := newLocker()
		if err != nil {
			return err
		}
		wg.Go(func() {
			for range holds {
				lease, err := l.Lock(ctx)
				if err != nil {
					errc <- err
					return
				}
				h.enter(lease.Token())
				if lease.Err() != nil {
					errc <- fmt.Errorf("hold %s lost before its work: %w", lease.Token(), lease.Err())
				}
				h.exit()
				if err := l.Unlock(ctx); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
