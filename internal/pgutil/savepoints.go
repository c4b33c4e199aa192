package pgutil

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
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
