package leader

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/lock"
)

// CommitFenced runs one transaction on a connection of pool, in one round trip per stage: the
// begin, the check of f with (resource, tok) and the statements queue puts in the batch (nil:
// none; read their results with the batch's callbacks), then, for each of then, the statements it
// queues once the previous round trip's results were read; the commit rides with the last. A
// refused tok fails the transaction inside PostgreSQL, so nothing of it commits, and returns the
// *fence.FencedError f.Check returns; on any error the transaction is rolled back (with a context
// of its own once ctx has ended).
func CommitFenced(ctx context.Context, pool *pgxpool.Pool, f *fence.Fence, resource string, tok lock.Token, queue func(*pgx.Batch), then ...func(*pgx.Batch)) error {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	q, err := f.Queue(b, resource, tok)
	if err != nil {
		return err
	}
	if queue != nil {
		queue(b)
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release() // the pool closes a connection released in a transaction
	var tx pgx.Tx
	for i := 0; ; i++ {
		if i == len(then) {
			b.Queue("commit") // in the pipeline: no round trip of its own
		}
		br := c.SendBatch(ctx, b)
		if tx == nil {
			tx = br.Tx()
		}
		if err = br.Close(); err != nil {
			break
		}
		if i == len(then) {
			return nil
		}
		b = &pgx.Batch{}
		then[i](b)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_ = tx.Rollback(rctx) // the error to return is err; ErrTxClosed when the begin never ran
	// The refused token's Current is read on the same connection, after the rollback.
	return q.Err(rctx, c, err)
}

// rollbackTimeout bounds CommitFenced's rollback and refusal read once ctx may have ended.
const rollbackTimeout = 5 * time.Second
