package notify

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// The due index and the leader's watermark (docs/notify.md, "The due index").
//
// The leader finds due notifications on the index (receiver, next_attempt_at), which has no
// predicate and no column that the record of a success changes: that record is a HOT update (no
// new index entries). The index keeps the entries of delivered notifications, so the leader's
// scans of a receiver start at its watermark, dueFrom.at, below which no notification of the
// receiver is pending, nor can become so. Every due time is written as dueNow (or later): the
// clock read by a statement that holds the table's row-exclusive lock, which its transaction
// keeps until it ends. So a notification due before a scan's start s that is not committed yet
// belongs to a transaction that held the lock when the scan read pg_locks (after s). Once a later
// scan finds none of those transactions holding it any more, they have all ended, and every
// snapshot taken after that sees each notification due before s that will ever be committed: the
// scan after it moves the watermark up to s, or to the earliest pending notification it saw
// before s, or to the earliest the leader has taken and not recorded. A transaction that writes
// the table and stays open (or prepared) holds the watermark, and the scans walk what was
// delivered since, until it ends; other transactions do not. The watermark is kept in the marks
// table, at most once a second, for the next term.

// dueNow is the due time "now" of every statement that writes one: the clock when the statement
// runs (now() is its transaction's start, which may come before the lock).
const dueNow = `clock_timestamp()`

// dueSlack is how far below a certified scan's start the watermark stays: room for the server's
// clock stepping back (NTP, a failover to a server whose clock is a little behind). A step back
// by more hides the notifications written meanwhile below the watermark (docs/notify.md).
const dueSlack = 100 * time.Millisecond

// saveEvery is how far the watermark moves before the leader stores it again.
const saveEvery = time.Second

// dueFrom is the leader's watermark of one receiver, and the scans that will move it next.
type dueFrom struct {
	at      time.Time // the scans start here (zero: at the oldest notification)
	saved   time.Time // as stored in the marks table
	cand    time.Time // a scan's start, not yet certified (zero: none)
	writers []string  // the transactions writing the table at that scan (pg_locks' virtualtransaction)
	next    time.Time // certified: the watermark's next value, for the next scan to apply (zero: none)
}

// snap is what a scan reports about itself: its start and the transactions writing the table.
type snap struct {
	at      time.Time
	writers []string
}

// snapColumns returns the columns of a CTE "s" giving a statement's snap for table (quoted).
func snapColumns(table string) string {
	return `now() as at, array(select virtualtransaction from pg_locks where relation = '` + strings.ReplaceAll(table, "'", "''") +
		`'::regclass and mode = 'RowExclusiveLock') as writers`
}

// advance moves the watermark after a scan s of the window [d.at, s.at] in which the earliest
// pending notification was due at first (zero: none), the leader having taken and not recorded
// notifications due from taken on (zero: none).
func (d *dueFrom) advance(s snap, first, taken time.Time) {
	if !d.next.IsZero() { // certified by the scan before: this scan's snapshot sees all below it
		w := d.next
		for _, t := range []time.Time{first, taken} {
			if !t.IsZero() && t.Before(w) {
				w = t
			}
		}
		if w.After(d.at) {
			d.at = w
		}
		d.next = time.Time{}
	}
	if !d.cand.IsZero() && !slices.ContainsFunc(s.writers, func(v string) bool { return slices.Contains(d.writers, v) }) {
		d.next, d.cand = d.cand.Add(-dueSlack), time.Time{}
	}
	if d.cand.IsZero() {
		d.cand, d.writers = s.at, s.writers
	}
}

// loadMarks sets the watermarks of flights to the stored ones (zero where none is stored, or
// when the marks table cannot be read: the scans then start at the oldest notification).
func (n *Notifier) loadMarks(ctx context.Context, flights map[string]*flight) error {
	names := make([]string, 0, len(flights))
	for name := range flights {
		names = append(names, name)
	}
	rows, err := n.pool.Query(ctx, `select receiver, due_from from `+n.marks+` where receiver = any($1)`, names)
	if err != nil {
		return fmt.Errorf("read the due marks: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var at time.Time
		if err := rows.Scan(&name, &at); err != nil {
			return fmt.Errorf("read the due marks: %w", err)
		}
		if f := flights[name]; f != nil {
			f.due.at, f.due.saved = at, at
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the due marks: %w", err)
	}
	return nil
}

// saveMarks stores the watermarks of flights that moved saveEvery or more since they were
// stored. It is not fenced: a watermark, once certified, stays true (see above).
func (n *Notifier) saveMarks(ctx context.Context, flights map[string]*flight) error {
	var names []string
	var ats []time.Time
	for name, f := range flights {
		if f.due.at.Sub(f.due.saved) >= saveEvery {
			names, ats = append(names, name), append(ats, f.due.at)
		}
	}
	if len(names) == 0 {
		return nil
	}
	if _, err := n.pool.Exec(ctx, `insert into `+n.marks+` (receiver, due_from) select * from unnest($1::text[], $2::timestamptz[])
on conflict (receiver) do update set due_from = greatest(`+n.marks+`.due_from, excluded.due_from)`, names, ats); err != nil {
		return fmt.Errorf("store the due marks: %w", err)
	}
	for i, name := range names {
		flights[name].due.saved = ats[i]
	}
	return nil
}

// timeOf returns t's time, or the zero time when t is null.
func timeOf(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time
}
