package pglock

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/lock"
)

// AdvisoryKey returns the 64-bit key of the PostgreSQL advisory lock an [AdvisoryMutex] on name
// takes: FNV-1a of "txkit/lock/pglock:" followed by name, as a bigint. Advisory locks belong to
// the database, not to a schema, so two names (or another application's key) that hash alike
// exclude each other; with 64 bits that takes about 4 billion names for a one-in-two chance.
// pg_locks shows it as classid (high 32 bits) and objid (low 32 bits) with objsubid 1.
func AdvisoryKey(name string) int64 { return pgutil.MigrateLockKey("txkit/lock/pglock:" + name) }

// keepaliveSQL sets, for the session that holds an advisory lock, how soon the server gives up on
// a connection that went silent (and so ends the session and releases the lock): TCP keepalive
// probes after $1 idle seconds, every second, twice; unacknowledged data for at most $2 ms. They
// apply to TCP connections only (a Unix socket ignores them). keepaliveReset puts the session's
// defaults back before the connection returns to the pool. It also returns the backend's process
// id: one that is not the connection's own means a pooler in between (pgutil.Pooled).
const (
	keepaliveSQL = `select set_config('tcp_keepalives_idle', $1, false), set_config('tcp_keepalives_interval', '1', false),` +
		` set_config('tcp_keepalives_count', '2', false), set_config('tcp_user_timeout', $2, false), pg_backend_pid()`
	keepaliveReset = `select set_config(name, reset_val, false) from pg_settings` +
		` where name in ('tcp_keepalives_idle', 'tcp_keepalives_interval', 'tcp_keepalives_count', 'tcp_user_timeout')`
)

// keepalive returns the settings of keepaliveSQL for a check interval: the server gives up on a
// silent connection no sooner than 3 intervals + 1 s after the last packet it got (whole seconds),
// while the holder, which pings every interval with a timeout of one interval, gives up within 2.
func keepalive(check time.Duration) (idle, userTimeout string) {
	secs := int64((3*check + time.Second + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(1, secs-2), 10), strconv.FormatInt(secs*1000, 10)
}

// AdvisoryMutex is a session lock on one name: pg_advisory_lock on [AdvisoryKey](name), held by
// one pool connection for as long as the hold lasts. It is the simplest form, with the limits
// docs/lock.md lists: the hold is lost with its connection (checked every third of the TTL), it
// is refused behind a connection pooler ([ErrPooled]), waiters get no order, and every hold keeps
// a pool connection busy.
//
// An AdvisoryMutex value is reentrant like a [Mutex] (holds counted on the one connection). It is
// safe for concurrent use by multiple goroutines (they share its hold).
type AdvisoryMutex struct {
	c    *Client
	name string
	key  int64
	r    *lock.Reentrant
}

// NewAdvisoryMutex returns an AdvisoryMutex on name (at most [MaxNameLen] bytes of valid UTF-8,
// without NUL). It does not touch the database. Bad input returns an error wrapping
// [lock.ErrInvalidOption].
func (c *Client) NewAdvisoryMutex(name string) (*AdvisoryMutex, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	return &AdvisoryMutex{c: c, name: name, key: AdvisoryKey(name), r: lock.NewReentrant(name)}, nil
}

// Name returns the lock's name.
func (m *AdvisoryMutex) Name() string { return m.name }

// Lock blocks until the lock is held or ctx ends, and returns the Lease of the hold. It takes a
// pool connection and waits in pg_advisory_lock; when ctx ends, the wait is cancelled on the
// server (a cancel request) and, if the lock was granted meanwhile, it is unlocked before the
// connection goes back to the pool: nothing is left behind, and ctx's error is returned. ctx
// scopes only the wait: the hold lasts until Unlock, or until its connection is lost.
func (m *AdvisoryMutex) Lock(ctx context.Context) (lock.Lease, error) {
	return m.r.Lock(ctx, take(m.take, true))
}

// TryLock takes the lock if it is free (pg_try_advisory_lock) and returns at once: an error
// wrapping [lock.ErrLocked] when another session holds it. ctx bounds the round trips.
func (m *AdvisoryMutex) TryLock(ctx context.Context) (lock.Lease, error) {
	return m.r.Lock(ctx, take(m.take, false))
}

// Unlock releases one hold; the last one runs pg_advisory_unlock and gives the connection back to
// the pool. Unlock of an AdvisoryMutex that holds nothing returns nil. A hold whose connection was
// lost has nothing to unlock: the server released it with the session.
func (m *AdvisoryMutex) Unlock(ctx context.Context) error { return unlock(ctx, m.r) }

func (m *AdvisoryMutex) take(ctx context.Context, wait bool) (held, error) {
	c, name := m.c, m.name
	if c.ctx.Err() != nil {
		return nil, c.errClosed(name)
	}
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("pglock: advisory lock %s: %w", name, err)
	}
	var set [4]string
	var pid uint32
	if err := conn.QueryRow(ctx, keepaliveSQL, c.keepIdle, c.userTimeout).Scan(&set[0], &set[1], &set[2], &set[3], &pid); err != nil {
		m.giveBack(ctx, conn)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("pglock: advisory lock %s: keepalive settings: %w", name, err)
	}
	if pgutil.Pooled(conn.Conn().PgConn().PID(), pid) {
		conn.Release()
		return nil, fmt.Errorf("pglock: advisory lock %s: %w", name, ErrPooled)
	}
	ok, err := m.acquire(ctx, conn, wait)
	if err != nil && c.ctx.Err() != nil && ctx.Err() == nil {
		m.giveBack(ctx, conn)
		return nil, c.errClosed(name)
	}
	if err == nil && !ok {
		conn.Release()
		return nil, fmt.Errorf("pglock: advisory lock %s: %w", name, lock.ErrLocked)
	}
	var tok int64
	if err == nil {
		err = conn.QueryRow(ctx, `select nextval(`+c.seqLit+`)`).Scan(&tok)
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err() // granted as ctx ended: give it back
	}
	if err != nil {
		m.giveBack(ctx, conn)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("pglock: advisory lock %s: %w", name, err)
	}
	l := &advisoryLease{hold: newHold(name, lock.Token{Seq: tok}, c.log), m: m, conn: conn}
	if !c.goOwned(l.check) {
		m.giveBack(ctx, conn)
		return nil, c.errClosed(name)
	}
	return l, nil
}

