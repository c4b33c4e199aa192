package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
)

// newOutbox creates an outbox in the test's own schema and migrates it.
func newOutbox(t testing.TB, opts ...outbox.Option) (*outbox.Outbox, *pgxpool.Pool) {
	t.Helper()
	pg := testenv.PG(t)
	ob, err := outbox.New(pg.Pool, append([]outbox.Option{outbox.WithTable(pg.Name, "")}, opts...)...)
	if err != nil {
		t.Fatalf("outbox.New: %v", err)
	}
	if err := ob.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return ob, pg.Pool
}

func count(t testing.TB, pool *pgxpool.Pool, ob *outbox.Outbox, where string) int {
	t.Helper()
	var n int
	q := "select count(*) from " + pgx.Identifier(strings.Split(ob.Table(), ".")).Sanitize()
	if where != "" {
		q += " where " + where
	}
	if err := pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// refuseDB fails the test if Enqueue touches the database.
type refuseDB struct{ t testing.TB }

func (d refuseDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	d.t.Error("Exec called for an invalid message")
	return pgconn.CommandTag{}, errors.New("refused")
}

func (d refuseDB) Query(context.Context, string, ...any) (pgx.Rows, error) {
	d.t.Error("Query called for an invalid message")
	return nil, errors.New("refused")
}

func (d refuseDB) QueryRow(context.Context, string, ...any) pgx.Row {
	d.t.Error("QueryRow called for an invalid message")
	return nil
}

func TestEnqueueRefusesInvalidMessages(t *testing.T) {
	ob, err := outbox.New(&pgxpool.Pool{}, outbox.MaxBodySizeForTest(8))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		msg  outbox.Message
	}{
		{"empty topic", outbox.Message{Body: []byte("x")}},
		{"topic with NUL", outbox.Message{Topic: "a\x00b"}},
		{"topic too long", outbox.Message{Topic: strings.Repeat("t", 256)}},
		{"key not UTF-8", outbox.Message{Topic: "t", Key: "\xff"}},
		{"body too large", outbox.Message{Topic: "t", Body: make([]byte, 9)}},
		{"header value with NUL", outbox.Message{Topic: "t", Headers: map[string]string{"k": "\x00"}}},
		{"empty header name", outbox.Message{Topic: "t", Headers: map[string]string{"": "v"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, err := ob.Enqueue(t.Context(), refuseDB{t}, tc.msg)
			if !errors.Is(err, outbox.ErrInvalidMessage) {
				t.Fatalf("Enqueue = %v, %v; want ErrInvalidMessage", id, err)
			}
		})
	}
	if _, err := ob.Enqueue(t.Context(), nil, outbox.Message{Topic: "t"}); !errors.Is(err, outbox.ErrNilTx) {
		t.Fatalf("Enqueue(nil tx) = %v, want ErrNilTx", err)
	}
	var nilPool *pgxpool.Pool
	if _, err := ob.Enqueue(t.Context(), nilPool, outbox.Message{Topic: "t"}); !errors.Is(err, outbox.ErrNilTx) {
		t.Fatalf("Enqueue(nil pool) = %v, want ErrNilTx", err)
	}
}

// Each field over its limit is refused at Enqueue with an error wrapping ErrTooLarge (and
// ErrInvalidMessage) that names the field, its size and the limit, and nothing is written: not in
// a transaction the test then commits, and Enqueue does not even touch the database.
func TestIntegrationEnqueueRefusesOversizedFields(t *testing.T) {
	ob, pool := newOutbox(t, outbox.MaxBodySizeForTest(1000))
	manyHeaders := map[string]string{}
	for i := range 65 {
		manyHeaders[fmt.Sprintf("h%d", i)] = "v"
	}
	bigHeaders := map[string]string{}
	for i := range 5 {
		bigHeaders[fmt.Sprintf("h%d", i)] = strings.Repeat("v", 4000)
	}
	tests := []struct {
		name string
		msg  outbox.Message
		want string // in the error: the field, its size and the limit
	}{
		{"topic", outbox.Message{Topic: strings.Repeat("t", 128)}, "topic: 128 bytes, more than 127"},
		{"key", outbox.Message{Topic: "t", Key: strings.Repeat("k", 1025)}, "key: 1025 bytes, more than 1024"},
		{"body", outbox.Message{Topic: "t", Body: make([]byte, 1001)}, "body: 1001 bytes, more than 1000"},
		{"header name", outbox.Message{Topic: "t", Headers: map[string]string{strings.Repeat("n", 257): "v"}}, "bytes, more than 256"},
		{"header value", outbox.Message{Topic: "t", Headers: map[string]string{"h": strings.Repeat("v", 4097)}}, `header "h" value: 4097 bytes, more than 4096`},
		{"header count", outbox.Message{Topic: "t", Headers: manyHeaders}, "headers: 65 entries, more than 64"},
		{"headers total", outbox.Message{Topic: "t", Headers: bigHeaders}, "headers (names and values): 20010 bytes, more than 16384"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ob.Enqueue(t.Context(), refuseDB{t}, tc.msg)
			if !errors.Is(err, outbox.ErrTooLarge) || !errors.Is(err, outbox.ErrInvalidMessage) {
				t.Fatalf("Enqueue = %v; want an error wrapping ErrTooLarge and ErrInvalidMessage", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Enqueue = %v; want it to say %q", err, tc.want)
			}
			err = pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
				_, _ = ob.Enqueue(t.Context(), tx, tc.msg) // refused: the commit writes nothing
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if n := count(t, pool, ob, ""); n != 0 {
				t.Fatalf("%d rows written", n)
			}
		})
	}
	// At the limits, accepted.
	limits := outbox.Message{Topic: strings.Repeat("t", 127), Key: strings.Repeat("k", 1024), Body: make([]byte, 1000),
		Headers: map[string]string{strings.Repeat("n", 256): strings.Repeat("v", 4096)}}
	if _, err := ob.Enqueue(t.Context(), pool, limits); err != nil {
		t.Fatalf("Enqueue at the limits: %v", err)
	}
}

func TestIntegrationMigrateIsIdempotent(t *testing.T) {
	pg := testenv.PG(t)
	ob, err := outbox.New(pg.Pool, outbox.WithTable(pg.Name+"_own", "Events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pg.Pool.Exec(context.Background(), "drop schema if exists "+pgx.Identifier{pg.Name + "_own"}.Sanitize()+" cascade")
	})
	// Concurrent migrations from several "processes" must all succeed.
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- ob.Migrate(t.Context()) }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	if err := ob.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	if _, err := ob.Enqueue(t.Context(), pg.Pool, outbox.Message{Topic: "t"}); err != nil {
		t.Fatalf("Enqueue after Migrate: %v", err)
	}
	var indexes int
	if err := pg.Pool.QueryRow(t.Context(), `select count(*) from pg_indexes where schemaname = $1 and tablename = 'Events'`,
		pg.Name+"_own").Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	if indexes != 5 { // primary key, msg_id unique, pending, retry, pending keys (Do's first-of-key check)
		t.Fatalf("%d indexes on the table, want 5", indexes)
	}
}

