package outbox

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

// TestIntegrationPendingKeyLookupAfterChurn runs Outbox.Do's Enqueue statement on a queue table
// as a relay leaves it: many rows inserted and deleted, a few pending, statistics taken then. Its
// pending-key lookup must read the keys index (by bucket), not walk the relay's index of every
// pending row (and its dead entries), and the statement must touch a bounded number of buffers.
func TestIntegrationPendingKeyLookupAfterChurn(t *testing.T) {
	pg := testenv.PG(t)
	ctx := t.Context()
	ob, err := New(pg.Pool, WithTable(pg.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// The relay's churn, as it leaves the table: every row inserted, then deleted once sent, a few
	// pending when vacuum takes the statistics. The relay's reads reuse its index's pages (they
	// mark the dead entries, which the inserts then remove), while the key index, never read
	// for these keys, keeps the pages it grew to (here: long keys make it grow fast). The planner
	// then prices the key index by pages per live entry and picked the relay's index instead.
	for _, q := range []string{
		"insert into " + ob.table + " (msg_id, topic, key, body) select gen_random_uuid(), 't', g || (select string_agg(md5(random()::text || g || i), '') from generate_series(1, 30) i), '\\x00' from generate_series(1, 10000) g",
		"delete from " + ob.table,
		"insert into " + ob.table + " (msg_id, topic, key, body) select gen_random_uuid(), 't', 'p' || g, '\\x00' from generate_series(1, 40) g",
		"vacuum analyze " + ob.table,
	} {
		if _, err := pg.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	tx, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	args := []any{uuid.New(), "t", "k-new", []byte{0}, nil, "", "", 0, ob.o.parts}
	var out []byte
	// Six runs: pgx prepares the statement, and PostgreSQL may switch to a generic plan after five.
	for range 6 {
		if err := tx.QueryRow(ctx, "explain (analyze, buffers, costs off, format json) "+ob.q.enqueueDirect, args...).Scan(&out); err != nil {
			t.Fatal(err)
		}
		args[0] = uuid.New()
	}
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("explain: %v: %s", err, out)
	}
	var indexes []string
	var walk func(n planNode)
	walk = func(n planNode) {
		if n.Index != "" {
			indexes = append(indexes, n.Index)
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(plans[0].Plan)
	if want := ob.o.table + keysIndex; !slices.Equal(indexes, []string{want}) {
		t.Errorf("the statement reads the indexes %q, want only %s:\n%s", indexes, want, out)
	}
	// 14 on an idle table; the lookup through the pending index read 88-121 in the churn bench.
	if b := plans[0].Plan.Hit + plans[0].Plan.Read; b > 40 {
		t.Errorf("the statement touched %d buffers, want at most 40:\n%s", b, out)
	}
}

// TestIntegrationQueueAutovacuum: Migrate sets the queue table's autovacuum to a fixed dead-row
// count without throttling, on a new table and on one an earlier version made, whose key index it
// replaces with the keys index.
func TestIntegrationQueueAutovacuum(t *testing.T) {
	pg := testenv.PG(t)
	ctx := t.Context()
	ob, err := New(pg.Pool, WithTable(pg.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_threshold=1000", "autovacuum_vacuum_cost_delay=0"}
	check := func(when string) {
		t.Helper()
		var opts []string
		if err := pg.Pool.QueryRow(ctx, "select coalesce(reloptions, '{}') from pg_class where oid = $1::regclass", ob.table).Scan(&opts); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(opts, want) {
			t.Errorf("%s: reloptions %q, want %q", when, opts, want)
		}
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	check("new table")
	// A table of an earlier version: its own settings and the key index on status = 'pending'.
	for _, q := range []string{
		"alter table " + ob.table + " reset (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay)",
		"drop index " + pgx.Identifier{pg.Name, ob.o.table + keysIndex}.Sanitize(),
		"create index " + pgx.Identifier{ob.o.table + keyIndex}.Sanitize() + " on " + ob.table + " (key) where status = 'pending' and key is not null",
		"delete from " + pgx.Identifier{pg.Name, pgutil.MigrationsTable}.Sanitize(),
	} {
		if _, err := pg.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	check("earlier table")
	var idx []string
	rows, err := pg.Pool.Query(ctx, "select c.relname from pg_index i join pg_class c on c.oid = i.indexrelid where i.indrelid = $1::regclass and c.relname = any($2) order by 1",
		ob.table, []string{ob.o.table + keyIndex, ob.o.table + keysIndex})
	if err == nil {
		idx, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{ob.o.table + keysIndex}; !slices.Equal(idx, want) {
		t.Errorf("key indexes %q, want %q", idx, want)
	}
}

type planNode struct {
	Index string     `json:"Index Name"`
	Hit   int        `json:"Shared Hit Blocks"`
	Read  int        `json:"Shared Read Blocks"`
	Plans []planNode `json:"Plans"`
}
