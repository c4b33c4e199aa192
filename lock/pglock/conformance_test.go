package pglock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/locktest"
	"github.com/txkit/txkit/lock/pglock"
)

// conformanceTTL is the lease TTL of the conformance runs: a killed holder keeps others out for
// at most this long.
const conformanceTTL = 2 * time.Second

// conformanceBackend builds the PostgreSQL backend called name — "pglock-lease" (lease rows, with
// the Elector) or "pglock-advisory" (pg_advisory_lock; no Elector) — on config, the URL of a
// schema (its search_path) where the lock tables are made. Each Conn is a pool and a Client of its
// own, as a process has. Worker processes build it through TestMain.
func conformanceBackend(name, config string) (locktest.Backend, error) {
	if name != "pglock-lease" && name != "pglock-advisory" {
		return locktest.Backend{}, fmt.Errorf("no PostgreSQL backend called %q", name)
	}
	connect := func(ctx context.Context, dial locktest.DialFunc) (*locktest.Conn, error) {
		cfg, err := pgxpool.ParseConfig(config)
		if err != nil {
			return nil, err
		}
		if dial != nil {
			cfg.ConnConfig.DialFunc = pgconn.DialFunc(dial)
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		c, err := pglock.New(pool, pglock.WithTTL(conformanceTTL))
		if err == nil {
			err = c.Migrate(ctx)
		}
		if err != nil {
			if c != nil {
				_ = c.Close()
			}
			pool.Close()
			return nil, err
		}
		conn := &locktest.Conn{Close: func() error {
			err := c.Close()
			pool.Close()
			return err
		}}
		if name == "pglock-lease" {
			conn.Locker = func(n string) (lock.Locker, error) { return c.NewMutex(n) }
			conn.Elector = func(n, id string) (lock.Elector, error) { return c.NewElector(n, id) }
			conn.Inspector = c.Inspector()
		} else {
			conn.Locker = func(n string) (lock.Locker, error) { return c.NewAdvisoryMutex(n) }
		}
		return conn, nil
	}
	b := locktest.Backend{Name: name, Config: config, Expiry: conformanceTTL}
	if name == "pglock-lease" {
		b.ConnectVia = connect
	} else {
		// No ConnectVia: the suite's partition is made in the client process (it drops what
		// goes through the connection), while the sockets stay healthy and the kernel still
		// acknowledges the server's TCP keepalives, so the server, which releases a session lock
		// only when TCP declares the connection dead (see the package documentation), never
		// would. A partition of the session lock needs packets lost below TCP.
		b.Connect = func(ctx context.Context) (*locktest.Conn, error) { return connect(ctx, nil) }
	}
	return b, nil
}

// TestIntegrationConformance runs the lock conformance suite (package lock/locktest) against
// both PostgreSQL locks, each in a schema of its own.
func TestIntegrationConformance(t *testing.T) {
	for _, name := range []string{"pglock-lease", "pglock-advisory"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := conformanceBackend(name, testenv.PG(t).URL)
			if err != nil {
				t.Fatal(err)
			}
			locktest.Run(t, b)
		})
	}
}
