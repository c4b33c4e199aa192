package redislock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/locktest"
	"github.com/txkit/txkit/lock/redislock"
)

// conformanceTTL is the TTL of the conformance runs: a killed holder keeps others out for at most
// this long.
const conformanceTTL = 2 * time.Second

// conformanceBackend builds the Redis backend called name — "redis" (one server) or "redlock"
// (independent servers) — on config, "<key prefix> <addr>,<addr>,...". Each Conn has go-redis
// clients and a Client (Redlock) of its own, as a process has. Worker processes build it through
// TestMain.
func conformanceBackend(name, config string) (locktest.Backend, error) {
	prefix, list, ok := strings.Cut(config, " ")
	if !ok {
		return locktest.Backend{}, fmt.Errorf("redis backend config %q: want \"<prefix> <addrs>\"", config)
	}
	addrs := strings.Split(list, ",")
	if name != "redis" && name != "redlock" {
		return locktest.Backend{}, fmt.Errorf("no Redis backend called %q", name)
	}
	return locktest.Backend{
		Name:                name,
		Config:              config,
		Expiry:              conformanceTTL,
		InspectorTokenAbove: name == "redlock", // see Redlock.Inspector
		ConnectVia: func(ctx context.Context, dial locktest.DialFunc) (*locktest.Conn, error) {
			var rdbs []redis.UniversalClient
			closeAll := func() {
				for _, r := range rdbs {
					_ = r.Close()
				}
			}
			for _, a := range addrs {
				rdbs = append(rdbs, redis.NewClient(&redis.Options{
					Addr:                  a,
					DialTimeout:           time.Second,
					ReadTimeout:           time.Second,
					WriteTimeout:          time.Second,
					ContextTimeoutEnabled: true,
					Dialer:                dial,
				}))
			}
			opts := []redislock.Option{redislock.WithTTL(conformanceTTL), redislock.WithPrefix(prefix)}
			if name == "redis" {
				c, err := redislock.New(rdbs[0], opts...)
				if err != nil {
					closeAll()
					return nil, err
				}
				return &locktest.Conn{
					Locker:    func(n string) (lock.Locker, error) { return c.NewMutex(n) },
					Elector:   func(n, id string) (lock.Elector, error) { return c.NewElector(n, id) },
					Inspector: c.Inspector(),
					Close: func() error {
						err := c.Close()
						closeAll()
						return err
					},
				}, nil
			}
			r, err := redislock.NewRedlock(rdbs, opts...)
			if err != nil {
				closeAll()
				return nil, err
			}
			return &locktest.Conn{
				Locker:    func(n string) (lock.Locker, error) { return r.NewMutex(n) },
				Elector:   func(n, id string) (lock.Elector, error) { return r.NewElector(n, id) },
				Inspector: r.Inspector(),
				Close: func() error {
					err := r.Close()
					closeAll()
					return err
				},
			}, nil
		},
	}, nil
}

// TestIntegrationConformance runs the lock conformance suite (package lock/locktest) against the
// Redis lock on one server and Redlock on three, each under a key prefix of its own.
func TestIntegrationConformance(t *testing.T) {
	for _, name := range []string{"redis", "redlock"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			addrs := []string{testenv.Redis(t)}
			if name == "redlock" {
				addrs = testenv.Redlock(t)
			}
			b, err := conformanceBackend(name, "test:"+testenv.Name(t)+": "+strings.Join(addrs, ","))
			if err != nil {
				t.Fatal(err)
			}
			locktest.Run(t, b)
		})
	}
}
