package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txkit/txkit/internal/pgutil"
)

// Posting from Do (docs/notify.md, "Posting right after the commit"): Enqueue, given Do's ctx and
// tx, writes the notification already claimed by this process — its due time past the lease, as
// Deliver's claim sets it — and the collector keeps what the post needs, so that once the
// transaction has committed Do posts each notification with no statement before the post. The
// attempts are recorded off the caller's path (later): Flush and Run's exit wait for them.

// collected is a notification Enqueue wrote, claimed, in Do's transaction.
type collected struct {
	d        due
	enqueued time.Time // when Enqueue wrote it: its lease runs from then
	taken    bool      // not a notification: a deferred insert found its receiver and key (or id) taken
}

// sendAtOnce, in a ctx of Do's fn, makes Enqueue send its insert at once (Do's second run of fn).
type sendAtOnce struct{}

// insertClaimed is the insert of a notification Enqueue defers in Do's transaction
// (deferEnqueue), on table: a plain insert, so that a receiver and key already taken fails in
// PostgreSQL — the transaction cannot commit after Enqueue returned a new id for a key whose
// notification has another one.
func insertClaimed(table string) string {
	return `insert into ` + table + ` (id, receiver, key, payload, trace_context, claimed, next_attempt_at)
	values ($1, $2, $3, $4, nullif($5, ''), true, clock_timestamp() + make_interval(secs => $6)) returning created_at`
}

// deferEnqueue queues nt's insert, claimed, in Do's transaction, to go out with the transaction's
// next statement or its commit (pgutil.LazyTx.Defer), and the notification to be posted once it
// is committed. False when the transaction has ended.
func (n *Notifier) deferEnqueue(c *pgutil.Collector[collected], nt Notification, id uuid.UUID, trace string) bool {
	e := &deferred{c: c, row: collected{enqueued: time.Now(), d: due{Delivery: Delivery{ID: id, Receiver: nt.Receiver,
		Key: nt.Key, Payload: append(json.RawMessage(nil), nt.Payload...)}, trace: trace, attempt: 1}}}
	e.id = pgtype.UUID{Bytes: id, Valid: true}
	e.args = [...]any{&e.id, nt.Receiver, nt.Key, []byte(e.row.d.Payload), trace, n.lease}
	e.dest = [...]any{&e.row.d.CreatedAt}
	return c.Defer(pgutil.Deferred{SQL: n.insert, Args: e.args[:], Dest: e.dest[:], Done: e.done})
}

// deferred is a notification's insert of Do's transaction waiting to be sent.
type deferred struct {
	c    *pgutil.Collector[collected]
	row  collected
	id   pgtype.UUID // the argument, pointed to: an interface holding a pointer costs no allocation
	args [6]any      // the statement's arguments and destination, in the one allocation
	dest [1]any
}

// done collects the inserted notification for Do to post, or marks the transaction to be run
// again when the insert found its key taken.
func (e *deferred) done(_ context.Context, err error) error {
	switch {
	case err == nil:
		e.c.Rows = append(e.c.Rows, e.row)
		return nil
	case pgutil.IsUniqueViolation(err):
		e.c.Rows = append(e.c.Rows, collected{taken: true})
		return fmt.Errorf("%w: %w", errTaken, err)
	}
	return fmt.Errorf("notify: enqueue %s/%s: %w", e.row.d.Receiver, e.row.d.Key, err)
}

// postBudget is how long after its Enqueue a notification Do collected may still be posted by Do:
// the post (at most the call timeout) then ends at least directLease-postBudget before the claim's
// lease does, which leaves its record the time to land. A notification whose transaction went on
// longer is left to the leader, which takes it when the lease has passed.
const postBudget = directLease / 2

