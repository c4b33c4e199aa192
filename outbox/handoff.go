package outbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/pgutil"
)

// The hand-over (docs/outbox.md, "Publishing right after the commit"): [Outbox.Do] collects the
// rows its transaction enqueues and, once the transaction has committed, gives each to a relay of
// this process that leads the row's partition. That relay publishes a row whose key had nothing
// pending when it was enqueued at once, without reading the table; any other row only wakes its
// drain, which reads the table as a NOTIFY would have made it. A partition led elsewhere gets
// one NOTIFY, sent after the commit in a transaction of its own, so that the business commits do
// not queue on the notification lock PostgreSQL holds from a NOTIFY's pre-commit to its commit.

// handed is a committed row given to a relay by Do.
type handed struct {
	x         row // x.created: the enqueuing transaction's start, as the relay's reads give it
	part      int
	first     bool      // the key had no pending row when the row was enqueued (always true without a key)
	committed time.Time // when Do saw the commit
}

// Do runs fn in a transaction on the outbox's pool and commits it when fn returns nil (rolls back
// otherwise, and returns fn's error). The messages fn enqueues with [Outbox.Enqueue] — given fn's
// ctx and tx — go to the publisher right after the commit: a [Relay] of this process that leads
// their partition publishes each whose key has nothing earlier pending at once; otherwise the
// leader is woken. They need no NOTIFY in the transaction, so concurrent commits do not queue on
// PostgreSQL's notification lock. A process that dies between the commit and the hand-over loses
// nothing: the leader's next poll reads the rows. The transaction's begin goes out with fn's first
// statement that has arguments, and an Enqueue's insert with tx's next statement or the commit,
// costing no round trip of their own: an insert that fails (a duplicate ID: [ErrDuplicate]) makes
// Do return its error and commit nothing. A message enqueued while a savepoint of tx (tx.Begin) is
// open is sent at once and not handed over: the leader's poll reads it if it committed. Do blocks
// for the transaction; ctx scopes it.
func (ob *Outbox) Do(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	rows, err := pgutil.Collect[handed](ctx, ob.pool, ob, fn)
	if err != nil {
		return fmt.Errorf("outbox: transaction on %s: %w", ob.name, err)
	}
	if len(rows) > 0 && ob.o.handOff {
		ob.handOff(ctx, rows)
	}
	return nil
}

// addRelay and removeRelay keep the relays running in this process, which Do hands rows to.
func (ob *Outbox) addRelay(r *Relay) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	ob.relays = append(ob.relays, r)
}

func (ob *Outbox) removeRelay(r *Relay) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	for i, x := range ob.relays {
		if x == r {
			ob.relays = append(ob.relays[:i], ob.relays[i+1:]...)
			return
		}
	}
}

// handOff gives committed rows to the relays of this process that lead their partitions, and
// sends one NOTIFY, outside any business transaction, when some partition is led elsewhere. A
// failed NOTIFY is ignored: the leader's poll reads the rows.
func (ob *Outbox) handOff(ctx context.Context, rows []handed) {
	now := time.Now()
	ob.mu.Lock()
	relays := append([]*Relay(nil), ob.relays...)
	ob.mu.Unlock()
	wake := false
	for _, h := range rows {
		h.committed = now
		given := false
		for _, r := range relays {
			if r.inboxes[h.part].put(h) {
				given = true
				break
			}
		}
		wake = wake || !given
	}
	if wake && ob.o.notify {
		ob.wakeLeader(ctx)
	}
}

// wakeLeader sends the NOTIFY that wakes a leader in another process, in one round trip: a
// transaction of its own whose commit does not wait for the flush, so that PostgreSQL's
// notification lock, held until the commit ends, is held only briefly (a notification lost to a
// crash costs a poll's wait, nothing more).
func (ob *Outbox) wakeLeader(ctx context.Context) {
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(asyncCommit)
	b.Queue(ob.q.notify, ob.o.channel)
	b.Queue("commit")
	_ = ob.pool.SendBatch(nctx, b).Close()
}

// inbox is one partition's hand-over point in a relay: open while the relay leads the partition.
type inbox struct {
	mu       sync.Mutex
	term     *leader.Term // nil while the relay does not lead the partition
	rows     []handed
	overflow bool                // rows were refused for room: the drain must read the table
	seen     map[int64]time.Time // rows this term held (read or handed), for handTTL
	pruned   time.Time
	wake     chan struct{} // buffered 1
}

const (
	// maxInbox bounds the rows waiting in an inbox; past it a hand-over only wakes the drain.
	maxInbox = 4096
	// handTTL is how long after its commit a handed row is taken as it is: an older one wakes the
	// drain instead, so that the rows the term held need to be remembered only that long.
	handTTL = 2 * time.Second
)

func newInbox() *inbox { return &inbox{wake: make(chan struct{}, 1)} }

// open starts the inbox's term: it takes rows until close.
func (in *inbox) open(t *leader.Term) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.term, in.rows, in.overflow, in.seen = t, nil, false, map[int64]time.Time{}
}

// close ends the term: rows not taken stay pending in the table for the next leader's reads.
func (in *inbox) close() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.term, in.rows, in.overflow, in.seen = nil, nil, false, nil
}

// put hands h over; false when the relay does not lead h's partition.
func (in *inbox) put(h handed) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.term == nil {
		return false
	}
	if len(in.rows) < maxInbox {
		in.rows = append(in.rows, h)
	} else {
		in.overflow = true
	}
	signal(in.wake)
	return true
}

// hold notes ids as held in this term (read by a drain or handed over).
func (in *inbox) hold(ids ...int64) {
	now := time.Now()
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.seen == nil {
		return
	}
	for _, id := range ids {
		in.seen[id] = now
	}
	if now.Sub(in.pruned) > handTTL {
		for id, at := range in.seen {
			if now.Sub(at) > 2*handTTL {
				delete(in.seen, id)
			}
		}
		in.pruned = now
	}
}

// take returns the rows to publish now — handed over recently, first of their keys, never held in
// this term — and whether the table must be read for the others. room bounds how many it returns;
// the rest are left to the read too.
func (in *inbox) take(room int) (direct []row, read bool) {
	now := time.Now()
	in.mu.Lock()
	defer in.mu.Unlock()
	rows := in.rows
	in.rows = nil
	read, in.overflow = in.overflow, false
	for _, h := range rows {
		if _, ok := in.seen[h.x.id]; ok {
			continue // read by a drain first: held, or recorded already
		}
		if !h.first || now.Sub(h.committed) > handTTL || len(direct) >= room {
			read = true
			continue
		}
		in.seen[h.x.id] = now
		direct = append(direct, h.x)
	}
	return direct, read
}
