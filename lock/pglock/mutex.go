package pglock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/lock"
)

// Mutex is a lease lock on one name: a row in the Client's table, held while its holder renews it
// (see docs/lock.md for the recipe, the clock assumptions and the order waiters get).
//
// The lock can be lost at any time, whatever the code holding it believes: when renewals fail
// until the holder's deadline (PostgreSQL down, connection cut, the process paused), or when the
// row is found taken. The holder is told ([lock.Lease.Done], [lock.Lease.Context]) before
// PostgreSQL can let another holder in. Work done under the lock must run under Context and every
// write it makes elsewhere must carry [lock.Lease.Token] to a fence (package fence).
//
// A Mutex value is reentrant: Lock or TryLock on a Mutex that already holds the lock returns the
// same Lease and counts the hold; each needs its Unlock, and the last Unlock releases. Goroutines
// that must exclude each other need a Mutex value each. After a hold is lost, Lock returns an
// error until the lost hold is released with Unlock. Mutex is safe for concurrent use by multiple
// goroutines (they share its hold).
type Mutex struct {
	c     *Client
	name  string
	data  string
	r     *lock.Reentrant
	doKey int64 // the advisory lock Do's transactions queue on (see the Client's doTake)
}

// NewMutex returns a lease Mutex on name (at most [MaxNameLen] bytes of valid UTF-8, without
// NUL). It does not touch the database. Bad input returns an error wrapping [lock.ErrInvalidOption].
func (c *Client) NewMutex(name string, opts ...MutexOption) (*Mutex, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	var o mutexOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.data != "" {
		if err := pgutil.CheckText(o.data, MaxNameLen); err != nil {
			return nil, fmt.Errorf("pglock: lock %s: data %q: %w: %w", name, o.data, err, lock.ErrInvalidOption)
		}
	}
	return &Mutex{c: c, name: name, data: o.data, r: lock.NewReentrant(name),
		doKey: pgutil.MigrateLockKey("txkit/lock/pglock/do:" + c.table + "\x00" + name)}, nil
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.name }

// Lock blocks until the lock is held or ctx ends, and returns the Lease of the hold. While it
// waits, it tries again when the holder's release is notified (LISTEN/NOTIFY; a hold of this
// Client wakes its waiters itself, and they do not try while it lasts), when the holder's row
// expires, and at the fallback interval (1 s); behind a [Mutex.Do] it waits in PostgreSQL for the
// end of Do's transaction. If ctx ends first, ctx's error is returned and nothing is left behind:
// an attempt already sent is waited for (one round trip; one waiting behind a Do is stopped, its
// transaction rolled back) and, if it took the row, the row is freed with a fresh, bounded context. A failed statement
// gets the same clean-up (if the connection failed while the server may still commit the attempt,
// such a row expires at its TTL), and Lock goes on trying while PostgreSQL cannot be reached — a
// restart, a cut connection — pausing 50 ms, doubling up to 1 s, and logging the outage once; a
// closed Client returns an error wrapping [lock.ErrClosed]. ctx scopes only the wait: the hold lasts until Unlock, or until it is lost.
func (m *Mutex) Lock(ctx context.Context) (lock.Lease, error) {
	return m.r.Lock(ctx, take(m.take, true))
}

// TryLock takes the lock if it is free (or its holder's row has expired) in one round trip, and
// returns at once: an error wrapping [lock.ErrLocked] when another owner holds it. ctx bounds the
// wait for a pool connection; once sent, the attempt is awaited (see Lock), and if ctx has ended
// by then, a row it took is freed and ctx's error returned: nothing is left behind.
func (m *Mutex) TryLock(ctx context.Context) (lock.Lease, error) {
	return m.r.Lock(ctx, take(m.take, false))
}

// Unlock releases one hold; the last one frees the row (only this hold's row, never a newer
// holder's) and notifies the waiters, in one statement and one commit. Unlock of a Mutex that holds nothing
// returns nil. The statement runs with a fresh context bounded by a few seconds, so a cancelled ctx
// does not stop it; if it fails, the row expires at its TTL and Unlock returns the error.
func (m *Mutex) Unlock(ctx context.Context) error { return unlock(ctx, m.r) }

