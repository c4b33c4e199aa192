package pglock

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/lock"
)

// Do runs fn under the lock, in one PostgreSQL transaction that takes the lock and releases it
// at its end: fn's writes (through tx), the take and the release commit together, in one commit.
// It blocks until the lock is free — a Lock holder's release, or the end of another Do's
// transaction, which hands the lock over with no commit of its own — then calls fn with a token
// above every earlier holder's, in Do and Lock alike. If fn returns nil, tx is committed and Do
// returns the commit's error; otherwise tx is rolled back and fn's error returned as it is. A
// process that dies inside Do releases the lock when PostgreSQL ends its connection (at once
// when it is closed; a silent one within about the Client's TTL + 1 s).
//
// ctx scopes the whole call: the wait (its end returns ctx's error, leaving nothing behind),
// fn's statements and the commit. While a Do holds the lock, TryLock returns [lock.ErrLocked]
// and Lock waits; fn must not Lock the same name. On a Mutex value that holds the lock through
// Lock, Do runs fn in a transaction under that hold, with its token. A closed Client returns an
// error wrapping [lock.ErrClosed]. Do is safe for concurrent use.
func (m *Mutex) Do(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx, tok lock.Token) error) error {
	if l, err := m.r.Lock(ctx, notHeld); err == nil {
		defer func() { _ = unlock(ctx, m.r) }()
		return m.run(ctx, l.Token(), nil, fn)
	} else if !errors.Is(err, errNotHeld) {
		return fmt.Errorf("pglock: do %s: %w", m.name, err)
	}
	c := m.c
	var w *waiter // registered after the first failed attempt, which is then made again
	defer func() {
		if w != nil {
			c.wakeOne(m.name) // the wake-up this Client's next waiter would have had from our hold's end
		}
	}()
	for {
		if c.ctx.Err() != nil {
			return c.errClosed(m.name)
		}
		done, left, err := m.attempt(ctx, fn)
		if done || err != nil {
			return err
		}
		if w == nil {
			var stop func()
			w, stop, _ = c.watch(m.name)
			defer stop()
			continue
		}
		// A Lock holder has the row: wait for its release, as Lock does.
		if err := c.awaitRelease(ctx, w, m.name, &left); err != nil {
			return err
		}
	}
}

// attempt runs Do's take in a transaction on a pool connection of its own and, when it takes the
// row, fn (done: Do's result is err). Otherwise it has rolled back and returns the seconds the
// Lock holder's row has left, or the error that ends Do. The transaction's begin rides with the
// take's statement (pgutil.LazyTx): one round trip.
func (m *Mutex) attempt(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx, tok lock.Token) error) (done bool, left float64, err error) {
	pc, err := m.c.pool.Acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return false, 0, ctx.Err()
		}
		return false, 0, fmt.Errorf("pglock: do %s: %w", m.name, err)
	}
	defer pc.Release() // after the commit or rollback; a connection left in a transaction is closed
	tx := pgutil.NewLazyTxWith(pc.Conn(), pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	tok, left, err := m.takeIn(ctx, pc.Conn().PgConn(), tx)
	if err == nil && tok != 0 {
		return true, 0, m.run(ctx, lock.Token{Seq: tok}, tx, fn)
	}
	rollback(ctx, tx)
	return false, left, err
}

// errNotHeld: Do's probe of the Mutex value's own hold found none (see notHeld).
var errNotHeld = errors.New("not held by this Mutex")

// notHeld is the take of Do's probe: [lock.Reentrant.Lock] with it joins a hold of the Mutex value
// and never takes one.
func notHeld(context.Context) (lock.Lease, error) { return nil, errNotHeld }

// takeIn runs Do's take in tx (on conn) until it takes the row (tok > 0) or finds it held by a Lock holder
// (tok 0, left: the seconds its row has left). Its statement waits for a row another Do's
// transaction holds, as [Client.waitOn] says; an attempt that saw no live holder and took nothing
// (the row was changed meanwhile, or there was none: the first Do of a name makes it) is made
// again at once.
func (m *Mutex) takeIn(ctx context.Context, conn *pgconn.PgConn, tx pgx.Tx) (tok int64, left float64, err error) {
	c := m.c
	for {
		var won *int64
		var l *float64
		err := c.waitOn(ctx, conn, func(qctx context.Context) error {
			return tx.QueryRow(qctx, c.doTake, m.name, c.keepIdle, c.userTimeout, m.doKey).Scan(&won, &l)
		})
		switch {
		case ctx.Err() != nil:
			return 0, 0, ctx.Err() // taken or not, the caller rolls back
		case c.ctx.Err() != nil:
			return 0, 0, c.errClosed(m.name)
		case err != nil:
			return 0, 0, fmt.Errorf("pglock: do %s: %w", m.name, err)
		case won != nil:
			return *won, 0, nil
		case l != nil && *l > 0:
			return 0, *l, nil
		case l == nil: // no row yet: make the free row, then take it
			if _, err := c.pool.Exec(ctx, c.freeRow, m.name); err != nil {
				if ctx.Err() != nil {
					return 0, 0, ctx.Err()
				}
				return 0, 0, fmt.Errorf("pglock: do %s: %w", m.name, err)
			}
		}
	}
}

// run calls fn in tx (nil: a transaction of its own) and commits it when fn returns nil.
func (m *Mutex) run(ctx context.Context, tok lock.Token, tx pgx.Tx, fn func(ctx context.Context, tx pgx.Tx, tok lock.Token) error) error {
	if tx == nil {
		var err error
		if tx, err = m.c.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}); err != nil {
			return fmt.Errorf("pglock: do %s: %w", m.name, err)
		}
	}
	if err := fn(ctx, tx, tok); err != nil {
		rollback(ctx, tx)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pglock: do %s: commit with token %s: %w", m.name, tok, err)
	}
	return nil
}

// rollback ends tx with a fresh, bounded context.
func rollback(ctx context.Context, tx pgx.Tx) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = tx.Rollback(cctx)
}