func TestIntegrationEnqueueAtomicity(t *testing.T) {
	ob, pool := newOutbox(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `create table users (id uuid primary key, name text not null)`); err != nil {
		t.Fatal(err)
	}
	register := func(name string, fail bool) (uuid.UUID, error) {
		var msgID uuid.UUID
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			id := uuid.New()
			if _, err := tx.Exec(ctx, `insert into users (id, name) values ($1, $2)`, id, name); err != nil {
				return err
			}
			var err error
			msgID, err = ob.Enqueue(ctx, tx, outbox.Message{Topic: "user.registered", Key: id.String(), Body: []byte(name),
				Headers: map[string]string{"source": "test"}})
			if err != nil {
				return err
			}
			if fail {
				return errors.New("business rule failed after the enqueue")
			}
			return nil
		})
		return msgID, err
	}

	if _, err := register("rolled back", true); err == nil {
		t.Fatal("the failing transaction committed")
	}
	if n := count(t, pool, ob, ""); n != 0 {
		t.Fatalf("%d outbox rows after a rollback, want 0", n)
	}

	id, err := register("committed", false)
	if err != nil {
		t.Fatal(err)
	}
	if id.Version() != 7 {
		t.Errorf("assigned id %s is UUID version %d, want 7", id, id.Version())
	}
	if n := count(t, pool, ob, ""); n != 1 {
		t.Fatalf("%d outbox rows after a commit, want 1", n)
	}
	if n := count(t, pool, ob, "msg_id = '"+id.String()+"' and status = 'pending' and attempts = 0 and headers->>'source' = 'test'"); n != 1 {
		t.Fatalf("the committed row is not the pending message %s", id)
	}
	pending, dead, err := ob.Backlog(ctx, pool)
	if err != nil || pending != 1 || dead != 0 {
		t.Fatalf("Backlog = %d, %d, %v; want 1, 0", pending, dead, err)
	}

	// A caller-chosen ID is kept; using it twice is a duplicate.
	own := uuid.New()
	got, err := ob.Enqueue(ctx, pool, outbox.Message{ID: own, Topic: "t"})
	if err != nil || got != own {
		t.Fatalf("Enqueue with own id = %v, %v; want %v", got, err, own)
	}
	if _, err := ob.Enqueue(ctx, pool, outbox.Message{ID: own, Topic: "t"}); !errors.Is(err, outbox.ErrDuplicate) {
		t.Fatalf("Enqueue of a duplicate id = %v, want ErrDuplicate", err)
	}
}