// take tries to take the row until it succeeds, ctx ends, or (without wait) once.
func (m *Mutex) take(ctx context.Context, wait bool) (held, error) {
	c := m.c
	if c.ctx.Err() != nil {
		return nil, c.errClosed(m.name)
	}
	var w *waiter
	skip := false // wait for a wake-up before the attempt
	if wait {
		var stop func()
		w, stop, skip = c.watch(m.name) // before the first attempt: a release after it wakes us
		defer stop()
	}
	holder := uuid.New()
	unavailable := lock.Backoff{Min: 50 * time.Millisecond, Max: time.Second}
	for {
		var left *float64
		// skip: this Client holds the lock, or (at arrival) other Lock calls of it wait for it.
		// An attempt would fail; the hold's end wakes this Client's longest waiter.
		if !skip {
			sent := time.Now()
			tok, l, ok, err := c.tryAcquire(ctx, m.name, holder, m.data)
			if err == nil && !ok && wait && (l == nil || *l <= 0) {
				// Free, but locked by another taker (a Do's transaction, an attempt about to
				// take it): wait in PostgreSQL for its end, and take the row then if it is free.
				sent = time.Now()
				tok, l, ok, err = c.acquireWaiting(ctx, m.name, holder, m.data)
			}
			if err != nil {
				if !errors.Is(err, errNotSent) {
					c.abandon(ctx, m.name, holder) // the attempt may have taken the row
				}
				switch {
				case ctx.Err() != nil:
					return nil, ctx.Err()
				case c.ctx.Err() != nil:
					return nil, c.errClosed(m.name)
				case !wait:
					return nil, fmt.Errorf("pglock: lock %s: %w", m.name, err)
				}
				// Lock waits through an outage: PostgreSQL restarting, a connection cut.
				if unavailable.Failures() == 0 {
					c.log.Warn("pglock: PostgreSQL unavailable; retrying", "lock", m.name, "err", err)
				}
				if err := sleep(ctx, c.ctx, unavailable.Next()); err != nil {
					if c.ctx.Err() != nil {
						return nil, c.errClosed(m.name)
					}
					return nil, err
				}
				holder = uuid.New() // a fresh holder: an attempt whose answer was lost never counts as ours
				continue
			}
			unavailable.Reset()
			if ok {
				return m.won(ctx, holder, tok, sent)
			}
			if !wait {
				return nil, fmt.Errorf("pglock: lock %s: %w", m.name, lock.ErrLocked)
			}
			left = l
		}
		if err := c.awaitRelease(ctx, w, m.name, left); err != nil {
			return nil, err
		}
		skip = c.holding(m.name)
	}
}

// won turns an attempt that took the lock (sent at sent, with token tok) into the held lease; one
// won as ctx ended, or as the Client closed, is given back.
func (m *Mutex) won(ctx context.Context, holder uuid.UUID, tok int64, sent time.Time) (held, error) {
	c := m.c
	if ctx.Err() != nil {
		c.abandon(ctx, m.name, holder)
		return nil, ctx.Err()
	}
	l := &lease{hold: newHold(m.name, lock.Token{Seq: tok}, c.log), c: c, holder: holder}
	c.held(m.name)
	if !c.goOwned(func() { l.renew(sent) }) {
		c.abandon(ctx, m.name, holder)
		l.drop()
		return nil, c.errClosed(m.name)
	}
	return l, nil
}

// errNotSent: an attempt failed before anything was sent (no pool connection), or in a
// transaction that was not committed, so it left nothing to clean up.
var errNotSent = errors.New("no connection")

// tryAcquire runs one attempt, in one statement (one round trip, one transaction): the upsert
// that takes a free or expired row and draws its token. ok reports whether the row is now ours;
// left is the current row's remaining time in seconds when it is not (nil: no row was seen).
//
// ctx bounds the wait for a pool connection only. Once the attempt is sent, it runs to its answer
// (bounded by cleanupTimeout) whatever ctx does: cancelling it on the wire would cut the
// connection while the server may still commit the upsert, after a clean-up release had run.
func (c *Client) tryAcquire(ctx context.Context, name string, holder uuid.UUID, data string) (tok int64, left *float64, ok bool, err error) {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return 0, nil, false, fmt.Errorf("%w: %w", errNotSent, err)
	}
	defer conn.Release()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var won *int64
	if err := conn.QueryRow(sctx, c.acquire, name, holder.String(), data).Scan(&won, &left); err != nil {
		return 0, nil, false, err
	}
	if won == nil {
		return 0, left, false, nil
	}
	return *won, nil, true, nil
}

