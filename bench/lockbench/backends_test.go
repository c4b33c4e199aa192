package lockbench_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/pglock"
	"github.com/txkit/txkit/lock/redislock"
	"github.com/txkit/txkit/lock/zklock"
)

// expiry is how long a dead holder blocks the next one on every backend: the ZooKeeper session
// timeout and the PostgreSQL and Redis lease TTL, the same for all so that their kill-to-next-holder
// times compare.
const expiry = 3 * time.Second

// kinds are the backends in the order the table lists them.
var kinds = []string{"zk", "zk-unfair", "pg", "pg-advisory", "redis", "redlock"}

// env is where a contender finds its servers: the variables `make up` writes, and the schema of
// the PostgreSQL backends (a URL whose search_path is the benchmark's own schema).
type env struct {
	zk      []string
	pgURL   string
	redis   string
	redlock []string
}

func envFromOS() env {
	return env{
		zk:      split(os.Getenv(testenv.EnvZK)),
		pgURL:   os.Getenv(envSchemaURL),
		redis:   os.Getenv(testenv.EnvRedis),
		redlock: split(os.Getenv(testenv.EnvRedlock)),
	}
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// contender is one holder-to-be with connections of its own, as a separate process would have,
// and the count of what it sent its server.
type contender struct {
	lock.Locker
	count *counter
	close func()
}

// counter counts a contender's round trips to its server and, of those, the ones that write.
type counter struct {
	rtt, writes atomic.Int64
	zk          *zklock.Session // ZooKeeper counts in the Session's Stats
}

// snapshot returns the counts so far; wakeups (watch notifications that woke a waiting Lock) only
// on ZooKeeper, whose Session counts them.
func (c *counter) snapshot() (rtt, writes, wakeups int64) {
	if c.zk != nil {
		st := c.zk.Stats()
		return st.Reads + st.Writes, st.Writes, st.WatchEvents
	}
	return c.rtt.Load(), c.writes.Load(), 0
}

// newContender builds a Locker on name for kind.
func newContender(ctx context.Context, e env, kind, name string) (*contender, error) {
	c := &counter{}
	switch kind {
	case "zk", "zk-unfair":
		s, err := zklock.NewSession(ctx, e.zk, zklock.WithSessionTimeout(expiry), zklock.WithDigestAuth(zkenv.Digest()))
		if err != nil {
			return nil, err
		}
		var opts []zklock.Option
		if kind == "zk-unfair" {
			opts = append(opts, zklock.WithUnfair())
		}
		m, err := zklock.NewMutex(s, "/txkit/lockbench/"+name, opts...)
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		c.zk = s
		return &contender{Locker: m, count: c, close: func() { _ = s.Close() }}, nil
	case "pg", "pg-advisory":
		cfg, err := pgxpool.ParseConfig(e.pgURL)
		if err != nil {
			return nil, err
		}
		cfg.MaxConns = 4
		cfg.ConnConfig.Tracer = pgCounter{c}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		cl, err := pglock.New(pool, pglock.WithTTL(expiry))
		if err != nil {
			pool.Close()
			return nil, err
		}
		closeAll := func() { _ = cl.Close(); pool.Close() }
		var l lock.Locker
		if kind == "pg" {
			l, err = cl.NewMutex(name)
		} else {
			l, err = cl.NewAdvisoryMutex(name)
		}
		if err != nil {
			closeAll()
			return nil, err
		}
		return &contender{Locker: l, count: c, close: closeAll}, nil
	case "redis", "redlock":
		addrs := []string{e.redis}
		if kind == "redlock" {
			addrs = e.redlock
		}
		clients := make([]redis.UniversalClient, len(addrs))
		for i, a := range addrs {
			rc := redis.NewClient(&redis.Options{Addr: a})
			rc.AddHook(redisCounter{c})
			clients[i] = rc
		}
		closeClients := func() {
			for _, rc := range clients {
				_ = rc.Close()
			}
		}
		prefix := redislock.WithPrefix("txkit:lockbench:")
		if kind == "redis" {
			cl, err := redislock.New(clients[0], redislock.WithTTL(expiry), prefix)
			if err != nil {
				closeClients()
				return nil, err
			}
			m, err := cl.NewMutex(name)
			if err != nil {
				_ = cl.Close()
				closeClients()
				return nil, err
			}
			return &contender{Locker: m, count: c, close: func() { _ = cl.Close(); closeClients() }}, nil
		}
		rl, err := redislock.NewRedlock(clients, redislock.WithTTL(expiry), prefix)
		if err != nil {
			closeClients()
			return nil, err
		}
		m, err := rl.NewMutex(name)
		if err != nil {
			_ = rl.Close()
			closeClients()
			return nil, err
		}
		return &contender{Locker: m, count: c, close: func() { _ = rl.Close(); closeClients() }}, nil
	}
	return nil, fmt.Errorf("lockbench: unknown backend %q", kind)
}

// pgCounter counts the statements a contender's pool sends: each statement, or each batch of
// them, is a round trip.
type pgCounter struct{ c *counter }

func (p pgCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	p.c.rtt.Add(1)
	if writes(data.SQL) {
		p.c.writes.Add(1)
	}
	return ctx
}

func (pgCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A batch is one round trip, whatever the statements in it.
func (p pgCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	p.c.rtt.Add(1)
	return ctx
}

func (p pgCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if writes(data.SQL) {
		p.c.writes.Add(1)
	}
}

func (pgCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// writes reports whether a statement can change rows or wake listeners.
func writes(sql string) bool {
	s := strings.ToLower(sql)
	for _, w := range []string{"insert ", "update ", "delete ", "pg_notify", "nextval", "pg_advisory_lock", "pg_advisory_unlock", "pg_try_advisory_lock"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// redisCounter counts the commands a contender's clients send: a pipeline is one round trip.
type redisCounter struct{ c *counter }

func (redisCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r redisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.c.rtt.Add(1)
		if redisWrite(cmd.Name()) {
			r.c.writes.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (r redisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.c.rtt.Add(1)
		for _, cmd := range cmds {
			if redisWrite(cmd.Name()) {
				r.c.writes.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// redisWrite reports whether a command can write: the lock's scripts and the plain writes.
func redisWrite(name string) bool {
	switch strings.ToLower(name) {
	case "eval", "evalsha", "set", "del", "pexpire", "publish", "incr":
		return true
	}
	return false
}
