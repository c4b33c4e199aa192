package notify_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/notify"
)

// tableStats returns the notifications table's updates and HOT updates, and the due index's scans
// and entries read, once the updates reach want (a backend reports its counts as its transaction
// ends, or within about 10 s of going idle: Reset the pool first).
func tableStats(t *testing.T, w *world, want int64) (upd, hot, scans, read int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := w.sender.Pool.QueryRow(t.Context(), `select t.n_tup_upd, t.n_tup_hot_upd, coalesce(i.idx_scan, 0), coalesce(i.idx_tup_read, 0) from pg_stat_user_tables t
left join pg_stat_user_indexes i on i.relid = t.relid and i.indexrelname = 'txkit_notify_due_at'
where t.schemaname = $1 and t.relname = 'txkit_notify'`, w.sender.Name).Scan(&upd, &hot, &scans, &read)
		if err != nil {
			t.Fatalf("statistics: %v", err)
		}
		if upd >= want {
			return upd, hot, scans, read
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d updates of the notifications counted after 30 s, want %d", upd, want)
		}
		time.Sleep(100 * time.Millisecond) // polling the statistics views
	}
}

// The record of a successful attempt is a HOT update: no index has a column (or a predicate
// column) it changes, so the row's new version gets no index entries. Before the due index lost
// its predicate (status = 'pending'), none of them was HOT.
func TestIntegrationSuccessRecordIsHOT(t *testing.T) {
	w := newWorld(t)
	n := w.notifier(w.receivers()) // no elector: only Do writes
	const k = 16                   // their rows and new versions fit in the table's first page
	for i := range k {
		if _, err := w.doEnqueue(n, 1, fmt.Sprintf("hot-%d", i)); err != nil {
			t.Fatalf("Do: %v", err)
		}
	}
	flush(t, n)
	for i := range k {
		if rec, err := n.ByKey(t.Context(), "shop", fmt.Sprintf("hot-%d", i)); err != nil || rec.Status != notify.StatusDelivered {
			t.Fatalf("hot-%d: %+v, %v; want delivered", i, rec, err)
		}
	}
	w.sender.Pool.Reset()
	upd, hot, _, _ := tableStats(t, w, k)
	if hot != upd {
		t.Fatalf("%d of %d records of a success were HOT updates, want all", hot, upd)
	}
}

// The leader's scans start at its watermark, not at the delivered history the due index keeps:
// with 5,000 delivered notifications in it, the scans of the leader's ticks read a few entries each
// once the watermark has passed them (it is stored: the marks table).
func TestIntegrationLeaderSkipsDeliveredHistory(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	w.notifier(w.receivers()) // migrates
	table := pgx.Identifier{w.sender.Name, "txkit_notify"}.Sanitize()
	if _, err := w.sender.Pool.Exec(ctx, `insert into `+table+` (id, receiver, key, payload, status, delivered_at, next_attempt_at)
select gen_random_uuid(), 'shop', 'old-' || g, '{}', 'delivered', now(), now() - interval '1 hour' + g * interval '10 ms'
from generate_series(1, 5000) g`); err != nil {
		t.Fatalf("delivered rows: %v", err)
	}
	w.running("leader", w.receivers(), notify.WithTick("@every 50ms", 100))
	marks := pgx.Identifier{w.sender.Name, "txkit_notify_mark"}.Sanitize()
	testenv.Eventually(t, 15*time.Second, 50*time.Millisecond, func() bool {
		var past bool
		err := w.sender.Pool.QueryRow(ctx, `select due_from > now() - interval '1 minute' from `+marks+` where receiver = 'shop'`).Scan(&past)
		return err == nil && past
	}, "the leader's watermark was not stored past the delivered history")
	// Twice 20 scans, each pass closing the pool's connections so that their backends report
	// their counts: the first lets the scans made before the watermark passed the history report
	// theirs; the second is measured.
	var scans0, read0, scans, read int64
	for range 2 {
		w.sender.Pool.Reset()
		_, _, scans0, read0 = tableStats(t, w, 0)
		testenv.Eventually(t, 15*time.Second, 50*time.Millisecond, func() bool {
			w.sender.Pool.Reset()
			_, _, scans, read = tableStats(t, w, 0)
			return scans-scans0 >= 20
		}, "the leader made no scans of the due index")
	}
	if per := float64(read-read0) / float64(scans-scans0); per > 100 {
		t.Fatalf("%d scans of the due index read %d entries (%.0f each) with 5,000 delivered notifications in it; want a few each",
			scans-scans0, read-read0, per)
	}
	t.Logf("%d scans of the due index read %d entries", scans-scans0, read-read0)
}