// acquireWaiting runs one attempt that waits for a row locked by another taker, in a transaction
// of its own, so that it can be stopped while it waits: its statement runs as [Client.waitOn]
// says, and nothing is committed unless it took the row. A commit whose answer is lost returns an
// error without errNotSent (the row may be ours: the caller frees it).
func (c *Client) acquireWaiting(ctx context.Context, name string, holder uuid.UUID, data string) (tok int64, left *float64, ok bool, err error) {
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, nil, false, fmt.Errorf("%w: %w", errNotSent, err)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	defer func() { _ = tx.Rollback(cctx) }() // after a commit, a no-op
	var won *int64
	err = c.waitOn(ctx, tx.Conn().PgConn(), func(qctx context.Context) error {
		return tx.QueryRow(qctx, c.acquireWait, name, holder.String(), data).Scan(&won, &left)
	})
	switch {
	case err == nil && ctx.Err() != nil:
		return 0, nil, false, fmt.Errorf("%w: %w", errNotSent, ctx.Err()) // rolled back: not taken
	case err != nil:
		return 0, nil, false, fmt.Errorf("%w: %w", errNotSent, err)
	case won == nil:
		return 0, left, false, nil
	}
	if err := tx.Commit(cctx); err != nil {
		return 0, nil, false, err
	}
	return *won, nil, true, nil
}

// releaseRow frees name's row if holder still has it, and notifies the waiters, in one statement.
func (c *Client) releaseRow(ctx context.Context, name string, holder uuid.UUID) error {
	ch, err := c.channelName(ctx, c.pool)
	if err != nil {
		return err
	}
	if _, err := c.pool.Exec(ctx, c.release, name, holder.String(), ch); err != nil {
		return fmt.Errorf("pglock: release %s: %w", name, err)
	}
	return nil
}

// abandon frees the row an interrupted attempt may have taken, with a fresh bounded context.
func (c *Client) abandon(ctx context.Context, name string, holder uuid.UUID) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := c.releaseRow(cctx, name, holder); err != nil {
		c.log.Warn("pglock: could not free the row of an abandoned attempt; it expires at its TTL", "lock", name, "err", err)
	}
}

// lease is one hold of a [Mutex]: the row's holder id, renewed in the background.
type lease struct {
	*hold
	c      *Client
	holder uuid.UUID
	once   sync.Once // drop
}

func (l *lease) base() *hold { return l.hold }

func (l *lease) unlock(ctx context.Context) error {
	err := l.c.releaseRow(ctx, l.name, l.holder)
	l.drop()
	return err
}

// drop tells the Client, once, that this hold is over (released or lost): its next waiter on
// the name tries.
func (l *lease) drop() { l.once.Do(func() { l.c.dropped(l.name) }) }

// renew renews the row every renew interval until the hold is released or lost. The hold's
// deadline is the local (monotonic) time at which the last successful acquire or renew statement
// was sent, plus the TTL minus the margin: PostgreSQL computed its expiry from its own now(), which
// is later. When the deadline passes without a renewal, the hold ends, before the row can expire.
func (l *lease) renew(sent time.Time) {
	defer close(l.stopped)
	c := l.c
	life := c.o.ttl - c.o.margin()
	deadline, next := sent.Add(life), sent.Add(c.o.renew)
	retry := max(c.o.renew/4, time.Millisecond)
	failing := false // renewals have failed since the last success
	for {
		t := time.NewTimer(min(time.Until(next), time.Until(deadline)))
		select {
		case <-l.released:
			t.Stop()
			return
		case <-c.ctx.Done():
			t.Stop()
			l.end(fmt.Errorf("%w: %s: %w", lock.ErrLockLost, l.name, lock.ErrClosed))
			l.c.abandon(context.Background(), l.name, l.holder)
			l.drop()
			return
		case <-t.C:
		}
		if !time.Now().Before(deadline) {
			l.end(fmt.Errorf("%w: %s: lease not renewed before its deadline", lock.ErrLockLost, l.name))
			l.drop()
			return
		}
		s := time.Now()
		ctx, cancel := context.WithDeadline(c.ctx, deadline)
		tag, err := c.pool.Exec(ctx, c.renew, l.name, l.holder.String())
		cancel()
		switch {
		case err == nil && tag.RowsAffected() == 0:
			l.end(fmt.Errorf("%w: %s: the lease row is no longer ours", lock.ErrLockLost, l.name))
			l.drop()
			return
		case err == nil && time.Now().Before(deadline):
			deadline, next = s.Add(life), s.Add(c.o.renew)
			failing = false
		case err != nil:
			level := slog.LevelDebug
			if !failing {
				level = slog.LevelWarn // the first failure of a streak
			}
			c.log.Log(context.Background(), level, "pglock: renewal failed; retrying", "lock", l.name, "err", err, "deadline_in", time.Until(deadline))
			failing = true
			next = time.Now().Add(retry)
			continue
		}
	}
}

var _ lock.Locker = (*Mutex)(nil)

// sleep waits for d; it returns ctx's error when ctx ends first, and nil when d has passed or
// closed ends (the caller checks which).
func sleep(ctx, closed context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-closed.Done():
		return nil
	}
}