// Do runs fn in a transaction on the notifier's pool and commits it when fn returns nil (rolls it
// back otherwise, and returns fn's error, wrapped). The notifications fn enqueues with
// [Notifier.Enqueue], given fn's ctx and tx, are posted from this process right after the commit,
// before Do returns (several at once, at most a receiver's Concurrency at a time), with no claim
// statement: Enqueue writes them claimed, its insert going out with tx's next statement or the
// commit. When the receiver and key have a notification already, that statement fails, and Do
// rolls back and runs fn once more with the inserts sent at once (Enqueue then returns the
// existing id): fn runs twice for a key enqueued before. The attempts are recorded in the
// background ([Notifier.Flush]). A failed attempt is not Do's error: it is recorded, logged, and
// retried by the leader on the schedule. What Do does not post — its ctx ended at the commit, the
// transaction ran on more than 2.5 s after the Enqueue, the process died — the leader delivers
// once the claim's lease (the call timeout + 5 s) has passed. A notification enqueued while a
// savepoint of tx (tx.Begin) is open is not Do's to post: Deliver or the leader posts it. Do
// blocks for the transaction and the posts (each at most the call timeout); ctx scopes both.
func (n *Notifier) Do(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	// A notification written while a savepoint is open is not collected (pgutil.Collecting):
	// Enqueue writes it unclaimed, for Deliver or the leader, and Do never posts a notification
	// that was not committed.
	rows, err := pgutil.Collect[collected](ctx, n.pool, n, fn)
	if err != nil && slices.ContainsFunc(rows, func(r collected) bool { return r.taken }) {
		// An Enqueue returned a new id for a key that has a notification already (a retry of the
		// business operation, usually): the transaction did not commit, and fn runs again with
		// the inserts sent at once, so that Enqueue returns the existing id.
		rows, err = pgutil.Collect[collected](context.WithValue(ctx, sendAtOnce{}, true), n.pool, n, fn)
	}
	if err != nil {
		return fmt.Errorf("notify: transaction on %s: %w", n.name, err)
	}
	if len(rows) == 0 || !n.o.postAfterCommit || ctx.Err() != nil {
		return nil
	}
	now := time.Now()
	posts := rows[:0]
	for _, r := range rows {
		if now.Sub(r.enqueued) <= postBudget {
			posts = append(posts, r)
		}
	}
	if len(posts) == 1 {
		n.first(ctx, posts[0].d)
		return nil
	}
	var wg sync.WaitGroup
	slots := map[string]chan struct{}{}
	for _, p := range posts {
		slot := slots[p.d.Receiver]
		if slot == nil {
			slot = make(chan struct{}, n.receivers[p.d.Receiver].Concurrency)
			slots[p.d.Receiver] = slot
		}
		slot <- struct{}{}
		wg.Go(func() {
			defer func() { <-slot }()
			n.first(ctx, p.d)
		})
	}
	wg.Wait()
	return nil
}

// first makes the first attempt of d, a notification Do wrote claimed, and hands its result to the
// background records.
func (n *Notifier) first(ctx context.Context, d due) {
	n.later.add(n.attempt(ctx, n.receivers[d.Receiver], n.direct[d.Receiver], d))
}

// Flush waits until the attempts [Notifier.Do] made so far are recorded, or ctx ends (then it
// returns ctx's error). A record is bounded by the claim's lease; an attempt not recorded is
// posted again by the leader. [Notifier.Run] waits for them too before it returns.
func (n *Notifier) Flush(ctx context.Context) error {
	if err := n.later.wait(ctx); err != nil {
		return fmt.Errorf("notify: flush %s: %w", n.name, err)
	}
	return nil
}

// later records the results of Do's attempts off the callers' path, in shared statements: a
// result that finds no goroutine of later running starts one, which waits up to linger for more
// results (as the leader's recorder does: nobody waits for the record, and one statement and one
// commit then serve the results of consecutive Do calls, even one client's) or until max are
// queued or Flush waits, then sends what is queued, max at a time, and what arrives meanwhile,
// and ends when nothing is left.
type later struct {
	max    int
	linger time.Duration
	flush  func(rs []result) // its own bounded context; logs what it could not write
	kick   chan struct{}     // buffered 1: send what is queued now
	mu     sync.Mutex
	queue  []result
	idle   chan struct{} // closed when the running goroutine ends; nil while none runs
}

func (l *later) add(r result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queue = append(l.queue, r)
	if l.idle == nil {
		l.idle = make(chan struct{})
		go l.send(l.idle)
	}
	if len(l.queue) >= l.max {
		l.hurry()
	}
}

// hurry ends the running goroutine's linger.
func (l *later) hurry() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// send records the queue, a batch at a time, until it is empty.
func (l *later) send(idle chan struct{}) {
	defer close(idle)
	linger := time.NewTimer(l.linger)
	select {
	case <-linger.C:
	case <-l.kick:
		linger.Stop()
	}
	for {
		l.mu.Lock()
		k := min(len(l.queue), l.max)
		if k == 0 {
			l.idle = nil
			l.mu.Unlock()
			return
		}
		batch := l.queue[:k:k]
		l.queue = append([]result(nil), l.queue[k:]...)
		l.mu.Unlock()
		l.flush(batch)
	}
}

// wait returns once the results added so far are recorded (or could not be), or ctx's error.
func (l *later) wait(ctx context.Context) error {
	l.mu.Lock()
	idle := l.idle
	l.mu.Unlock()
	if idle == nil {
		return nil
	}
	l.hurry()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
