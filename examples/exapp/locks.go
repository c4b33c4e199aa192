package exapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/pglock"
	"github.com/txkit/txkit/lock/redislock"
	"github.com/txkit/txkit/lock/zklock"
)

// The environment variables [OpenLocks] reads its servers from (deploy/local/env prints them).
const (
	EnvZK      = "TXKIT_ZK"      // ZooKeeper servers, comma-separated (zk, zk-unfair)
	EnvZKAuth  = "TXKIT_ZK_AUTH" // ZooKeeper digest user, "user:password" (zk, zk-unfair; see [ZKAuth])
	EnvPG      = "TXKIT_PG_URL"  // PostgreSQL URL (pg)
	EnvRedis   = "TXKIT_REDIS"   // one Redis address (redis)
	EnvRedlock = "TXKIT_REDLOCK" // independent Redis addresses, comma-separated (redlock)
	// Sentinel addresses, comma-separated, and the name of the primary they watch (redis-sentinel)
	EnvRedisSentinels      = "TXKIT_REDIS_SENTINELS"
	EnvRedisSentinelMaster = "TXKIT_REDIS_SENTINEL_MASTER"
)

// LockKinds returns the lock backends [OpenLocks] knows, in the order the examples run them.
func LockKinds() []string {
	return []string{"zk", "zk-unfair", "pg", "redis", "redlock", "redis-sentinel"}
}

// LocksOption configures [OpenLocks].
type LocksOption func(*locksOptions)

type locksOptions struct {
	ttl      time.Duration
	pgSchema string
	pgConns  int
	zkRoot   string
	reg      prometheus.Registerer
}

func defaultLocksOptions() locksOptions {
	return locksOptions{ttl: 2 * time.Second, pgSchema: "txkit_locks", pgConns: 16, zkRoot: "/txkit"}
}

// WithLockTTL sets how long a dead holder keeps its locks (default 2 s): the ZooKeeper session
// timeout, or the lease TTL of PostgreSQL, Redis and Redlock.
func WithLockTTL(d time.Duration) LocksOption { return func(o *locksOptions) { o.ttl = d } }

// WithLockSchema sets the PostgreSQL schema of the pg backend's tables (default "txkit_locks",
// created if missing in the database of TXKIT_PG_URL).
func WithLockSchema(name string) LocksOption { return func(o *locksOptions) { o.pgSchema = name } }

// WithZKRoot sets the ZooKeeper path the zk and zk-unfair backends put their locks under (default
// "/txkit"): an absolute path such as /txkit-test/run-1, without a trailing slash. A test gives
// each run a root of its own and deletes it at the end ([Locks.DeleteTree] on "", or the test's
// own clean-up). The other backends ignore it.
func WithZKRoot(path string) LocksOption { return func(o *locksOptions) { o.zkRoot = path } }

// WithLocksRegisterer registers the metrics of the Locks' lockers and electors on reg (default:
// none): each [Locks.Locker] is wrapped by [lock.Instrument] (txkit_lock_acquisitions_total,
// txkit_lock_wait_seconds and txkit_lock_session_losses_total, labelled with the backend:
// zookeeper, postgres, redis or redlock), and each [Locks.Elector] gets
// [lock.WithElectionRegisterer] (txkit_lock_is_leader and txkit_lock_leadership_changes_total,
// labelled with the election's name).
func WithLocksRegisterer(reg prometheus.Registerer) LocksOption {
	return func(o *locksOptions) { o.reg = reg }
}

// Locks is one process's connection to a lock backend, chosen by name, from which an example
// takes its [lock.Locker]s and [lock.Elector]s. A lock name is a slash-separated relative name
// such as "stock/sku-1"; ZooKeeper locks it at /txkit/stock/sku-1 (under the root of
// [WithZKRoot]), the other backends under the
// name txkit/stock/sku-1 (PostgreSQL's lease row in the txkit_locks schema; Redis's key
// txkit:lock:{txkit/stock/sku-1}). Locks is safe for concurrent use by multiple goroutines.
type Locks struct {
	kind  string
	log   *slog.Logger
	zk    *zklock.Session // zk and zk-unfair only
	root  string          // the ZooKeeper root
	close []func() error  // in reverse order of opening
	newMu func(name string) (lock.Locker, error)
	newEl func(name, id string, opts ...lock.ElectionOption) (lock.Elector, error)
	reg   prometheus.Registerer // WithLocksRegisterer's
}

