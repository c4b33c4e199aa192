package pgutil

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Beginner is where a LazyTx opens its transaction: *pgxpool.Pool, *pgx.Conn.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// LazyTx is a pgx.Tx whose "begin" goes out with its first statement (pgx.Batch.BeginTx), so that
// opening the transaction costs no round trip of its own. Exec, Query and QueryRow with arguments
// ride; anything else sent first (a statement without arguments, which pgx sends by the simple
// protocol and may hold several statements; an exec-mode or result-format option; Begin,
// SendBatch, Prepare, CopyFrom, LargeObjects, Conn) opens the transaction on its own first.
//
// The owner ends it with Commit or Rollback (nothing to do when no statement was sent: Begun
// reports it). Not safe for concurrent use, like any pgx.Tx.
type LazyTx struct {
	db   Beginner
	opts pgx.TxOptions
	tx   pgx.Tx // nil until the transaction is open
	// The batch of the begin and the first statement, in the LazyTx's own memory (it is sent
	// once): no allocation of its own, its list or its statement's entry.
	batch pgx.Batch
	queue [2]*pgx.QueuedQuery
	first pgx.QueuedQuery
}

// NewLazyTx returns a transaction on db that is opened by its first statement.
func NewLazyTx(db Beginner) *LazyTx { return &LazyTx{db: db} }

// NewLazyTxWith returns a transaction on db with opts (its isolation level, …), opened by its
// first statement.
func NewLazyTxWith(db Beginner, opts pgx.TxOptions) *LazyTx { return &LazyTx{db: db, opts: opts} }

// Begun reports whether the transaction was opened (Commit and Rollback then end it).
func (t *LazyTx) Begun() bool { return t.tx != nil }

// open opens the transaction by itself, for what cannot ride with the begin.
func (t *LazyTx) open(ctx context.Context) error {
	if t.tx != nil {
		return nil
	}
	tx, err := t.db.BeginTx(ctx, t.opts)
	if err != nil {
		return err
	}
	t.tx = tx
	return nil
}

// rides reports whether a statement with args can be sent in a batch after the begin: pgx sends a
// statement without arguments by the simple protocol (it may hold several statements), and a
// batch takes none of the query options but a rewriter.
func rides(args []any) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0].(type) {
	case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
		return false
	}
	return true
}

// beginWith sends the begin and sql in one batch and returns the batch positioned at sql's result
// (the caller closes it), the transaction recorded.
func (t *LazyTx) beginWith(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &t.batch
	b.QueuedQueries = t.queue[:0]
	b.BeginTx(t.opts)
	t.first = pgx.QueuedQuery{SQL: sql, Arguments: args}
	b.QueuedQueries = append(b.QueuedQueries, &t.first)
	br := t.db.SendBatch(ctx, b)
	t.tx = br.Tx() // closed already when the batch could not be sent: Commit and Rollback say so
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

func (t *LazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.tx != nil || !rides(args) {
		if err := t.open(ctx); err != nil {
			return pgconn.CommandTag{}, err
		}
		return t.tx.Exec(ctx, sql, args...)
	}
	br, err := t.beginWith(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (t *LazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.tx != nil || !rides(args) {
		if err := t.open(ctx); err != nil {
			return nil, err
		}
		return t.tx.Query(ctx, sql, args...)
	}
	br, err := t.beginWith(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (t *LazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	if err != nil {
		return errRow{err}
	}
	return rowOf{rows}
}

func (t *LazyTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.open(ctx); err != nil {
		return nil, err
	}
	return t.tx.Begin(ctx)
}

func (t *LazyTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.open(ctx); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return t.tx.SendBatch(ctx, b)
}

func (t *LazyTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.open(ctx); err != nil {
		return nil, err
	}
	return t.tx.Prepare(ctx, name, sql)
}

func (t *LazyTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.open(ctx); err != nil {
		return 0, err
	}
	return t.tx.CopyFrom(ctx, table, cols, src)
}

// LargeObjects and Conn open the transaction with a background context: they take none. When
// that begin fails, Conn returns nil and the LargeObjects' methods panic (pgx's own zero value).
func (t *LazyTx) LargeObjects() pgx.LargeObjects {
	if err := t.open(context.Background()); err != nil {
		return pgx.LargeObjects{}
	}
	return t.tx.LargeObjects()
}

func (t *LazyTx) Conn() *pgx.Conn {
	if err := t.open(context.Background()); err != nil {
		return nil
	}
	return t.tx.Conn()
}

// Commit commits the transaction; with no statement sent there is nothing to commit.
func (t *LazyTx) Commit(ctx context.Context) error {
	if t.tx == nil {
		return nil
	}
	return t.tx.Commit(ctx)
}

// Rollback rolls the transaction back; with no statement sent there is nothing to roll back.
func (t *LazyTx) Rollback(ctx context.Context) error {
	if t.tx == nil {
		return nil
	}
	return t.tx.Rollback(ctx)
}

// batchRows are the rows of a batch's last statement: closing them closes the batch.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// rowOf is the first row of rows, as QueryRow returns it.
type rowOf struct{ rows pgx.Rows }

func (r rowOf) Scan(dest ...any) error {
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

var _ pgx.Tx = (*LazyTx)(nil)
