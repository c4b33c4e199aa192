package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// due is a notification taken for delivery: the delivery, and what its attempt's span needs.
type due struct {
	Delivery
	trace   string    // the trace context Enqueue stored (obs.EncodeTrace); "" none
	attempt int       // this attempt's number: 1 + the attempts ever made (redeliveries go on counting)
	claimed bool      // its first attempt was claimed (by Deliver or a leader) before this take
	at      time.Time // its due time when the leader took it
}

// claimFirst claims, for the leader, the notifications of batch whose first attempt nobody has
// claimed, with the conditional update Deliver claims with, and returns batch without those a
// Deliver call claimed first: only one of them posts a notification's first attempt. The claim is
// not fenced (a deposed leader's claim only leaves the notification to the next leader) and moves
// no due time: the leader remembers what it took, as for the others.
func (n *Notifier) claimFirst(ctx context.Context, batch []due) ([]due, error) {
	var fresh []pgtype.UUID
	for _, d := range batch {
		if !d.claimed {
			fresh = append(fresh, pgtype.UUID{Bytes: d.ID, Valid: true})
		}
	}
	if len(fresh) == 0 {
		return batch, nil
	}
	// The rows are locked in the order of their ids, as Deliver's claims lock them: two claims
	// of overlapping sets never deadlock.
	rows, err := n.pool.Query(ctx, `with c as (select id from `+n.table+` where id = any($1::uuid[]) and `+stillPending+` and not claimed
	order by id for update)
update `+n.table+` t set claimed = true from c where t.id = c.id returning t.id`, pgx.QueryExecModeExec, fresh)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	won, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (uuid.UUID, error) {
		var id uuid.UUID
		return id, r.Scan((*[16]byte)(&id))
	})
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	ours := make(map[uuid.UUID]bool, len(won))
	for _, id := range won {
		ours[id] = true
	}
	kept := batch[:0]
	for _, d := range batch {
		if d.claimed || ours[d.ID] {
			kept = append(kept, d)
		}
	}
	return kept, nil
}

// flight is the leader's view of one receiver: its queue of taken notifications, how many are
// taken and not yet recorded, and the circuit breaker.
type flight struct {
	queue     chan due
	held      int                     // taken and not yet attempted (queued or in flight)
	taken     map[uuid.UUID]time.Time // taken and not yet recorded (not to be taken again): its due time
	due       dueFrom                 // the watermark of the scans (due.go); the dispatcher's own
	failures  int                     // consecutive failed deliveries
	openUntil time.Time               // the breaker holds deliveries back until then (zero: closed)
	probing   bool                    // half open: the one delivery allowed through is in flight
	poke      func()                  // wakes the dispatcher
	low       int                     // held at which the queue is refilled
	dry       uint64                  // 1 + the wake generation at which a take found no more due: 0 none
	shownOpen bool                    // the circuit gauge counts this receiver's circuit as open
	direct    bool                    // Deliver's breaker of this process (no queue), not a term's
}

// waker wakes the dispatcher. A take that finds fewer due notifications than it asked for marks
// the receiver dry: the dispatcher takes for it again only after something may have made more
// due — a NOTIFY (enqueue, redeliver), the tick, a failed attempt recorded — so that a receiver
// whose due notifications are all taken costs no query per delivery.
type waker struct {
	ch  chan struct{}
	gen atomic.Uint64 // bumped by fresh, and by the dispatcher for each of the leader job's wake-ups
}

// poke wakes the dispatcher because there is room in a receiver's queue.
func (w *waker) poke() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// fresh wakes the dispatcher because more notifications may be due.
func (w *waker) fresh() {
	w.gen.Add(1)
	w.poke()
}