// OpenLocks connects to the backend kind — zk (ZooKeeper's fair, Curator-compatible lock),
// zk-unfair (its one-node recipe), pg (PostgreSQL lease rows), redis (one Redis node), redlock
// (Redlock over independent Redis nodes) or redis-sentinel (the primary of a Sentinel group,
// through go-redis's failover client) — with the servers named by the TXKIT_* variables
// ([EnvZK], [EnvPG], [EnvRedis], [EnvRedlock], [EnvRedisSentinels] and [EnvRedisSentinelMaster]). It blocks until the backend answers or ctx ends; ctx
// scopes only the connection. Another kind, or an unset variable, is an error saying which. Close
// the Locks when done.
func OpenLocks(ctx context.Context, kind string, log *slog.Logger, opts ...LocksOption) (*Locks, error) {
	o := defaultLocksOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if o.ttl <= 0 {
		return nil, fmt.Errorf("locks: ttl %v: want > 0: %w", o.ttl, lock.ErrInvalidOption)
	}
	if !strings.HasPrefix(o.zkRoot, "/") || validName(strings.TrimPrefix(o.zkRoot, "/")) != nil {
		return nil, fmt.Errorf("locks: zk root %q: want an absolute path such as /txkit: %w", o.zkRoot, lock.ErrInvalidOption)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Locks{kind: kind, log: log, root: o.zkRoot, reg: o.reg}
	var err error
	switch kind {
	case "zk", "zk-unfair":
		err = l.openZK(ctx, kind == "zk-unfair", o)
	case "pg":
		err = l.openPG(ctx, o)
	case "redis":
		err = l.openRedis(ctx, o)
	case "redlock":
		err = l.openRedlock(ctx, o)
	case "redis-sentinel":
		err = l.openRedisSentinel(ctx, o)
	default:
		return nil, fmt.Errorf("locks: unknown lock backend %q: want one of %s: %w", kind,
			strings.Join(LockKinds(), ", "), lock.ErrInvalidOption)
	}
	if err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("locks: open %s: %w", kind, err)
	}
	return l, nil
}

// Kind returns the backend's name as given to [OpenLocks].
func (l *Locks) Kind() string { return l.kind }

// Locker returns a new lock on name (see [Locks] for names). It does not touch the server. Each
// value is reentrant, so goroutines that must exclude each other need one each; a value may be
// used again after its Unlock.
func (l *Locks) Locker(name string) (lock.Locker, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	m, err := l.newMu(name)
	if err != nil || l.reg == nil {
		return m, err
	}
	return lock.Instrument(m, metricsBackend(l.kind), l.reg)
}

// metricsBackend is the backend label of kind's lock metrics.
func metricsBackend(kind string) string {
	switch kind {
	case "zk", "zk-unfair":
		return "zookeeper"
	case "pg":
		return "postgres"
	}
	if kind == "redis-sentinel" {
		return "redis"
	}
	return kind // redis, redlock
}

// Elector returns a candidate with the given id in the election name (see [Locks] for names).
func (l *Locks) Elector(name, id string) (lock.Elector, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if l.reg == nil {
		return l.newEl(name, id)
	}
	return l.newEl(name, id, lock.WithElectionRegisterer(l.reg))
}

