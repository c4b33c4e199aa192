package notify

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/lock"
)

// recordLinger is how long the recorder waits for more results before it writes a batch that is
// not full: one transaction (and one WAL flush) for many results, also when deliveries are slow.
const recordLinger = 10 * time.Millisecond

// stillPending is the guard of the statements that find notifications by id: "pending", written
// so that PostgreSQL finds each row by the primary key. Written "status = 'pending'", it matches
// the predicate of the partial due index that tables of earlier versions keep when their owner
// did not migrate them (docs/notify.md, "The due index"), and the planner, whose statistics count only the few rows pending at
// the last analyze, scans the whole due index — with the entries of every row delivered since —
// for every batch. The check constraint allows only the three statuses: the same rows.
const stillPending = `status not in ('delivered', 'failed')`

// fenceKey is what a term's writes pass the fence with: its token and its partition's resource.
type fenceKey struct {
	tok      lock.Token
	resource string
}

// fenced runs sql with args and hands its rows to read. With fk, in a transaction that passes the
// fence with fk first, the check, the statement and the commit in one round trip
// (leader.CommitFenced). With a zero fk (Deliver's records, which its claim makes its own) it
// passes no fence, and the statement runs on the pool: its own transaction, one round trip.
func (n *Notifier) fenced(ctx context.Context, fk fenceKey, sql string, args []any, read func(pgx.Rows) error) error {
	if fk.resource != "" {
		return leader.CommitFenced(ctx, n.pool, n.fence, fk.resource, fk.tok, func(b *pgx.Batch) {
			b.Queue(sql, args...).Query(read)
		})
	}
	return n.query(ctx, sql, args, read)
}

