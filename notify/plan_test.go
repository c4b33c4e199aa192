package notify_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/notify"
)

// The statements that find notifications by id — Do's and Deliver's records, Deliver's claim —
// find them by the primary key, also once an analyze has seen the due index (pending rows only)
// nearly empty: they do not scan the due index, which holds the entries of every row delivered
// since the last vacuum.
func TestIntegrationByIDStatementsSkipDueIndex(t *testing.T) {
	w := newWorld(t)
	n := w.notifier(w.receivers()) // no elector: only Do and Deliver write
	ctx := t.Context()
	table := pgx.Identifier{w.sender.Name, "txkit_notify"}.Sanitize()

	// stats returns the table's updates and the due index's scans, once the updates reach want:
	// a backend reports its table and index counts together, so these include the scans of every
	// update counted.
	stats := func(want int64) (upd, dueScans int64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := w.sender.Pool.QueryRow(ctx, `select t.n_tup_upd, i.idx_scan from pg_stat_user_tables t
join pg_stat_user_indexes i on i.relid = t.relid and i.indexrelname = 'txkit_notify_due_at'
where t.schemaname = $1 and t.relname = 'txkit_notify'`, w.sender.Name).Scan(&upd, &dueScans)
			if err != nil {
				t.Fatalf("statistics: %v", err)
			}
			if upd >= want {
				return upd, dueScans
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d updates of %s counted after 30 s, want %d", upd, table, want)
			}
			time.Sleep(100 * time.Millisecond) // polling the statistics views
		}
	}

	const k = 12
	keys := func(prefix string) []string {
		ks := make([]string, k)
		for i := range ks {
			ks[i] = fmt.Sprintf("%s-%d", prefix, i)
		}
		return ks
	}
	// The delivered notifications the retention keeps, then an analyze: it counts no row in the
	// due index (PostgreSQL then takes it for "status = 'pending'" at about 1,000 rows).
	if _, err := w.sender.Pool.Exec(ctx, `insert into `+table+` (id, receiver, key, payload, status, delivered_at)
select gen_random_uuid(), 'shop', 'old-' || g, '{}', 'delivered', now() from generate_series(1, 2000) g`); err != nil {
		t.Fatalf("delivered rows: %v", err)
	}
	if _, err := w.sender.Pool.Exec(ctx, `vacuum analyze `+table, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("vacuum analyze: %v", err)
	}
	_, base := stats(0)

	for _, key := range keys("do") { // one Do each: a record each, or a few in one statement
		if _, err := w.doEnqueue(n, 1, key); err != nil {
			t.Fatalf("Do: %v", err)
		}
	}
	flush(t, n)
	for _, key := range keys("deliver") { // Deliver's claim (an update too), then its record
		nt := w.enqueue(n, "shop", key, 1)
		if err := n.Deliver(ctx, nt.ID); err != nil {
			t.Fatalf("Deliver %s: %v", key, err)
		}
	}
	for _, key := range append(keys("do"), keys("deliver")...) {
		rec, err := n.ByKey(ctx, "shop", key)
		if err != nil || rec.Status != notify.StatusDelivered {
			t.Fatalf("%s: %+v, %v; want delivered", key, rec, err)
		}
	}
	// A backend reports its counts as it ends (else within about 10 s of going idle).
	w.sender.Pool.Reset()
	upd, scans := stats(k + 2*k)
	if scans != base {
		t.Fatalf("%d updates by id scanned the due index %d times; want none (the primary key finds them)", upd, scans-base)
	}
}