// DeleteTree deletes the ZooKeeper nodes of the lock or election name and of every name below it
// (name "" deletes the whole root, see [WithZKRoot]): a run's clean-up, once nobody uses those
// locks any more (a node created meanwhile makes it fail). A missing node is not an error. It
// blocks for a ZooKeeper round trip per node, and stops with ctx's error when ctx ends. On the
// other backends it does nothing: their rows and keys go when the locks are released or expire.
func (l *Locks) DeleteTree(ctx context.Context, name string) error {
	if l.zk == nil {
		return nil
	}
	p := l.root
	if name != "" {
		if err := validName(name); err != nil {
			return err
		}
		p += "/" + name
	}
	if err := deleteTree(ctx, l.zk.Conn(), p); err != nil {
		return fmt.Errorf("locks: delete %s: %w", p, err)
	}
	return nil
}

// deleteTree deletes p after its children, depth first.
func deleteTree(ctx context.Context, conn *zk.Conn, p string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	kids, _, err := conn.Children(p)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return nil
	case err != nil:
		return err
	}
	for _, k := range kids {
		if err := deleteTree(ctx, conn, p+"/"+k); err != nil {
			return err
		}
	}
	if err := conn.Delete(p, -1); !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	return nil
}

// Close releases the backend's connections (every hold through them ends). Calling it again does
// nothing.
func (l *Locks) Close() error {
	var errs []error
	for i := len(l.close) - 1; i >= 0; i-- {
		errs = append(errs, l.close[i]())
	}
	l.close = nil
	return errors.Join(errs...)
}

func validName(name string) error {
	if name == "" || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.Contains(name, "//") {
		return fmt.Errorf("locks: lock name %q: want a relative name such as stock/sku-1: %w", name, lock.ErrInvalidOption)
	}
	return nil
}

// servers returns the comma-separated list in the environment variable name.
func servers(name string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(Env(name, ""), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s is not set: start the servers with `make up` and export what deploy/local/env prints: %w",
			name, lock.ErrInvalidOption)
	}
	return out, nil
}

// ZKAuth returns the option that makes a zklock.Session authenticate as the ZooKeeper digest user
// of [EnvZKAuth] ("user:password", as deploy/local/env prints it), so that the nodes it creates
// are that user's only; an error naming the variable when it is unset. The password is read from
// the environment, not a flag, which every local user could read in the process list.
func ZKAuth() (zklock.SessionOption, error) {
	v := os.Getenv(EnvZKAuth)
	if v == "" {
		return nil, fmt.Errorf("%s is not set: ZooKeeper needs credentials (export what deploy/local/env prints): %w: %w",
			EnvZKAuth, zklock.ErrNoCredentials, lock.ErrInvalidOption)
	}
	user, password, _ := strings.Cut(v, ":")
	return zklock.WithDigestAuth(user, password), nil
}

func (l *Locks) openZK(ctx context.Context, unfair bool, o locksOptions) error {
	srv, err := servers(EnvZK)
	if err != nil {
		return err
	}
	auth, err := ZKAuth()
	if err != nil {
		return err
	}
	s, err := zklock.NewSession(ctx, srv, zklock.WithSessionTimeout(o.ttl), zklock.WithLogger(l.log), auth)
	if err != nil {
		return err
	}
	l.close = append(l.close, s.Close)
	l.zk = s
	var mopts []zklock.Option
	if unfair {
		mopts = append(mopts, zklock.WithUnfair())
	}
	l.newMu = func(name string) (lock.Locker, error) { return zklock.NewMutex(s, o.zkRoot+"/"+name, mopts...) }
	l.newEl = func(name, id string, opts ...lock.ElectionOption) (lock.Elector, error) {
		return zklock.NewElector(s, o.zkRoot+"/"+name, id, opts...)
	}
	return nil
}

// pgDatabase returns the database named in a PostgreSQL URL.
func pgDatabase(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%s: %w", EnvPG, err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" {
		return "", fmt.Errorf("%s names no database: %w", EnvPG, lock.ErrInvalidOption)
	}
	return db, nil
}

