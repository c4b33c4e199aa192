package leader_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/pglock"
	"github.com/txkit/txkit/lock/redislock"
)

// electorOn returns a candidate called id in the election name on the lock backend kind, with
// connections of its own (as another process would have), closed when the test ends.
func electorOn(t *testing.T, kind, name, id string, db *testenv.Schema) lock.Elector {
	t.Helper()
	const ttl = 2 * time.Second
	switch kind {
	case "zk":
		return zkenv.Elector(t, testenv.ZKRoot(t)+"/"+name, id)
	case "pg":
		_, c := pgLockClient(t, db, ttl, "")
		el, err := c.NewElector(name, id)
		if err != nil {
			t.Fatal(err)
		}
		return el
	case "redis", "redlock":
		addrs := []string{testenv.Redis(t)}
		if kind == "redlock" {
			addrs = testenv.Redlock(t)
		}
		clients := make([]redis.UniversalClient, len(addrs))
		for i, a := range addrs {
			rc := redis.NewClient(&redis.Options{Addr: a})
			t.Cleanup(func() { _ = rc.Close() })
			clients[i] = rc
		}
		prefix := redislock.WithPrefix("txkit:test:" + db.Name + ":")
		var (
			el  lock.Elector
			err error
		)
		if kind == "redis" {
			var c *redislock.Client
			if c, err = redislock.New(clients[0], redislock.WithTTL(ttl), prefix); err == nil {
				t.Cleanup(func() { _ = c.Close() })
				el, err = c.NewElector(name, id)
			}
		} else {
			var r *redislock.Redlock
			if r, err = redislock.NewRedlock(clients, redislock.WithTTL(ttl), prefix); err == nil {
				t.Cleanup(func() { _ = r.Close() })
				el, err = r.NewElector(name, id)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		return el
	}
	t.Fatalf("unknown backend %q", kind)
	return nil
}

// migratedFence returns a fence on db's pool with its table created.
func migratedFence(t *testing.T, db *testenv.Schema) *fence.Fence {
	t.Helper()
	f, err := fence.New(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return f
}

// pgLockClient returns a PostgreSQL lease client (lock/pglock, TTL ttl) on a pool of its own (as
// another process would have) in db, both closed when the test ends. Its tables are in schema,
// migrated; schema "" is db's; a schema that does not exist is left so (its campaigns fail).
func pgLockClient(t *testing.T, db *testenv.Schema, ttl time.Duration, schema string) (*pgxpool.Pool, *pglock.Client) {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	opts := []pglock.Option{pglock.WithTTL(ttl)}
	if schema != "" {
		opts = append(opts, pglock.WithSchema(schema))
	}
	c, err := pglock.New(pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if schema == "" {
		if err := c.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	return pool, c
}

// TestIntegrationFencedOnEveryBackend: the leader job runs the same on every lock backend. Leader
// A takes the lead and writes through the fence; it steps down, B leads and writes; then A's late
// write, with the token of its term, is refused with lock.ErrFenced — on ZooKeeper, PostgreSQL
// lease rows, Redis and Redlock.
func TestIntegrationFencedOnEveryBackend(t *testing.T) {
	for _, kind := range []string{"zk", "pg", "redis", "redlock"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			db := testenv.PG(t)
			ctx := t.Context()
			f := migratedFence(t, db)
			const resource = "job"
			// term runs a leader job for candidate id and reports each term's token once its first
			// fenced write is done.
			term := func(id string) (tokens chan lock.Token, stop func()) {
				el := electorOn(t, kind, "leader", id, db)
				tokens = make(chan lock.Token, 4)
				job, err := leader.New(el, db.Pool, f, resource, func(ctx context.Context, tm *leader.Term) error {
					err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return f.Check(ctx, tx, resource, tm.Token()) })
					if err != nil {
						return err
					}
					tokens <- tm.Token()
					<-ctx.Done()
					return nil
				}, leader.WithPause(50*time.Millisecond), leader.WithLogger(testenv.Logger(t)))
				if err != nil {
					t.Fatal(err)
				}
				jctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- job.Run(jctx) }()
				var once bool
				stop = func() {
					if once {
						return
					}
					once = true
					cancel()
					if err := <-done; err != nil {
						t.Errorf("%s: Run: %v", id, err)
					}
				}
				t.Cleanup(stop)
				return tokens, stop
			}
			wait := func(who string, ch chan lock.Token) lock.Token {
				select {
				case tok := <-ch:
					return tok
				case <-time.After(30 * time.Second):
					t.Fatalf("%s did not lead within 30 s", who)
					return lock.Token{}
				}
			}
			aTokens, stopA := term("a")
			tokA := wait("a", aTokens)
			bTokens, _ := term("b")
			stopA() // A steps down: B takes over
			tokB := wait("b", bTokens)
			if !tokA.Less(tokB) {
				t.Fatalf("B's token %s is not above A's %s", tokB, tokA)
			}
			err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return f.Check(ctx, tx, resource, tokA) })
			if !errors.Is(err, lock.ErrFenced) {
				t.Fatalf("A's late write with token %s after B's %s: %v, want lock.ErrFenced", tokA, tokB, err)
			}
			t.Logf("%s: A led with %s, B with %s; A's late write refused: %v", kind, tokA, tokB, err)
		})
	}
}
