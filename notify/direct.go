package notify

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Deliver makes the first attempt of notification id at once, from this process: call it after
// the transaction that enqueued it ([Notifier.Enqueue]) has committed. It claims the
// notification, posts it signed and records the attempt. The first claim of a notification wins
// (Deliver's or the leader's), so two processes that both try never both post it. It returns nil
// when the receiver acknowledged it, and also when the attempt is not this call's to make
// (claimed before, or held back by this process's circuit breaker for the receiver): the leader
// has it. A failed attempt returns an error; the notification stays pending and the leader
// retries it on the schedule, as it does one whose attempt was not recorded within the call
// timeout + 5 s (the process died). An unknown id (or one whose transaction has not committed)
// returns an error wrapping [ErrNotFound]. It blocks for the claim, the post (at most the call
// timeout) and the record; the caller may run it in a goroutine of its own. Concurrent calls
// share their claims' and their records' statements.
func (n *Notifier) Deliver(ctx context.Context, id uuid.UUID) error {
	d, ok, err := n.claim(ctx, id)
	if err != nil || !ok {
		return err
	}
	r := n.attempt(ctx, n.receivers[d.Receiver], n.direct[d.Receiver], d)
	// Recorded as the leader records, without its fence: the claim made this attempt ours. The
	// record does not end with the caller's ctx (it is bounded by the claim's lease): a post made
	// and not recorded is posted again by the leader.
	if _, err := n.records.do(r); err != nil {
		if r.skipped > 0 {
			return fmt.Errorf("notify: deliver %s: hold back: %w", id, err)
		}
		return fmt.Errorf("notify: deliver %s: record the attempt (the leader posts it again): %w", id, err)
	}
	if r.skipped == 0 && !r.ok {
		return fmt.Errorf("notify: deliver %s to %s: attempt %d failed (the leader retries it on schedule): %s", id, d.Receiver, d.attempt, r.err)
	}
	return nil
}

// directLease is how long a notification [Notifier.Deliver] claimed stays its own beyond the call
// timeout: the time to record the attempt before the leader may take it. It also bounds each of
// Deliver's grouped statements.
const directLease = 5 * time.Second

// newGroups sets up the statements the Deliver calls of this process share — claims, records —
// and the background records of Do's attempts.
func (n *Notifier) newGroups() {
	n.claims = &grouped[uuid.UUID, claimed]{max: n.o.batch, flush: n.claimBatch}
	n.records = &grouped[result, struct{}]{max: n.o.batch, flush: func(rs []result) ([]struct{}, error) {
		ctx, cancel := context.WithTimeout(context.Background(), directLease)
		defer cancel()
		return make([]struct{}, len(rs)), n.record(ctx, fenceKey{}, rs, n.o.log)
	}}
	n.later = later{max: n.o.batch, linger: recordLinger, kick: make(chan struct{}, 1), flush: func(rs []result) {
		ctx, cancel := context.WithTimeout(context.Background(), directLease)
		defer cancel()
		if err := n.record(ctx, fenceKey{}, rs, n.o.log); err != nil {
			n.fails.Log(ctx, n.o.log, "record", slog.LevelWarn, "notify: recording attempts failed; those notifications will be sent again",
				slog.Int("results", len(rs)), slog.Any("err", err))
		}
	}}
}

// claimed is the outcome of a claim: the notification, if this claim took it.
type claimed struct {
	d  due
	ok bool
}

// claim takes notification id for its first attempt from this process (claimBatch, shared with
// the concurrent calls). ok is false when it was claimed before or is no longer pending.
func (n *Notifier) claim(ctx context.Context, id uuid.UUID) (due, bool, error) {
	if err := ctx.Err(); err != nil {
		return due{}, false, fmt.Errorf("notify: deliver %s: %w", id, err)
	}
	c, err := n.claims.do(id)
	if err != nil {
		return due{}, false, fmt.Errorf("notify: deliver %s: claim: %w", id, err)
	}
	if c.ok {
		return c.d, true, nil
	}
	var exists bool
	if err := n.pool.QueryRow(ctx, `select exists (select from `+n.table+` where id = $1)`, id).Scan(&exists); err != nil {
		return due{}, false, fmt.Errorf("notify: deliver %s: %w", id, err)
	}
	if !exists {
		return due{}, false, fmt.Errorf("notify: deliver %s (was its transaction committed?): %w", id, ErrNotFound)
	}
	return due{}, false, nil
}

// claimBatch claims notifications ids for their first attempts from this process, in one
// statement: a conditional update that only the first claim of a notification passes (the
// leader's take claims unclaimed ones the same way), moving its due time past the post and its
// record so that the leader leaves it alone meanwhile. The rows are locked in the order of their
// ids, as the leader's claims lock them, so that two claims of overlapping sets never deadlock.
func (n *Notifier) claimBatch(ids []uuid.UUID) ([]claimed, error) {
	ctx, cancel := context.WithTimeout(context.Background(), directLease)
	defer cancel()
	arg := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		arg[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	// The claim's commit does not wait for its WAL flush (synchronous_commit off for this
	// statement's own transaction, set in its first CTE): it is visible to the others at once
	// all the same, which is all the claim is for, and the record that follows is a synchronous
	// commit, which flushes the claim too. Lost in a crash before that, it leaves the
	// notification to the leader, as a Deliver whose record failed does.
	rows, err := n.pool.Query(ctx, `with async as (select set_config('synchronous_commit', 'off', true)),
c as (select id from `+n.table+` where id = any($1::uuid[]) and `+stillPending+` and not claimed and (select true from async)
	order by id for update)
update `+n.table+` t set claimed = true, next_attempt_at = `+dueNow+` + make_interval(secs => $2), updated_at = now()
from c where t.id = c.id
returning t.id, t.receiver, t.key, t.payload, t.created_at, coalesce(t.trace_context, ''), t.tries + 1`,
		arg, (n.o.callTimeout + directLease).Seconds())
	if err != nil {
		return nil, err
	}
	won := map[uuid.UUID]due{}
	var d due
	var p []byte
	_, err = pgx.ForEachRow(rows, []any{(*[16]byte)(&d.ID), &d.Receiver, &d.Key, &p, &d.CreatedAt, &d.trace, &d.attempt}, func() error {
		d.Payload = append([]byte(nil), p...)
		won[d.ID] = d
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]claimed, len(ids))
	for i, id := range ids {
		out[i].d, out[i].ok = won[id]
		delete(won, id) // the same id twice in one batch: only its first call posts it
	}
	return out, nil
}

// admit returns how long the breaker of f (this process's, for Deliver) holds a delivery back: 0
// to send it now (a closed circuit, or the probe of a half-open one).
func (n *Notifier) admit(f *flight) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	switch {
	case f.openUntil.IsZero():
		return 0
	case now.Before(f.openUntil):
		return f.openUntil.Sub(now)
	case f.probing:
		return time.Second
	default:
		f.probing = true
		return 0
	}
}