func (l *Locks) openPG(ctx context.Context, o locksOptions) error {
	base := Env(EnvPG, "")
	if base == "" {
		return fmt.Errorf("%s is not set: start the servers with `make up` and export what deploy/local/env prints: %w",
			EnvPG, lock.ErrInvalidOption)
	}
	db, err := pgDatabase(base)
	if err != nil {
		return err
	}
	pool, err := Pool(ctx, base, db, o.pgSchema, o.pgConns)
	if err != nil {
		return err
	}
	l.close = append(l.close, func() error { pool.Close(); return nil })
	c, err := pglock.New(pool, pglock.WithSchema(o.pgSchema), pglock.WithTTL(o.ttl), pglock.WithLogger(l.log))
	if err != nil {
		return err
	}
	l.close = append(l.close, c.Close)
	if err := c.Migrate(ctx); err != nil {
		return err
	}
	l.newMu = func(name string) (lock.Locker, error) { return c.NewMutex("txkit/" + name) }
	l.newEl = func(name, id string, opts ...lock.ElectionOption) (lock.Elector, error) {
		return c.NewElector("txkit/"+name, id, opts...)
	}
	return nil
}

// redisClient opens a go-redis client on addr and checks that the server answers.
func (l *Locks) redisClient(ctx context.Context, addr string) (*redis.Client, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	l.close = append(l.close, rdb.Close)
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis %s: %w", addr, err)
	}
	return rdb, nil
}

func (l *Locks) openRedis(ctx context.Context, o locksOptions) error {
	addrs, err := servers(EnvRedis)
	if err != nil {
		return err
	}
	rdb, err := l.redisClient(ctx, addrs[0])
	if err != nil {
		return err
	}
	return l.useRedis(rdb, o)
}

func (l *Locks) openRedlock(ctx context.Context, o locksOptions) error {
	addrs, err := servers(EnvRedlock)
	if err != nil {
		return err
	}
	clients := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		rdb, err := l.redisClient(ctx, a)
		if err != nil {
			return err
		}
		clients[i] = rdb
	}
	r, err := redislock.NewRedlock(clients, redislock.WithTTL(o.ttl), redislock.WithLogger(l.log))
	if err != nil {
		return err
	}
	l.close = append(l.close, r.Close)
	l.newMu = func(name string) (lock.Locker, error) { return r.NewMutex("txkit/" + name) }
	l.newEl = func(name, id string, opts ...lock.ElectionOption) (lock.Elector, error) {
		return r.NewElector("txkit/"+name, id, opts...)
	}
	return nil
}

// openRedisSentinel opens redislock on the primary the Sentinels of EnvRedisSentinels name for
// EnvRedisSentinelMaster: go-redis's failover client asks them, and follows a promotion.
func (l *Locks) openRedisSentinel(ctx context.Context, o locksOptions) error {
	sentinels, err := servers(EnvRedisSentinels)
	if err != nil {
		return err
	}
	master := Env(EnvRedisSentinelMaster, "")
	if master == "" {
		return fmt.Errorf("%s is not set: start the servers with `make up` and export what deploy/local/env prints: %w",
			EnvRedisSentinelMaster, lock.ErrInvalidOption)
	}
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: sentinels, ContextTimeoutEnabled: true})
	l.close = append(l.close, rdb.Close)
	// During a failover the Sentinels still name the dead primary for a few seconds (down-after,
	// then the vote): a service started then retries instead of failing (30 s at most).
	for deadline := time.Now().Add(30 * time.Second); ; {
		err := rdb.Ping(ctx).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis sentinel %s: %w", master, err)
		}
		if err := Pause(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
	return l.useRedis(rdb, o)
}

// useRedis takes the Locks' lockers and electors from redislock on rdb.
func (l *Locks) useRedis(rdb redis.UniversalClient, o locksOptions) error {
	c, err := redislock.New(rdb, redislock.WithTTL(o.ttl), redislock.WithLogger(l.log))
	if err != nil {
		return err
	}
	l.close = append(l.close, c.Close)
	l.newMu = func(name string) (lock.Locker, error) { return c.NewMutex("txkit/" + name) }
	l.newEl = func(name, id string, opts ...lock.ElectionOption) (lock.Elector, error) {
		return c.NewElector("txkit/"+name, id, opts...)
	}
	return nil
}
