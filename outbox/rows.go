package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/lock"
)

// row is a due message as the relay reads it.
type row struct {
	id       int64
	msg      Message
	attempts int
	created  time.Time // the row's created_at, on the relay's clock
	trace    string    // the trace context stored by Enqueue (obs.EncodeTrace), "" when none
}

// checkPartitions refuses to relay a table whose stored partition count is not the outbox's (an
// error wrapping ErrInvalidOption); a failed query is retried until ctx ends.
func (r *Relay) checkPartitions(ctx context.Context, log *slog.Logger) error {
	for {
		var stored int
		err := r.pool.QueryRow(ctx, r.ob.q.partitions).Scan(&stored)
		switch {
		case err == nil && stored == r.ob.o.parts:
			return nil
		case err == nil:
			return r.ob.partsMismatch(stored)
		case errors.Is(err, pgx.ErrNoRows) || isUndefinedTable(err):
			return fmt.Errorf("outbox: relay of %s: no partition count stored (was Outbox.Migrate run?): %w: %w",
				r.ob.name, err, ErrInvalidOption)
		case ctx.Err() != nil:
			return nil
		}
		log.WarnContext(ctx, "outbox: reading the partition count failed; retrying", slog.Any("err", err))
		t := time.NewTimer(r.o.retryPause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func isUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}

// measure counts the pending rows and the age of the oldest, sets the gauges, and returns the
// count (-1 when the query failed: the gauges keep their values until the next pass).
func (r *Relay) measure(ctx context.Context) int64 {
	var (
		pending int64
		age     float64
	)
	if err := r.pool.QueryRow(ctx, r.ob.q.pending).Scan(&pending, &age); err != nil {
		return -1
	}
	r.m.setBacklog(pending, time.Duration(age*float64(time.Second)))
	return pending
}

// fetch reads the next batch of partition part, leaving out the rows whose ids are in held: at
// most the batch size (WithSchedule) of due rows and, past the first, at most DefaultBatchBytes
// bytes of them. more
// reports whether more rows may be due: the batch is full, or the byte bound cut it short.
func (r *Relay) fetch(ctx context.Context, part int, held []int64) (batch []row, more bool, err error) {
	sent := time.Now() // no later than the statement's now(), from which the rows' ages are taken
	rows, err := r.pool.Query(ctx, r.ob.q.due, r.o.batch, r.o.batchBytes, part, held)
	if err != nil {
		return nil, false, fmt.Errorf("outbox: read due messages of %s: %w", r.ob.name, err)
	}
	cut := false
	batch, err = pgx.CollectRows(rows, func(cr pgx.CollectableRow) (row, error) {
		x, c, err := scanDue(cr, sent)
		cut = cut || c
		return x, err
	})
	if err != nil {
		return nil, false, fmt.Errorf("outbox: read due messages of %s: %w", r.ob.name, err)
	}
	if cut { // the last row only marks where the byte bound cut the batch
		return batch[:len(batch)-1], true, nil
	}
	return batch, len(batch) == r.o.batch, nil
}

// scanDue scans a row of the due statement (sql/queries.sql) sent at sent; cut reports the
// marker row where the byte bound cut the batch.
func scanDue(r pgx.Row, sent time.Time) (x row, cut bool, err error) {
	var age float64 // seconds since created_at, by the database's clock
	err = r.Scan(&x.id, &x.msg.ID, &x.msg.Topic, &x.msg.Key, &x.msg.Body, &x.msg.Headers, &x.attempts, &cut, &x.msg.Tags, &age, &x.trace)
	x.created = sent.Add(-time.Duration(age * float64(time.Second)))
	return x, cut, err
}

// maxErrorLen bounds the last_error stored for a failed publish.
const maxErrorLen = 2000

// results are a batch's publish results as the record transaction writes them: the ids of the
// acknowledged rows, and of the failed ones with their errors and whether each is permanent.
type results struct {
	sent, failed []int64
	errs         []string // last_error of each failed row
	permanent    []bool   // the failure wraps ErrInvalidMessage: the row is dead at once
}

// sortResults sorts batch's rows by their publish results errs.
func sortResults(batch []row, errs []error) results {
	var res results
	for i, x := range batch {
		switch e := errs[i]; {
		case e == nil:
			res.sent = append(res.sent, x.id)
		default:
			res.failed = append(res.failed, x.id)
			res.errs = append(res.errs, pgutil.ErrorText(e, maxErrorLen))
			res.permanent = append(res.permanent, errors.Is(e, ErrInvalidMessage)) // publishOne logged it
		}
	}
	return res
}

// writeResults deletes the sent rows, makes the rows of rescue due at once and records the failed
// ones, in one transaction that passes the fence (resource, tok) first, in one round trip
// (leader.CommitFenced). It returns how many rows it made due again and the messages it made dead.
func (r *Relay) writeResults(ctx context.Context, resource string, tok lock.Token, res results, rescue []int64) (rescued int, deadIDs []uuid.UUID, err error) {
	// The fence check, the writes and the commit go out as one pipeline: a refused check fails
	// the transaction in PostgreSQL, so nothing after it commits.
	//
	// The commit does not wait for its WAL flush (synchronous_commit off for this transaction
	// only). A record lost to a crash or a failover leaves its rows as they were before it: sent
	// rows pending, to be published again with the same IDs (at least once, as promised; the
	// consumers' claim suppresses the copy), failed rows with one attempt less. Per-key order
	// holds: the WAL is flushed (and streamed to a standby) in order, so the commit of a later
	// Enqueue makes every record before it durable too.
	err = leader.CommitFenced(ctx, r.pool, r.fence, resource, tok, func(b *pgx.Batch) {
		b.Queue(asyncCommit)
		if len(res.sent) > 0 {
			b.Queue(r.ob.q.deleteSent, res.sent)
		}
		if len(res.failed) > 0 {
			b.Queue(r.ob.q.fail, res.failed, res.errs, r.o.maxAttempts, r.o.backoffBase.Seconds(), r.o.backoffCap.Seconds(), res.permanent).
				Query(func(rows pgx.Rows) error {
					var (
						id     uuid.UUID
						isDead bool
					)
					_, err := pgx.ForEachRow(rows, []any{&id, &isDead}, func() error {
						if isDead {
							deadIDs = append(deadIDs, id)
						}
						return nil
					})
					return err
				})
		}
		// After the fail statement: the rescue may make due rows of this batch that it failed.
		if len(rescue) > 0 {
			b.Queue(`update `+r.ob.table+` set next_attempt_at = now()
where id = any($1::bigint[]) and status = '`+StatusPending.String()+`' and attempts > 0 and next_attempt_at > now()`, rescue).
				Exec(func(tag pgconn.CommandTag) error {
					rescued = int(tag.RowsAffected())
					return nil
				})
		}
	})
	if err != nil {
		return 0, nil, err
	}
	return rescued, deadIDs, nil
}

// fenceResource returns the fence resource of partition part's writes: the relay's resource, or
// with partitions the partition's, as leader.Shards names it.
func (r *Relay) fenceResource(part int) string {
	if r.shards == nil {
		return r.resource
	}
	return leader.PartitionName(r.resource, part)
}

// asyncCommit makes the commit of the transaction it runs in return before its WAL is flushed.
const asyncCommit = "set local synchronous_commit = off"

// cleanupTimeout bounds a rollback once ctx has ended.
const cleanupTimeout = 5 * time.Second
