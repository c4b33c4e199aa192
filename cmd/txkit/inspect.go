package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/pglock"
	"github.com/txkit/txkit/lock/redislock"
	"github.com/txkit/txkit/lock/zklock"
)

// Backends of an -election or -lock target.
const (
	backendZK      = "zk"
	backendPG      = "pg"
	backendRedis   = "redis"
	backendRedlock = "redlock"
)

// target is one -election or -lock flag: name=WHERE, WHERE being
//
//	/zk/path                    a ZooKeeper lock path (zklock)
//	pg:[SCHEMA]/NAME            a PostgreSQL lease row (pglock) in SCHEMA (default: serve's -schema)
//	redis:HOST:PORT/NAME        a single-Redis lock (redislock)
//	redlock:HOST:PORT,.../NAME  a Redlock on those Redis servers
//
// NAME is the name the applications gave pglock's or redislock's NewMutex or NewElector; it may
// hold slashes (the first one after the prefix ends the schema or the addresses).
type target struct {
	name, path string // path: the lock path or name, as the admin API shows it
	backend    string
	where      string // the schema (pg) or the comma-separated addresses (redis, redlock)
}

// targetSyntax is what -election and -lock take, for their usage and errors.
const targetSyntax = "name=/zk/path, name=pg:[schema]/lock, name=redis:host:port/lock or name=redlock:host:port,.../lock"

// targets is the repeatable -election or -lock flag.
type targets []target

func (n *targets) String() string {
	var s []string
	for _, x := range *n {
		s = append(s, x.name+"="+x.spec())
	}
	return strings.Join(s, ",")
}

func (n *targets) Set(v string) error {
	name, where, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("%q: want %s", v, targetSyntax)
	}
	t, err := parseTarget(where)
	if err != nil {
		return fmt.Errorf("%q: %w", v, err)
	}
	t.name = name
	*n = append(*n, t)
	return nil
}

func parseTarget(where string) (target, error) {
	if strings.HasPrefix(where, "/") {
		return target{path: where, backend: backendZK}, nil
	}
	backend, rest, ok := strings.Cut(where, ":")
	if !ok || (backend != backendPG && backend != backendRedis && backend != backendRedlock) {
		return target{}, fmt.Errorf("want %s", targetSyntax)
	}
	at, name, ok := strings.Cut(rest, "/")
	switch {
	case !ok || name == "":
		return target{}, fmt.Errorf("want %s:%s/lock: no lock name after the /", backend, map[bool]string{true: "[schema]", false: "host:port"}[backend == backendPG])
	case backend != backendPG && at == "":
		return target{}, fmt.Errorf("want %s:host:port/lock: no address", backend)
	case backend == backendRedis && strings.Contains(at, ","):
		return target{}, fmt.Errorf("redis: takes one address; several independent servers are redlock:")
	}
	return target{path: name, backend: backend, where: at}, nil
}

// spec is the target as given, after name=.
func (t target) spec() string {
	if t.backend == backendZK {
		return t.path
	}
	return t.backend + ":" + t.where + "/" + t.path
}

// uses reports whether any of ts is on backend.
func uses(backend string, ts ...targets) bool {
	for _, l := range ts {
		for _, t := range l {
			if t.backend == backend {
				return true
			}
		}
	}
	return false
}

// inspectors opens what reads the elections and locks of -election and -lock: one ZooKeeper
// session, a pglock client per schema on pool, a redislock client or Redlock per address list.
// closeAll closes them.
type inspectors struct {
	ctx    context.Context
	log    *slog.Logger
	pool   *pgxpool.Pool
	schema string // serve's -schema, pg:/NAME's
	zk     func(ctx context.Context) (*zklock.Session, error)

	byKey   map[string]lock.Inspector
	closers []func()
}

func (in *inspectors) closeAll() {
	for i := len(in.closers) - 1; i >= 0; i-- {
		in.closers[i]()
	}
}

// of returns the Inspector of t's backend and place, opening it on first use.
func (in *inspectors) of(t target) (lock.Inspector, error) {
	where := t.where
	if t.backend == backendPG && where == "" {
		where = in.schema
	}
	key := t.backend + ":" + where
	if i, ok := in.byKey[key]; ok {
		return i, nil
	}
	var i lock.Inspector
	switch t.backend {
	case backendZK:
		sctx, cancel := context.WithTimeout(in.ctx, 20*time.Second)
		sess, err := in.zk(sctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("connect to ZooKeeper: %w", err)
		}
		in.closers = append(in.closers, func() { _ = sess.Close() })
		i = sess.Inspector()
	case backendPG:
		var opts []pglock.Option
		if where != "" {
			opts = append(opts, pglock.WithSchema(where))
		}
		c, err := pglock.New(in.pool, append(opts, pglock.WithLogger(in.log))...)
		if err != nil {
			return nil, usageErr("serve: %s: %v", t.spec(), err)
		}
		in.closers = append(in.closers, func() { _ = c.Close() })
		i = c.Inspector()
	case backendRedis, backendRedlock:
		var clients []redis.UniversalClient
		for _, addr := range strings.Split(where, ",") {
			rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialTimeout: 3 * time.Second})
			in.closers = append(in.closers, func() { _ = rdb.Close() })
			clients = append(clients, rdb)
		}
		if t.backend == backendRedis {
			c, err := redislock.New(clients[0], redislock.WithLogger(in.log))
			if err != nil {
				return nil, usageErr("serve: %s: %v", t.spec(), err)
			}
			in.closers = append(in.closers, func() { _ = c.Close() })
			i = c.Inspector()
		} else {
			r, err := redislock.NewRedlock(clients, redislock.WithLogger(in.log))
			if err != nil {
				return nil, usageErr("serve: %s: %v", t.spec(), err)
			}
			in.closers = append(in.closers, func() { _ = r.Close() })
			i = r.Inspector()
		}
	}
	in.byKey[key] = i
	return i, nil
}

// inspected returns the admin option that shows elections and locks, with the inspectors it
// opened (the caller closes them, also on error).
func (in *inspectors) inspected(elections, locks targets) (admin.Option, error) {
	var els []admin.Election
	for _, t := range elections {
		i, err := in.of(t)
		if err != nil {
			return nil, err
		}
		els = append(els, admin.Election{Name: t.name, Path: t.spec(), Inspector: pathOf(i, t)})
	}
	var ls []admin.Lock
	for _, t := range locks {
		i, err := in.of(t)
		if err != nil {
			return nil, err
		}
		ls = append(ls, admin.Lock{Name: t.name, Path: t.spec(), Inspector: pathOf(i, t)})
	}
	return admin.WithInspected(els, ls), nil
}

// pathOf reads t's lock (t.path) whatever path admin asks for: admin shows t's whole spec as the
// path (pg:shop/txkit/tcc), which names the backend as well as the lock.
func pathOf(i lock.Inspector, t target) lock.Inspector {
	if t.backend == backendZK {
		return i // the spec is the path
	}
	return fixedPath{i, t.path}
}

type fixedPath struct {
	lock.Inspector
	path string
}

func (f fixedPath) Contenders(ctx context.Context, _ string) ([]lock.Contender, bool, error) {
	return f.Inspector.Contenders(ctx, f.path)
}