// query runs sql with args on the pool and hands its rows to read, which does not outlive the
// call (so that a caller's read can stay on its stack: fenced's batch keeps its read).
func (n *Notifier) query(ctx context.Context, sql string, args []any, read func(pgx.Rows) error) error {
	rows, err := n.pool.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if err := read(rows); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// noRows is the read of a statement that returns no rows.
func noRows(pgx.Rows) error { return nil }

// recorder writes results in batches — the results that arrive within recordLinger of the first
// (while more are coming), up to the batch size, in one fenced statement — until results is closed (after ctx ended and
// every delivery returned). What cannot be written stays due: the notification is delivered
// again. After a batch with a failed attempt, or one it could not write, it calls fresh: those
// notifications may be due again soon.
func (n *Notifier) recorder(ctx context.Context, fk fenceKey, flights map[string]*flight, results <-chan result, fresh func(), log *slog.Logger) error {
	var fencedErr error
	linger := time.NewTimer(recordLinger)
	linger.Stop()
	for r := range results {
		batch := []result{r}
		linger.Reset(recordLinger)
	more:
		for len(batch) < n.o.batch {
			select { // what is waiting
			case r, ok := <-results:
				if !ok {
					break more
				}
				batch = append(batch, r)
				continue
			default:
			}
			if !n.delivering(flights) {
				break // nothing more is coming soon
			}
			select {
			case r, ok := <-results:
				if !ok {
					break more
				}
				batch = append(batch, r)
			case <-linger.C:
				break more
			case <-ctx.Done():
				break more
			}
		}
		linger.Stop()
		if fencedErr != nil || ctx.Err() != nil {
			n.forget(flights, batch)
			continue // leadership over: they are still due, and the next leader sends them again
		}
		again := false
		for _, r := range batch {
			again = again || !r.ok
		}
		if err := n.record(ctx, fk, batch, log); err != nil {
			if errors.Is(err, lock.ErrFenced) {
				fencedErr = err
				n.forget(flights, batch)
				continue
			}
			again = true
			if ctx.Err() == nil {
				n.fails.Log(ctx, log, "record", slog.LevelWarn, "notify: recording attempts failed; those notifications will be sent again",
					slog.Int("results", len(batch)), slog.Any("err", err))
			}
		}
		n.forget(flights, batch) // recorded (or not: then they are due again and taken again)
		if again {
			fresh()
		}
	}
	return fencedErr
}

// record writes a batch of results in fenced statements: the notifications the breaker held back
// are due again later (holdBack); for the others, each notification's attempt count, last status
// and error, its new state — delivered; failed when the schedule is used up; else pending, due
// after the schedule's next delay with jitter, computed by PostgreSQL — and an attempts row for
// each failed attempt (a successful one stays in the notification's row) (writeAttempts).
func (n *Notifier) record(ctx context.Context, fk fenceKey, batch []result, log *slog.Logger) error {
	var held []result
	sent := batch[:0:0]
	for _, r := range batch {
		if r.skipped > 0 {
			held = append(held, r)
		} else {
			sent = append(sent, r)
		}
	}
	if len(held) > 0 {
		if err := n.holdBack(ctx, fk, held); err != nil {
			return err
		}
	}
	if len(sent) == 0 {
		return nil
	}
	outs, delivered, err := n.writeAttempts(ctx, fk, sent)
	if err != nil {
		return err
	}
	n.stats.delivered.Add(delivered)
	n.metrics.delivered.Add(float64(delivered))
	if delivered > 0 && log.Enabled(ctx, slog.LevelDebug) {
		log.DebugContext(ctx, "notify: delivered", slog.Int64("notifications", delivered))
	}
	n.logUndelivered(ctx, sent, outs, log)
	return nil
}

// holdBack makes the notifications the breaker held back due again when it may let them
// through, without counting an attempt.
func (n *Notifier) holdBack(ctx context.Context, fk fenceKey, held []result) error {
	ids, waits := make([][16]byte, len(held)), make([]float64, len(held))
	for i, r := range held {
		ids[i], waits[i] = r.id, r.skipped.Seconds()
	}
	return n.fenced(ctx, fk, `update `+n.table+` t set next_attempt_at = `+dueNow+` + make_interval(secs => w.secs), updated_at = now()
from unnest($1::uuid[], $2::float8[]) as w(id, secs) where t.id = w.id and t.`+stillPending, []any{ids, waits}, noRows)
}

// undelivered is a notification whose attempt writeAttempts recorded as failed: pending again, or
// failed (no attempt left).
type undelivered struct {
	id       uuid.UUID
	status   string
	attempts int
}

// writeAttempts records the attempts of batch (no result held back by the breaker) in one fenced
// statement. It returns the notifications left undelivered and how many were delivered.
func (n *Notifier) writeAttempts(ctx context.Context, fk fenceKey, batch []result) (outs []undelivered, delivered int64, err error) {
	k := len(batch)
	// Deliver's and Do's records (no fence: their claim made the attempts theirs) are commits that
	// do not wait for their WAL flush (recordStatement).
	async := fk.resource == ""
	var args []any
	if k == 1 { // a lone result as parameters: pgx encodes no array (a third of the allocations)
		r := batch[0]
		args = []any{pgtype.UUID{Bytes: r.id, Valid: true}, r.ok, int32(r.code), float64(r.latency) / float64(time.Millisecond), r.err}
	} else {
		ids, oks, codes, lat, errs := make([][16]byte, k), make([]bool, k), make([]int32, k), make([]float64, k), make([]string, k)
		for i, r := range batch {
			ids[i], oks[i], codes[i], lat[i], errs[i] = r.id, r.ok, int32(r.code), float64(r.latency)/float64(time.Millisecond), r.err
		}
		args = []any{ids, oks, codes, lat, errs}
	}
	sql := n.recordSQL[b2i(async)][b2i(k == 1)]
	// The statement returns the delivered ones as a count and the others one by one (to log).
	if async { // no fence: the read stays on this stack (query), as do outs and delivered
		err = n.query(ctx, sql, args, func(rows pgx.Rows) error { return readAttempts(rows, &outs, &delivered) })
	} else {
		var fo []undelivered
		var fd int64
		err = n.fenced(ctx, fk, sql, args, func(rows pgx.Rows) error { return readAttempts(rows, &fo, &fd) })
		outs, delivered = fo, fd
	}
	if err != nil {
		return nil, 0, err
	}
	return outs, delivered, nil
}

// readAttempts reads writeAttempts' rows: the delivered ones as a count, the others one by one.
func readAttempts(rows pgx.Rows, outs *[]undelivered, delivered *int64) error {
	*outs, *delivered = (*outs)[:0], 0
	for rows.Next() {
		var o undelivered
		var id pgtype.UUID
		if err := rows.Scan(&id, &o.status, &o.attempts); err != nil {
			return err
		}
		if !id.Valid {
			*delivered = int64(o.attempts)
			continue
		}
		o.id = id.Bytes
		*outs = append(*outs, o)
	}
	return rows.Err()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// recordStatement returns writeAttempts' statement: for Deliver's and Do's records (async) a
// commit that does not wait for its WAL flush (synchronous_commit off for the statement's own
// transaction, set in its first CTE), which the next synchronous commit makes: a record lost in a
// crash leaves its notification claimed and pending, and the leader posts it again after the
// lease, as when the process dies before its record; the results as parameters of one (single) or
// as arrays. The schedule and the jitter, fixed for the notifier, are literals of the statement.
func (n *Notifier) recordStatement(async, single bool) string {
	sched := make([]string, len(n.o.schedule))
	for i, d := range n.o.schedule {
		sched[i] = strconv.FormatFloat(d.Seconds(), 'g', -1, 64)
	}
	schedule := `'{` + strings.Join(sched, ",") + `}'::float8[]`
	jitter := strconv.FormatFloat(n.o.jitter, 'g', -1, 64) + `::float8`
	cte, gate := "", ""
	if async {
		cte, gate = `async as (select set_config('synchronous_commit', 'off', true)),`, ` where (select true from async)`
	}
	results := `select * from unnest($1::uuid[], $2::bool[], $3::int[], $4::float8[], $5::text[]) as r(id, ok, code, lat, err)`
	if single {
		results = `select $1::uuid as id, $2::bool as ok, $3::int as code, $4::float8 as lat, $5::text as err`
	}
	return `with ` + cte + ` r as (
	` + results + gate + `),
u as (
	update ` + n.table + ` t set attempts = t.attempts + 1, tries = t.tries + 1, last_status = nullif(r.code, 0), updated_at = now(),
		last_error = case when r.ok then null else r.err end,
		delivered_at = case when r.ok then now() end, latency_ms = case when r.ok then r.lat end,
		status = case when r.ok then 'delivered' when t.attempts + 1 > cardinality(` + schedule + `) then 'failed' else 'pending' end,
		next_attempt_at = case when r.ok then t.next_attempt_at when t.attempts + 1 > cardinality(` + schedule + `) then 'infinity'
			else ` + dueNow + ` + make_interval(secs => (` + schedule + `)[t.attempts + 1] * (1 - ` + jitter + ` + 2 * ` + jitter + ` * random())) end
	from r where t.id = r.id and t.` + stillPending + `
	returning t.id, t.status, t.attempts, t.tries),
a as (
	insert into ` + n.attempts + ` (id, n, status_code, latency_ms, error)
	select u.id, u.tries, r.code, r.lat, nullif(r.err, '') from u join r using (id) where not r.ok
	on conflict do nothing)
select null::uuid, 'delivered', count(*)::int from u where status = 'delivered'
union all
select id, status, attempts from u where status <> 'delivered'`
}

// logUndelivered counts and logs the attempts of batch that writeAttempts recorded as failed
// (outs), each in its attempt's trace and span.
func (n *Notifier) logUndelivered(ctx context.Context, batch []result, outs []undelivered, log *slog.Logger) {
	if len(outs) == 0 {
		return
	}
	byID := make(map[uuid.UUID]result, len(outs))
	for _, r := range batch {
		if !r.ok {
			byID[r.id] = r
		}
	}
	for _, o := range outs {
		r := byID[o.id]
		rctx := trace.ContextWithSpanContext(ctx, r.span) // the log line carries the attempt's trace and span ids
		if o.status == "failed" {
			n.stats.failedAttempts.Add(1)
			n.stats.failed.Add(1)
			n.metrics.givenUp.Inc()
			log.ErrorContext(rctx, "notify: no attempt left; the notification is failed", slog.String("id", o.id.String()),
				slog.String("receiver", r.receiver), slog.Int("attempts", o.attempts), slog.String("err", r.err))
			continue
		}
		n.stats.failedAttempts.Add(1)
		log.InfoContext(rctx, "notify: attempt failed; retrying on schedule", slog.String("id", o.id.String()),
			slog.String("receiver", r.receiver), slog.Int("attempt", o.attempts), slog.Int("status", r.code), slog.String("err", r.err))
	}
}

// purge deletes delivered notifications older than the retention (and their attempts). It runs
// on the leader of partition 0 (all of them with one partition).
func (n *Notifier) purge(ctx context.Context, tok lock.Token) error {
	fk := fenceKey{tok: tok, resource: n.resource(0)}
	for ctx.Err() == nil {
		var deleted int64
		err := n.fenced(ctx, fk, `with d as (delete from `+n.table+` where id in (select id from `+n.table+`
				where status = 'delivered' and delivered_at < now() - make_interval(secs => $1) limit 1000) returning id),
			a as (delete from `+n.attempts+` where id in (select id from d))
			select count(*) from d`, []any{n.o.retention.Seconds()}, func(rows pgx.Rows) (err error) {
			deleted, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
			return err
		})
		if err != nil || deleted < 1000 {
			return err
		}
	}
	return nil
}