// TestIntegrationEnqueueNotifies checks the NOTIFY: one per committed transaction, none on
// rollback, none with NotifyForTest(false).
func TestIntegrationEnqueueNotifies(t *testing.T) {
	pg := testenv.PG(t)
	ctx := t.Context()
	listen := func(channel string) *pgx.Conn {
		c, err := pgx.Connect(ctx, pg.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		if _, err := c.Exec(ctx, "listen "+pgx.Identifier{channel}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		return c
	}
	ob, err := outbox.New(pg.Pool, outbox.WithTable(pg.Name, ""), outbox.ChannelForTest("ch_"+pg.Name))
	if err != nil {
		t.Fatal(err)
	}
	quiet, err := outbox.New(pg.Pool, outbox.WithTable(pg.Name, "quiet"), outbox.NotifyForTest(false),
		outbox.ChannelForTest("ch_"+pg.Name))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []*outbox.Outbox{ob, quiet} {
		if err := o.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l := listen(ob.Channel())

	// Rolled back: nothing. Then quiet: nothing. Then three enqueues in one tx: one notification.
	tx, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Enqueue(ctx, tx, outbox.Message{Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(ctx)
	if _, err := quiet.Enqueue(ctx, pg.Pool, outbox.Message{Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error {
		for range 3 {
			if _, err := ob.Enqueue(ctx, tx, outbox.Message{Topic: "t", Key: "k"}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A marker sent after everything above: notifications arrive in commit order, so whatever
	// arrives before it is everything the enqueues caused.
	if _, err := pg.Pool.Exec(ctx, "select pg_notify($1, 'marker')", ob.Channel()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		n, err := l.WaitForNotification(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Payload == "marker" {
			break
		}
		got = append(got, n.Channel+":"+n.Payload)
	}
	if len(got) != 1 || got[0] != ob.Channel()+":" {
		t.Fatalf("notifications before the marker = %q, want one with an empty payload", got)
	}
}

func TestIntegrationOperatorFunctions(t *testing.T) {
	ob, pool := newOutbox(t)
	ctx := t.Context()
	var ids []uuid.UUID
	for i := range 5 {
		id, err := ob.Enqueue(ctx, pool, outbox.Message{Topic: "orders", Key: "k", Body: []byte{byte(i)}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// Kill three of them the way the relay would, after MaxAttempts failures.
	tbl := pgx.Identifier(strings.Split(ob.Table(), ".")).Sanitize()
	if _, err := pool.Exec(ctx, `update `+tbl+` set status = 'dead', attempts = 16, last_error = 'broker said no'
		where msg_id = any($1)`, ids[:3]); err != nil {
		t.Fatal(err)
	}
	pending, dead, err := ob.Backlog(ctx, pool)
	if err != nil || pending != 2 || dead != 3 {
		t.Fatalf("Backlog = %d, %d, %v; want 2, 3", pending, dead, err)
	}
	list, err := ob.ListDead(ctx, pool, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != ids[0] || list[1].ID != ids[1] {
		t.Fatalf("ListDead(2) = %+v, want the two oldest dead", list)
	}
	d := list[0]
	if d.Topic != "orders" || d.Key != "k" || d.Attempts != 16 || d.LastError != "broker said no" ||
		d.Headers != nil || len(d.Body) != 1 || d.CreatedAt.IsZero() {
		t.Fatalf("ListDead()[0] = %+v", d)
	}
	if _, err := ob.ListDead(ctx, pool, 0); !errors.Is(err, outbox.ErrInvalidOption) {
		t.Fatalf("ListDead(0) = %v, want ErrInvalidOption", err)
	}

	// Requeue one dead, one pending (ignored), one unknown (ignored).
	n, err := ob.Requeue(ctx, pool, ids[0], ids[4], uuid.New())
	if err != nil || n != 1 {
		t.Fatalf("Requeue = %d, %v; want 1", n, err)
	}
	if n := count(t, pool, ob, "msg_id = '"+ids[0].String()+"' and status = 'pending' and attempts = 0 and next_attempt_at <= now()"); n != 1 {
		t.Fatal("the requeued message is not pending, due, with no attempts")
	}
	if n, err := ob.Requeue(ctx, pool); err != nil || n != 0 {
		t.Fatalf("Requeue() = %d, %v; want 0", n, err)
	}
	if n, err := ob.RequeueAll(ctx, pool); err != nil || n != 2 {
		t.Fatalf("RequeueAll = %d, %v; want 2", n, err)
	}
	pending, dead, err = ob.Backlog(ctx, pool)
	if err != nil || pending != 5 || dead != 0 {
		t.Fatalf("Backlog = %d, %d, %v; want 5, 0", pending, dead, err)
	}
}
