package leader

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/lock"
)

// CommitFenced runs one transaction in one round trip on a connection of pool: the begin, the
// check of f with (resource, tok), the statements queue puts in the batch (nil: none; read their
// results with the batch's callbacks) and the commit. A refused tok fails the transaction inside
// PostgreSQL, so nothing of it commits, and returns the *fence.FencedError f.Check returns; on any
// error the transaction is rolled back (with a context of its own once ctx has ended).
func CommitFenced(ctx context.Context, pool *pgxpool.Pool, f *fence.Fence, resource string, tok lock.Token, queue func(*pgx.Batch)) error {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	q, err := f.Queue(b, resource, tok)
	if err != nil {
		return err
	}
	if queue != nil {
		queue(b)
	}
	b.Queue("commit")
	c, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release() // the pool closes a connection released in a transaction
	br := c.SendBatch(ctx, b)
	tx := br.Tx()
	if err = br.Close(); err == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_ = tx.Rollback(rctx) // the error to return is err; ErrTxClosed when the begin never ran
	// The refused token's Current is read on the same connection, after the rollback.
	return q.Err(rctx, c, err)
}

// rollbackTimeout bounds CommitFenced's rollback and refusal read once ctx may have ended.
const rollbackTimeout = 5 * time.Second