// A notification whose transaction (a plain Enqueue, due at its insert) commits long after its
// insert, while the leader's watermark would have moved past its due time, is still delivered by
// the leader: the watermark waits for every transaction that had an id at a scan to end.
func TestIntegrationLateCommitDelivered(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	n := w.running("leader", w.receivers(), notify.WithTick("@every 50ms", 100))
	tx, err := w.sender.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	late := notify.Notification{Receiver: "shop", Key: "late", Payload: []byte(`{"amount":1}`)}
	if late.ID, err = n.Enqueue(ctx, tx, late); err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	// Traffic while it is open: each delivered by the leader, whose scans go on meanwhile.
	start := time.Now()
	for i := 0; time.Since(start) < 1500*time.Millisecond; i++ {
		nt := w.enqueue(n, "shop", fmt.Sprintf("during-%d", i), 1)
		w.waitStatus(n, nt, notify.StatusDelivered, 10*time.Second)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	w.waitStatus(n, late, notify.StatusDelivered, 10*time.Second)
	if got := w.applied("late"); got != 1 {
		t.Fatalf("late applied %d times, want 1", got)
	}
}

// oldLayout creates the notifications table of schema as the versions before the due index lost
// its predicate did, owned by the test's role, with one pending notification and one failed
// ("gave-up"), and returns the pending one's id.
func oldLayout(t *testing.T, s *testenv.Schema) uuid.UUID {
	t.Helper()
	table := pgx.Identifier{s.Name, "txkit_notify"}.Sanitize()
	id := uuid.Must(uuid.NewV7())
	if _, err := s.Pool.Exec(t.Context(), `create table `+table+` (
    id uuid primary key, receiver text not null, key text not null, payload bytea not null,
    status text not null default 'pending' check (status in ('pending', 'delivered', 'failed')),
    attempts integer not null default 0, tries integer not null default 0,
    next_attempt_at timestamptz not null default now(), last_status integer, last_error text,
    created_at timestamptz not null default now(), updated_at timestamptz not null default now(),
    delivered_at timestamptz, latency_ms double precision, trace_context text,
    claimed boolean not null default false, unique (receiver, key));
create index txkit_notify_due on `+table+` (receiver, next_attempt_at) where status = 'pending';
insert into `+table+` (id, receiver, key, payload) values ('`+id.String()+`', 'shop', 'before', '{"amount":1}');
insert into `+table+` (id, receiver, key, payload, status, attempts, tries) values (gen_random_uuid(), 'shop', 'gave-up', '{}', 'failed', 4, 4)`); err != nil {
		t.Fatalf("the old layout: %v", err)
	}
	return id
}

// layout returns the indexes of schema's notifications table, its reloptions and the due time's default.
func layout(t *testing.T, s *testenv.Schema) (indexes []string, opts []string, def string) {
	t.Helper()
	table := pgx.Identifier{s.Name, "txkit_notify"}.Sanitize()
	if err := s.Pool.QueryRow(t.Context(), `select array(select c.relname::text from pg_index i join pg_class c on c.oid = i.indexrelid
	where i.indrelid = $1::regclass order by 1), coalesce((select reloptions from pg_class where oid = $1::regclass), '{}'),
	(select pg_get_expr(d.adbin, d.adrelid) from pg_attrdef d join pg_attribute a on a.attrelid = d.adrelid and a.attnum = d.adnum
	where d.adrelid = $1::regclass and a.attname = 'next_attempt_at')`, table).Scan(&indexes, &opts, &def); err != nil {
		t.Fatal(err)
	}
	return indexes, opts, def
}

// Migrate upgrades a table of the earlier layout: the partial due index goes, the index without
// a predicate and the failed notifications' come, with the fillfactor and the due time's default;
// the notification pending in it is delivered by the leader, the failed one is listed. A role that does not own such a table (it may write it, and
// create in its database) migrates without an error and leaves the layout as it was; its failed
// notification is listed too.
func TestIntegrationMigrateDueIndex(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	before := oldLayout(t, w.sender)
	n := w.running("leader", w.receivers(), notify.WithTick("@every 50ms", 100))
	indexes, opts, def := layout(t, w.sender)
	if !slices.Equal(indexes, []string{"txkit_notify_due_at", "txkit_notify_failed", "txkit_notify_pkey", "txkit_notify_receiver_key_key"}) ||
		!slices.Contains(opts, "fillfactor=80") || def != "clock_timestamp()" {
		t.Fatalf("after Migrate: indexes %q, options %q, due default %q; want the due index without a predicate, fillfactor=80, clock_timestamp()",
			indexes, opts, def)
	}
	w.waitStatus(n, notify.Notification{ID: before, Key: "before"}, notify.StatusDelivered, 10*time.Second)
	wantFailed := func(n *notify.Notifier) {
		t.Helper()
		if failed, err := n.ListFailed(ctx, 10); err != nil || len(failed) != 1 || failed[0].Key != "gave-up" {
			t.Fatalf("ListFailed after Migrate = %+v, %v; want the failed notification of the old layout", failed, err)
		}
	}
	wantFailed(n)

	// The role that does not own the table.
	other := testenv.PG(t)
	oldLayout(t, other)
	role := "t_" + strings.ReplaceAll(testenv.Name(t), "-", "_")
	ident := pgx.Identifier{role}.Sanitize()
	admin := other.Pool
	var db string
	if err := admin.QueryRow(ctx, `select current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	q := pgx.Identifier{other.Name}.Sanitize()
	if _, err := admin.Exec(ctx, "create role "+ident+" login; grant create on database "+pgx.Identifier{db}.Sanitize()+" to "+ident+
		"; grant usage, create on schema "+q+" to "+ident+"; grant select, insert, update, delete on "+q+".txkit_notify to "+ident); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = admin.Exec(ctx, "select pg_terminate_backend(pid) from pg_stat_activity where usename = $1", role)
		if _, err := admin.Exec(ctx, "drop owned by "+ident+" cascade; drop role "+ident); err != nil {
			t.Logf("cleanup: drop role %s: %v", role, err)
		}
	})
	cfg, err := pgxpool.ParseConfig(testenv.PGURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User, cfg.MaxConns = role, 2
	limited, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(limited.Close)
	ln, err := notify.New(limited, w.receivers(), notify.WithTable(other.Name, ""), notify.WithPlainHTTP())
	if err != nil {
		t.Fatal(err)
	}
	if err := ln.Migrate(ctx); err != nil {
		t.Fatalf("Migrate by a role that does not own the table: %v", err)
	}
	if indexes, _, _ := layout(t, other); !slices.Contains(indexes, "txkit_notify_due") {
		t.Fatalf("after Migrate by a role that does not own the table: indexes %q; want the partial due index kept", indexes)
	}
	wantFailed(ln)
}

// A notification that runs out of attempts is due at infinity, where the failed ones' index finds
// it: ListFailed reads that index, not the table, however many delivered notifications it holds.
func TestIntegrationListFailedUsesIndex(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) bool {
		http.Error(rw, "down", http.StatusInternalServerError)
		return true
	})
	n := w.running("leader", w.receivers(), notify.WithSchedule([]time.Duration{10 * time.Millisecond}, 0), notify.WithTick("@every 50ms", 100))
	nt := w.enqueue(n, "shop", "doomed", 1)
	w.waitStatus(n, nt, notify.StatusFailed, 15*time.Second)
	table := pgx.Identifier{w.sender.Name, "txkit_notify"}.Sanitize()
	if _, err := w.sender.Pool.Exec(ctx, `insert into `+table+` (id, receiver, key, payload, status, delivered_at)
select gen_random_uuid(), 'shop', 'old-' || g, '{}', 'delivered', now() from generate_series(1, 5000) g`); err != nil {
		t.Fatalf("delivered rows: %v", err)
	}
	if _, err := w.sender.Pool.Exec(ctx, `analyze `+table, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	counts := func() (seq, failedScans int64) {
		w.sender.Pool.Reset() // a backend reports its counts as it ends
		if err := w.sender.Pool.QueryRow(ctx, `select t.seq_scan, coalesce(i.idx_scan, 0) from pg_stat_user_tables t
left join pg_stat_user_indexes i on i.relid = t.relid and i.indexrelname = 'txkit_notify_failed'
where t.schemaname = $1 and t.relname = 'txkit_notify'`, w.sender.Name).Scan(&seq, &failedScans); err != nil {
			t.Fatalf("statistics: %v", err)
		}
		return seq, failedScans
	}
	seq0, scans0 := counts()
	failed, err := n.ListFailed(ctx, 10)
	if err != nil || len(failed) != 1 || failed[0].ID != nt.ID || failed[0].NextAttemptAt.IsZero() {
		t.Fatalf("ListFailed = %+v, %v; want the failed notification alone", failed, err)
	}
	var seq, scans int64
	testenv.Eventually(t, 15*time.Second, 100*time.Millisecond, func() bool {
		seq, scans = counts()
		return scans > scans0
	}, "ListFailed did not use the failed notifications' index")
	if seq != seq0 {
		t.Fatalf("ListFailed scanned the table (%d sequential scans), want only its index", seq-seq0)
	}
}
