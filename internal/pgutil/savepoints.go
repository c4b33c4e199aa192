package pgutil

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SavepointTx is the transaction a Do gives its fn (outbox.Do, notify.Do): it counts the savepoints
// open on it (tx.Begin), so that what is written while one is open — which rolling the savepoint
// back undoes, even when written with the outer tx — can be left out of what the Do hands on after
// the commit. Not safe for concurrent use, like any pgx.Tx.
type SavepointTx struct {
	pgx.Tx
	open       *int
	sp, closed bool // a savepoint, ended
}

// TrackSavepoints returns tx counting its savepoints.
func TrackSavepoints(tx pgx.Tx) *SavepointTx { return &SavepointTx{Tx: tx, open: new(int)} }

// InSavepoint reports whether a savepoint of the transaction is open.
func (t *SavepointTx) InSavepoint() bool { return *t.open > 0 }

// Begin starts a savepoint, counted until it ends.
func (t *SavepointTx) Begin(ctx context.Context) (pgx.Tx, error) {
	sp, err := t.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	*t.open++
	return &SavepointTx{Tx: sp, open: t.open, sp: true}, nil
}

// Commit releases a savepoint, or commits the transaction.
func (t *SavepointTx) Commit(ctx context.Context) error {
	defer t.end()
	return t.Tx.Commit(ctx)
}

// Rollback rolls back to a savepoint, or rolls the transaction back.
func (t *SavepointTx) Rollback(ctx context.Context) error {
	defer t.end()
	return t.Tx.Rollback(ctx)
}

// end counts a savepoint's end, once (pgx allows Rollback after Commit).
func (t *SavepointTx) end() {
	if t.sp && !t.closed {
		t.closed = true
		*t.open--
	}
}

// RunTx runs fn and commits tx when it returns nil, as pgx.BeginFunc does: rolled back (with ctx)
// on an error or a panic.
func RunTx(ctx context.Context, tx pgx.Tx, fn func() error) (err error) {
	defer func() {
		if rerr := tx.Rollback(ctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) {
			err = rerr
		}
	}()
	if err := fn(); err != nil {
		_ = tx.Rollback(ctx) // fn's error is the one to return
		return err
	}
	return tx.Commit(ctx)
}

// Collector gathers what the enqueue calls of one Do transaction (outbox.Do, notify.Do) write, for
// the Do to hand on after the commit: Collect makes it, and an enqueue finds it with Collecting.
type Collector[T any] struct {
	owner any
	tx    *SavepointTx // nil once the transaction has ended
	lazy  *LazyTx      // tx's transaction
	Rows  []T
}

type collectorKey[T any] struct{}

// Collect runs fn in a transaction on a connection of pool and commits it when fn returns nil
// (rolls it back and returns fn's error otherwise). The transaction's begin rides with fn's first
// statement (LazyTx); fn's ctx carries a Collector of owner, and Collect returns what was added to
// it — with an error too, then added by a transaction that did not commit. The connection is
// acquired by the first statement and released once the transaction ended.
func Collect[T any](ctx context.Context, pool *pgxpool.Pool, owner any, fn func(ctx context.Context, tx pgx.Tx) error) ([]T, error) {
	// The connection, the transaction and the collector in one allocation.
	x := &collecting[T]{conn: poolConn{pool: pool}}
	defer x.conn.release()
	x.lazy.db = &x.conn
	x.sp = SavepointTx{Tx: &x.lazy, open: &x.open}
	x.c = Collector[T]{owner: owner, tx: &x.sp, lazy: &x.lazy}
	c := &x.c
	err := RunTx(ctx, c.tx, func() error { return fn(context.WithValue(ctx, collectorKey[T]{}, c), c.tx) })
	c.tx = nil
	return c.Rows, err
}

// collecting is what one Collect holds.
type collecting[T any] struct {
	conn poolConn
	lazy LazyTx
	sp   SavepointTx
	open int
	c    Collector[T]
}

// Defer sends d with the transaction's next statement or its commit (LazyTx.Defer); false when
// the transaction has ended.
func (c *Collector[T]) Defer(d Deferred) bool { return c.lazy.Defer(d) }

// IsUniqueViolation reports whether err is PostgreSQL's unique_violation (23505).
func IsUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// poolConn is a Beginner on one connection of pool, acquired at its first use: a LazyTx on it can
// end its transaction with a batch of its own (LazyTx.Defer), which a pool's transaction cannot.
type poolConn struct {
	pool *pgxpool.Pool
	conn *pgxpool.Conn
}

func (p *poolConn) acquire(ctx context.Context) error {
	if p.conn != nil {
		return nil
	}
	c, err := p.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	p.conn = c
	return nil
}

func (p *poolConn) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	if err := p.acquire(ctx); err != nil {
		return nil, err
	}
	return p.conn.BeginTx(ctx, opts)
}

func (p *poolConn) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := p.acquire(ctx); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return p.conn.SendBatch(ctx, b)
}

// release gives the connection back (the pool closes one left in a transaction).
func (p *poolConn) release() {
	if p.conn != nil {
		p.conn.Release()
		p.conn = nil
	}
}

// Collecting returns the Collector of owner's Collect when tx is its transaction and no savepoint
// of it is open, nil otherwise: another transaction's commit, or what rolling a savepoint back
// may undo, is not the Do's to see.
func Collecting[T any](ctx context.Context, owner, tx any) *Collector[T] {
	c, _ := ctx.Value(collectorKey[T]{}).(*Collector[T])
	if c == nil || c.owner != owner || c.tx == nil || any(c.tx) != tx || c.tx.InSavepoint() {
		return nil
	}
	return c
}