// dispatch takes due notifications for every receiver whose queue is running low and whose
// breaker is not open, up to the batch size taken and unrecorded per receiver, and queues them
// for the receiver's workers, remembering them until their results are recorded so that it does
// not take them twice.
func (n *Notifier) dispatch(ctx context.Context, w *waker, flights map[string]*flight) error {
	names := make([]string, 0, len(flights))
	for name := range flights {
		names = append(names, name)
	}
	sort.Strings(names)
	now := time.Now()
	for _, name := range names {
		f := flights[name]
		gen := w.gen.Load() // before the query: a NOTIFY during it makes the receiver wet again
		n.mu.Lock()
		free := n.o.batch - f.held
		if f.held > f.low || (!f.openUntil.IsZero() && now.Before(f.openUntil)) || f.dry == gen+1 {
			free = 0 // enough queued, the breaker is open, or nothing more was due
		}
		n.mu.Unlock()
		if free <= 0 {
			continue
		}
		n.mu.Lock()
		skip := make([]pgtype.UUID, 0, len(f.taken)) // binary; a uuid.UUID is sent as text
		var oldest time.Time                         // the earliest due time taken and unrecorded
		for id, at := range f.taken {
			skip = append(skip, pgtype.UUID{Bytes: id, Valid: true})
			if oldest.IsZero() || at.Before(oldest) {
				oldest = at
			}
		}
		n.mu.Unlock()
		sn, batch, err := n.takeDue(ctx, name, free, skip, f.due.at)
		if err != nil {
			return err
		}
		var first time.Time
		if len(batch) > 0 {
			first = batch[0].at
		}
		f.due.advance(sn, first, oldest)
		found := len(batch) // what was due, before Deliver calls may claim some first
		if batch, err = n.claimFirst(ctx, batch); err != nil {
			return fmt.Errorf("take due notifications of %s: %w", name, err)
		}
		n.mu.Lock()
		f.held += len(batch)
		if found < free {
			f.dry = gen + 1
		}
		for _, d := range batch {
			f.taken[d.ID] = d.at
		}
		n.mu.Unlock()
		for _, d := range batch {
			f.queue <- d // room for batch held ones: never blocks
		}
	}
	return nil
}

// takeDue reads up to free notifications of receiver name that are due, from the watermark from
// on, except those in skip; it returns them in due order with the scan's snap (due.go).
func (n *Notifier) takeDue(ctx context.Context, name string, free int, skip []pgtype.UUID, from time.Time) (sn snap, batch []due, err error) {
	// Taking writes nothing: only the leader delivers, and it remembers what it has taken
	// until the result is recorded. When it dies, whatever it had taken is still due and the
	// next leader sends it again (same id; receivers apply once). A deposed leader that has
	// not noticed yet may send a duplicate the same way; its records are refused by the fence.
	// QueryExecModeExec: planned with this call's values, so PostgreSQL hashes the skip list
	// instead of comparing every row with each of its ids (a prepared statement's generic
	// plan does that).
	// The scan starts at the receiver's watermark (due.go), not at the delivered history the
	// due index keeps, and reports its start and the table's writers (one row of nulls when nothing
	// is due).
	rows, err := n.pool.Query(ctx, `with s as (select `+snapColumns(n.table)+`)
select s.at, s.writers, d.id, d.receiver, d.key, d.payload, d.created_at, d.trace_context, d.attempt, d.claimed, d.next_attempt_at
from s left join lateral (select id, receiver, key, payload, created_at, coalesce(trace_context, '') as trace_context,
	tries + 1 as attempt, claimed, next_attempt_at from `+n.table+`
	where status = 'pending' and receiver = $1 and next_attempt_at >= $4 and next_attempt_at <= s.at and id <> all($3::uuid[])
	order by next_attempt_at limit $2) d on true`, pgx.QueryExecModeExec, name, free, skip, from)
	if err != nil {
		return snap{}, nil, fmt.Errorf("take due notifications of %s: %w", name, err)
	}
	var (
		id           pgtype.UUID
		rcv, key, tc pgtype.Text
		p            []byte
		created, at  pgtype.Timestamptz
		attempt      pgtype.Int4
		claimed      pgtype.Bool
	)
	_, err = pgx.ForEachRow(rows, []any{&sn.at, &sn.writers, &id, &rcv, &key, &p, &created, &tc, &attempt,
		&claimed, &at}, func() error {
		if id.Valid {
			batch = append(batch, due{Delivery: Delivery{ID: id.Bytes, Receiver: rcv.String, Key: key.String,
				Payload: append(json.RawMessage(nil), p...), CreatedAt: created.Time}, trace: tc.String,
				attempt: int(attempt.Int32), claimed: claimed.Bool, at: at.Time})
		}
		return nil
	})
	if err != nil {
		return snap{}, nil, fmt.Errorf("take due notifications of %s: %w", name, err)
	}
	return sn, batch, nil
}

// delivering reports whether any notification a term took (its flights) is still queued or being
// delivered: whether more results are coming.
func (n *Notifier) delivering(flights map[string]*flight) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, f := range flights {
		if f.held > 0 {
			return true
		}
	}
	return false
}

// forget makes a batch's notifications takeable again once their results are recorded (the record
// moved their due time or ended them), or could not be (then they are due again, as they should).
func (n *Notifier) forget(flights map[string]*flight, batch []result) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, r := range batch {
		delete(flights[r.receiver].taken, r.id)
	}
}

// done frees a place in the receiver's count of taken notifications, so the dispatcher takes
// more before the results are recorded (the recorder's backlog is bounded by the results
// channel, which blocks the workers when full).
func (n *Notifier) done(f *flight) {
	n.mu.Lock()
	f.held--
	refill := f.held == f.low
	n.mu.Unlock()
	if refill {
		f.poke()
	}
}
