package pgutil

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
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
	// The batch of the begin and the first statement, in the LazyTx's own memory: no allocation
	// of its own, its list or its statement's entry. Reused by the batches carrying deferred
	// statements (each closed before the next goes out).
	batch pgx.Batch
	queue [2]*pgx.QueuedQuery
	first pgx.QueuedQuery

	deferred []Deferred  // not sent yet (Defer)
	one      [1]Deferred // the first deferred statement's room: no allocation of its own
	ended    bool        // committed by a batch carrying deferred statements (tx is then left unused)
}

// Deferred is a statement a LazyTx sends with the transaction's next statement or its commit
// (LazyTx.Defer).
type Deferred struct {
	SQL  string
	Args []any
	Dest []any // the first row is scanned into these
	// Done is called with the scan's error (nil, pgx.ErrNoRows, the statement's error) once the
	// result is read, and returns what to report: a non-nil error is returned by the call that
	// sent the statement (the next statement's method or Commit). It cannot undo the statement:
	// what must stop the commit has to fail in PostgreSQL. Not called for a statement that was
	// not run because an earlier one of its batch failed.
	Done func(ctx context.Context, err error) error
}

// NewLazyTx returns a transaction on db that is opened by its first statement.
func NewLazyTx(db Beginner) *LazyTx { return &LazyTx{db: db} }

// NewLazyTxWith returns a transaction on db with opts (its isolation level, …), opened by its
// first statement.
func NewLazyTxWith(db Beginner, opts pgx.TxOptions) *LazyTx { return &LazyTx{db: db, opts: opts} }

// Begun reports whether the transaction was opened (Commit and Rollback then end it).
func (t *LazyTx) Begun() bool { return t.tx != nil }

// Defer queues d to go out in the round trip of the transaction's next statement, before it, or
// of its commit: the statements reach PostgreSQL in the order they were given, as if d had been
// sent at once, one round trip fewer. A statement that cannot ride in a batch (see LazyTx) is
// preceded by a batch of the deferred ones. d's error is reported through d.Done by the call that
// sent it, and leaves the transaction aborted: a commit sent with a failing d does not commit.
// Rollback drops what is queued. Defer returns false, queuing nothing, on a LazyTx over a pool:
// the commit carrying d ends the transaction without pgx's Commit, which is what releases a
// pool's connection, so the owner must hold the connection (and release it after Commit).
func (t *LazyTx) Defer(d Deferred) bool {
	if _, pooled := t.db.(*pgxpool.Pool); pooled || t.ended {
		return false
	}
	if t.deferred == nil {
		t.deferred = t.one[:0]
	}
	t.deferred = append(t.deferred, d)
	return true
}

// open opens the transaction by itself, for what cannot ride with the begin, after sending what
// was deferred.
func (t *LazyTx) open(ctx context.Context) error {
	if t.ended {
		return pgx.ErrTxClosed
	}
	if len(t.deferred) > 0 {
		if _, err := t.batchWith(ctx, "", nil); err != nil {
			return err
		}
	}
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

// batchWith sends in one batch the begin when the transaction is not open yet, the deferred
// statements, and sql when not empty, and returns the batch positioned at sql's result (the
// caller closes it; nil when sql is empty), the transaction recorded.
func (t *LazyTx) batchWith(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	begin := t.tx == nil
	if !begin {
		t.batch = pgx.Batch{} // without the begin's options, which a transaction's batch refuses
	}
	b := &t.batch
	b.QueuedQueries = t.queue[:0]
	if begin {
		b.BeginTx(t.opts)
	}
	deferred := t.deferred
	t.deferred = nil
	for i := range deferred {
		b.Queue(deferred[i].SQL, deferred[i].Args...)
	}
	if sql != "" {
		t.first = pgx.QueuedQuery{SQL: sql, Arguments: args}
		b.QueuedQueries = append(b.QueuedQueries, &t.first)
	}
	var br pgx.BatchResults
	if begin {
		br = t.db.SendBatch(ctx, b)
		t.tx = br.Tx() // closed already when the batch could not be sent: Commit and Rollback say so
	} else {
		br = t.tx.SendBatch(ctx, b)
	}
	fail := func(err error) (pgx.BatchResults, error) {
		_ = br.Close()
		return nil, err
	}
	if begin {
		if _, err := br.Exec(); err != nil {
			return fail(err)
		}
	}
	for i := range deferred {
		d := &deferred[i]
		err := br.QueryRow().Scan(d.Dest...)
		report := d.Done(ctx, err)
		if report == nil && err != nil && !errors.Is(err, pgx.ErrNoRows) {
			report = err
		}
		if report != nil {
			return fail(report)
		}
	}
	if sql == "" {
		return nil, br.Close()
	}
	return br, nil
}

// sends reports whether a statement with args goes out in a batch of batchWith: the begin or
// deferred statements are waiting to be sent, and it can ride with them.
func (t *LazyTx) sends(args []any) bool {
	return (t.tx == nil || len(t.deferred) > 0) && !t.ended && rides(args)
}

func (t *LazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !t.sends(args) {
		if err := t.open(ctx); err != nil {
			return pgconn.CommandTag{}, err
		}
		return t.tx.Exec(ctx, sql, args...)
	}
	br, err := t.batchWith(ctx, sql, args)
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
	if !t.sends(args) {
		if err := t.open(ctx); err != nil {
			return nil, err
		}
		return t.tx.Query(ctx, sql, args...)
	}
	br, err := t.batchWith(ctx, sql, args)
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

// Commit commits the transaction; with no statement sent there is nothing to commit. Deferred
// statements go out with the commit, in its round trip; when one fails the transaction is rolled
// back and its error returned.
func (t *LazyTx) Commit(ctx context.Context) error {
	if t.ended {
		return pgx.ErrTxClosed
	}
	if len(t.deferred) == 0 {
		if t.tx == nil {
			return nil
		}
		return t.tx.Commit(ctx)
	}
	br, err := t.batchWith(ctx, "commit", nil)
	if err == nil {
		var tag pgconn.CommandTag
		tag, err = br.Exec()
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err == nil && tag.String() == "ROLLBACK" {
			err = pgx.ErrTxCommitRollback
		}
	}
	// The pgx.Tx never sees this commit: it is left unused from now on, and its connection's
	// owner releases the connection.
	t.ended = true
	if err != nil {
		if c := t.tx.Conn(); c != nil && !c.IsClosed() && c.PgConn().TxStatus() != 'I' {
			_ = t.tx.Rollback(ctx) // the error to return is err
		}
	}
	return err
}

// Rollback rolls the transaction back, dropping what was deferred; with no statement sent there
// is nothing to roll back.
func (t *LazyTx) Rollback(ctx context.Context) error {
	t.deferred = nil
	if t.ended {
		return pgx.ErrTxClosed
	}
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
