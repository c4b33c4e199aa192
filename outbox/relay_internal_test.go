package outbox

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

// TestIntegrationFailStatement runs the fail statement in PostgreSQL and checks it against
// backoffBounds: the delay after the n-th failure, the attempt count, the error, and the move to
// dead at the attempt limit.
func TestIntegrationFailStatement(t *testing.T) {
	pg := testenv.PG(t)
	ctx := t.Context()
	ob, err := New(pg.Pool, WithTable(pg.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	msgID, err := ob.Enqueue(ctx, pg.Pool, Message{Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := pg.Pool.QueryRow(ctx, "select id from "+ob.table+" where msg_id = $1", msgID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	const (
		base, cap = 250 * time.Millisecond, 90 * time.Second
		max       = 64
	)
	tests := []struct {
		name      string
		before    int // attempts before this failure
		permanent bool
		wantDead  bool
	}{
		{"first failure", 0, false, false},
		{"second failure", 1, false, false},
		{"eighth failure", 7, false, false},
		{"past the cap", 20, false, false},
		{"exponent clamped", 62, false, false},
		{"last allowed failure", max - 1, false, true},
		{"permanent first failure", 0, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lo, hi := backoffBounds(base, cap, tc.before+1)
			for range 20 { // the jitter is random: sample it
				err := pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "update "+ob.table+" set status = 'pending', attempts = $2 where id = $1", id, tc.before); err != nil {
						return err
					}
					var (
						gotID uuid.UUID
						dead  bool
					)
					if err := tx.QueryRow(ctx, ob.q.fail, []int64{id}, []string{"boom"}, max, base.Seconds(), cap.Seconds(), []bool{tc.permanent}).
						Scan(&gotID, &dead); err != nil {
						return err
					}
					var (
						delay    time.Duration
						attempts int
						lastErr  string
					)
					if err := tx.QueryRow(ctx, "select next_attempt_at - now(), attempts, last_error from "+ob.table+" where id = $1", id).
						Scan(&delay, &attempts, &lastErr); err != nil {
						return err
					}
					if gotID != msgID || dead != tc.wantDead || attempts != tc.before+1 || lastErr != "boom" {
						t.Errorf("returned %v dead=%v; row attempts %d error %q", gotID, dead, attempts, lastErr)
					}
					if delay < lo-time.Microsecond || delay > hi+time.Microsecond {
						t.Errorf("delay %v after failure %d, want within [%v, %v]", delay, tc.before+1, lo, hi)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestIntegrationDueStatement checks the per-key order condition of the due statement: a row
// waits while an earlier pending row of its key waits out a backoff; due earlier rows, dead rows
// and rows without a key hold nothing back; rows come in id order, at most the limit.
func TestIntegrationDueStatement(t *testing.T) {
	pg := testenv.PG(t)
	ctx := t.Context()
	ob, err := New(pg.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	enq := func(key, name string) uuid.UUID {
		id, err := ob.Enqueue(ctx, pg.Pool, Message{Topic: "t", Key: key, Body: []byte(name)})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	set := func(id uuid.UUID, assignment string) {
		if _, err := pg.Pool.Exec(ctx, "update "+ob.table+" set "+assignment+" where msg_id = $1", id); err != nil {
			t.Fatal(err)
		}
	}
	due := func(limit int) []string {
		rows, err := pg.Pool.Query(ctx, ob.q.due, limit, 1<<30, 0, []int64(nil))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		var prev int64
		for rows.Next() {
			x, _, err := scanDue(rows, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if x.created.After(time.Now()) || time.Since(x.created) > time.Minute {
				t.Fatalf("row %d: created %v ago, want a few milliseconds", x.id, time.Since(x.created))
			}
			if x.id <= prev {
				t.Fatalf("row %d after %d: not in id order", x.id, prev)
			}
			prev = x.id
			names = append(names, string(x.msg.Body))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return names
	}
	k1a := enq("k1", "k1:1")
	enq("k1", "k1:2")
	enq("k2", "k2:1")
	enq("", "-:1")
	enq("k1", "k1:3")
	k3a := enq("k3", "k3:1")
	enq("k3", "k3:2")

	check := func(step string, limit int, want ...string) {
		t.Helper()
		if got := due(limit); !slices.Equal(got, want) {
			t.Fatalf("%s: due(%d) = %q, want %q", step, limit, got, want)
		}
	}
	check("all due", 100, "k1:1", "k1:2", "k2:1", "-:1", "k1:3", "k3:1", "k3:2")
	check("limit", 3, "k1:1", "k1:2", "k2:1")

	set(k1a, "attempts = 1, next_attempt_at = now() + interval '1 hour'")
	check("k1:1 backing off", 100, "k2:1", "-:1", "k3:1", "k3:2")

	set(k3a, "status = 'dead'")
	check("k3:1 dead", 100, "k2:1", "-:1", "k3:2")

	set(k1a, "next_attempt_at = now()")
	check("k1:1 due again", 100, "k1:1", "k1:2", "k2:1", "-:1", "k1:3", "k3:2")
}

// migratedOutbox returns an outbox without NOTIFY, migrated in the test's own schema.
func migratedOutbox(t *testing.T) (*testenv.Schema, *Outbox) {
	t.Helper()
	pg := testenv.PG(t)
	ob, err := New(pg.Pool, WithTable(pg.Name, ""), NotifyForTest(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return pg, ob
}

// storedSize is a message's size as the due statement counts it: topic, key and body, and the
// headers' stored size.
func storedSize(t *testing.T, pool *pgxpool.Pool, ob *Outbox, id uuid.UUID) int {
	t.Helper()
	var n int
	err := pool.QueryRow(t.Context(), `select octet_length(topic) + coalesce(octet_length(key), 0) + octet_length(body)
		+ coalesce(pg_column_size(headers), 0) from `+ob.table+` where msg_id = $1`, id).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestIntegrationBatchBytes drains an outbox the way the relay does, batch after batch through
// fetch, and checks that no batch of more than one message holds more than the byte bound
// (DefaultBatchBytes) and that nothing is left behind.
func TestIntegrationBatchBytes(t *testing.T) {
	pg, ob := migratedOutbox(t)
	ctx := t.Context()
	const bound = 16 << 20 // DefaultBatchBytes
	sizes := map[uuid.UUID]int{}
	for i := range 12 {
		body := make([]byte, 3<<20) // 36 MiB in all: the count bound (128) alone takes them at once
		if i == 5 {
			body = make([]byte, 4<<20)
		}
		id, err := ob.Enqueue(ctx, pg.Pool, Message{Topic: "t", Key: "k", Body: body, Headers: map[string]string{"i": "x"}})
		if err != nil {
			t.Fatal(err)
		}
		sizes[id] = storedSize(t, pg.Pool, ob, id)
	}
	o := defaultRelayOptions()
	r := &Relay{pool: pg.Pool, ob: ob, o: o}
	batches, seen := 0, 0
	for {
		batch, more, err := r.fetch(ctx, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(batch) == 0 {
			break
		}
		batches++
		total := 0
		ids := make([]int64, 0, len(batch))
		for _, x := range batch {
			total += sizes[x.msg.ID]
			ids = append(ids, x.id)
		}
		if len(batch) > 1 && total > bound {
			t.Fatalf("batch %d: %d messages, %d bytes, more than the bound %d", batches, len(batch), total, bound)
		}
		seen += len(batch)
		if _, err := pg.Pool.Exec(ctx, ob.q.deleteSent, ids); err != nil {
			t.Fatal(err)
		}
		if !more && seen < len(sizes) {
			t.Fatalf("batch %d: fetch said nothing more after %d of %d messages", batches, seen, len(sizes))
		}
	}
	if seen != len(sizes) || batches < 3 {
		t.Fatalf("%d messages in %d batches; want all %d, in at least 3", seen, batches, len(sizes))
	}
}

// TestIntegrationDueStatementByteBound: full rows come until the byte bound, always at least
// one; the first row that does not fit comes back as a marker (cut, no body), and nothing after it.
func TestIntegrationDueStatementByteBound(t *testing.T) {
	pg, ob := migratedOutbox(t)
	ctx := t.Context()
	var ids []uuid.UUID
	for _, n := range []int{5000, 1000, 1000, 1000} {
		id, err := ob.Enqueue(ctx, pg.Pool, Message{Topic: "t", Body: make([]byte, n)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	size := func(i int) int { return storedSize(t, pg.Pool, ob, ids[i]) }
	tests := []struct {
		name     string
		limit    int
		bytes    int
		wantRows int  // full rows
		wantCut  bool // followed by a marker
	}{
		{"first row over the bound comes alone", 100, 1024, 1, true},
		{"exactly two rows", 100, size(0) + size(1), 2, true},
		{"one byte short of three", 100, size(0) + size(1) + size(2) - 1, 2, true},
		{"all", 100, 1 << 20, 4, false},
		{"count limit first", 3, 1 << 20, 3, false},
		{"count limit and a cut", 2, 1024, 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := pg.Pool.Query(ctx, ob.q.due, tc.limit, tc.bytes, 0, []int64(nil))
			if err != nil {
				t.Fatal(err)
			}
			n, cut := 0, false
			for rows.Next() {
				x, c, err := scanDue(rows, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case cut:
					t.Fatalf("row %s after the marker", x.msg.ID)
				case x.msg.ID != ids[n]:
					t.Fatalf("row %d is %s, want %s", n, x.msg.ID, ids[n])
				case c && x.msg.Body != nil:
					t.Fatalf("the marker %s carries a body of %d bytes", x.msg.ID, len(x.msg.Body))
				case c:
					cut = true
				default:
					n++
				}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if n != tc.wantRows || cut != tc.wantCut {
				t.Fatalf("%d full rows (cut %v), want %d (cut %v)", n, cut, tc.wantRows, tc.wantCut)
			}
		})
	}
}

// TestIntegrationRecordRoundTrips: the relay's record of a batch — the fence check, the delete of
// the sent rows, the failed rows' attempt and the commit — goes out in one round trip. Refused by
// the fence, it commits nothing (the sent row stays pending, the failed row keeps its attempts)
// and returns the fence's refusal with the recorded token.
func TestIntegrationRecordRoundTrips(t *testing.T) {
	pg := testenv.PG(t)
	pool, rt := testenv.CountingPool(t, pg)
	ctx := t.Context()
	ob, err := New(pool, WithTable(pg.Name, ""), NotifyForTest(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	f, err := ob.relayFence()
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{pool: pool, ob: ob, o: defaultRelayOptions(), fence: f}
	const resource = "outbox:test"
	tok, newer := lock.Token{Epoch: 1, Seq: 1}, lock.Token{Epoch: 1, Seq: 2}
	// pending returns the ids of the pending rows and their attempts.
	pending := func() map[int64]int {
		rows, err := pool.Query(ctx, `select id, attempts from `+ob.table+` where status = 'pending'`)
		if err != nil {
			t.Fatal(err)
		}
		m := map[int64]int{}
		var id int64
		var n int
		if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { m[id] = n; return nil }); err != nil {
			t.Fatal(err)
		}
		return m
	}
	for i := range 3 {
		for range 2 {
			if _, err := ob.Enqueue(ctx, pool, Message{Topic: "t", Body: []byte("m")}); err != nil {
				t.Fatal(err)
			}
		}
		ids := slices.Sorted(maps.Keys(pending()))
		res := results{sent: ids[:1], failed: ids[1:], errs: []string{"boom"}, permanent: []bool{false}}
		var rerr error
		q, b := rt.During(func() { _, _, rerr = r.writeResults(ctx, resource, tok, res, nil) })
		if rerr != nil {
			t.Fatal(rerr)
		}
		if q != 0 || b != 1 {
			t.Fatalf("record %d sent %d statements and %d batches; want 0 and 1 (begin, fence, writes and commit in one)", i, q, b)
		}
		if p := pending(); len(p) != 1 || p[ids[1]] != 1 {
			t.Fatalf("record %d left %v pending; want only %d, with 1 attempt", i, p, ids[1])
		}
		if _, err := pool.Exec(ctx, `delete from `+ob.table); err != nil {
			t.Fatal(err)
		}
	}
	// A newer leader passes the fence; the old one's record is refused and commits nothing.
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return f.Check(ctx, tx, resource, newer) }); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := ob.Enqueue(ctx, pool, Message{Topic: "t", Body: []byte("m")}); err != nil {
			t.Fatal(err)
		}
	}
	before := pending()
	ids := slices.Sorted(maps.Keys(before))
	res := results{sent: ids[:1], failed: ids[1:], errs: []string{"boom"}, permanent: []bool{false}}
	_, _, err = r.writeResults(ctx, resource, tok, res, ids)
	var fe *fence.FencedError
	if !errors.Is(err, lock.ErrFenced) || !errors.As(err, &fe) || fe.Current != newer || fe.Token != tok || fe.Resource != resource {
		t.Fatalf("refused record: %v; want a FencedError of %s with %s below %s", err, resource, tok, newer)
	}
	if after := pending(); !maps.Equal(after, before) {
		t.Fatalf("a refused record changed the pending rows: %v, before %v", after, before)
	}
}