// acquire runs pg_advisory_lock (wait; stopped as [Client.waitOn] says, a connection closed that
// way ends its session and the lock) or pg_try_advisory_lock on conn.
func (m *AdvisoryMutex) acquire(ctx context.Context, conn *pgxpool.Conn, wait bool) (bool, error) {
	if !wait {
		var ok bool
		err := conn.QueryRow(ctx, `select pg_try_advisory_lock($1)`, m.key).Scan(&ok)
		return ok, err
	}
	err := m.c.waitOn(ctx, conn.Conn().PgConn(), func(qctx context.Context) error {
		_, err := conn.Exec(qctx, `select pg_advisory_lock($1)`, m.key)
		return err
	})
	return err == nil, err
}

// giveBack closes conn, which ends its session and every lock it holds or waits for (and makes
// a cancel request still on its way harmless), and releases it to the pool, which drops it. It
// serves the paths where the lock's state on conn is unknown: a failed or cancelled acquisition,
// Close.
func (m *AdvisoryMutex) giveBack(ctx context.Context, conn *pgxpool.Conn) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = conn.Conn().Close(cctx)
	conn.Release()
}

// advisoryLease is one hold of an [AdvisoryMutex]: the connection whose session holds the lock.
type advisoryLease struct {
	*hold
	m *AdvisoryMutex

	mu   sync.Mutex
	conn *pgxpool.Conn // used by check until it returns, then by unlock; nil once given back
}

func (l *advisoryLease) base() *hold { return l.hold }

// takeConn returns the held connection, or nil when it was given back already; the caller gives
// it back.
func (l *advisoryLease) takeConn() *pgxpool.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	conn := l.conn
	l.conn = nil
	return conn
}

func (l *advisoryLease) unlock(ctx context.Context) error {
	<-l.stopped // check no longer uses the connection
	conn := l.takeConn()
	if conn == nil {
		return nil // lost, or the Client closed: the connection went back with the lock
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue(`select pg_advisory_unlock($1)`, l.m.key)
	b.Queue(keepaliveReset)
	br := conn.SendBatch(ctx, b)
	var ok bool
	err := br.QueryRow().Scan(&ok)
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = conn.Conn().Close(ctx) // its session ends, and the lock with it
		return fmt.Errorf("pglock: advisory unlock %s: %w", l.name, err)
	}
	if !ok {
		return fmt.Errorf("pglock: advisory unlock %s: the session did not hold the lock: %w", l.name, lock.ErrNotHeld)
	}
	return nil
}

// check pings the held connection every renew interval until the hold is released; a failed ping
// (the connection or its session is gone) ends the hold.
func (l *advisoryLease) check() {
	defer close(l.stopped)
	c := l.m.c
	for {
		t := time.NewTimer(c.o.renew)
		select {
		case <-l.released:
			t.Stop()
			return
		case <-c.ctx.Done():
			t.Stop()
			l.end(fmt.Errorf("%w: %s: %w", lock.ErrLockLost, l.name, lock.ErrClosed))
			l.m.giveBack(context.Background(), l.takeConn())
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.o.renew)
		_, err := l.conn.Exec(ctx, `select 1`)
		cancel()
		if err != nil {
			if c.ctx.Err() != nil {
				continue // Close: the select above ends the hold
			}
			l.end(fmt.Errorf("%w: %s: the connection holding the advisory lock failed: %w", lock.ErrLockLost, l.name, err))
			conn := l.takeConn()
			_ = conn.Conn().Close(context.Background()) // make sure its session, and the lock, are gone
			conn.Release()
			return
		}
	}
}

var _ lock.Locker = (*AdvisoryMutex)(nil)
