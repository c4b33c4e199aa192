package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/notify"
)

// TestIntegrationDoRoundTrips: a Do of one business insert and one Enqueue sends the begin with
// the insert, then the Enqueue's insert with the commit — two round trips, as a bare
// transaction's begin (with its insert) and commit; the post needs no statement, and the record
// goes out in the background (Flush, outside the count). Before the Enqueue rode with the commit:
// 2 statements and 1 batch.
func TestIntegrationDoRoundTrips(t *testing.T) {
	w := newWorld(t)
	pool, rt := testenv.CountingPool(t, w.sender)
	n, err := notify.New(pool, w.receivers(), notify.WithTable(w.sender.Name, ""), notify.WithLogger(testenv.Logger(t)),
		notify.WithPlainHTTP(), notify.CallTimeoutForTest(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := n.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `create table orders (id int primary key)`); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		q, b := rt.During(func() {
			err = n.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `insert into orders values ($1)`, i); err != nil {
					return err
				}
				_, err := n.Enqueue(ctx, tx, notify.Notification{Receiver: "shop", Key: fmt.Sprint("order-", i),
					Payload: json.RawMessage(`{"amount":1}`)})
				return err
			})
		})
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		if q != 0 || b != 2 {
			t.Fatalf("Do sent %d statements and %d batches; want 0 and 2 (begin with the insert; the Enqueue with the commit)", q, b)
		}
		if err := n.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.posts.Load(); got != 3 {
		t.Fatalf("%d posts; want 3", got)
	}
}

// TestIntegrationDoTakenKey: in Do, an Enqueue of a receiver and key that have a notification
// still returns the existing id (its insert went out later, with a statement of fn or the commit,
// and failed: Do rolled that transaction back and ran fn again with the insert sent at once), the
// business rows are committed once, and nothing is posted — whether the insert rode with the
// commit or with a statement after the Enqueue.
func TestIntegrationDoTakenKey(t *testing.T) {
	w := newWorld(t)
	n := w.notifier(w.receivers()) // no elector: nothing else delivers
	ctx := t.Context()
	if _, err := w.sender.Pool.Exec(ctx, `create table orders (id int primary key)`); err != nil {
		t.Fatal(err)
	}
	existing := w.enqueue(n, "shop", "order-1", 1)
	for i, after := range []bool{false, true} {
		runs := 0
		var id uuid.UUID
		err := n.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
			runs++
			if _, err := tx.Exec(ctx, `insert into orders values ($1)`, i); err != nil {
				return err
			}
			var err error
			id, err = n.Enqueue(ctx, tx, notify.Notification{Receiver: "shop", Key: "order-1", Payload: json.RawMessage(`{"amount":2}`)})
			if err != nil || !after {
				return err
			}
			_, err = tx.Exec(ctx, `insert into orders values ($1)`, 10+i)
			return err
		})
		if err != nil || id != existing.ID || runs != 2 {
			t.Fatalf("Do (a statement after the Enqueue: %v): %v, id %v after %d runs of fn; want nil, the existing %v after 2",
				after, err, id, runs, existing.ID)
		}
	}
	var orders int
	if err := w.sender.Pool.QueryRow(ctx, `select count(*) from orders`).Scan(&orders); err != nil || orders != 3 {
		t.Fatalf("%d orders, %v; want 3 (each committed once)", orders, err)
	}
	if got := w.posts.Load(); got != 0 {
		t.Fatalf("%d posts; want 0 (the existing notification is not Do's to post)", got)
	}
}

// TestIntegrationDoAllocs bounds the allocations of a Do of a business insert and one Enqueue,
// its post to a receiver that acknowledges, and the attempt's record (Flush), counted in the whole
// process (the receiver's handler included) against the real server: 296 before this test (the
// id a uuid.UUID, the span's attributes built untraced, the record's arrays for one result, five allocations
// of Collect), 232.
func TestIntegrationDoAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	pg := testenv.PG(t)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = rw.Write([]byte("success"))
	}))
	t.Cleanup(srv.Close)
	n, err := notify.New(pg.Pool, []notify.Receiver{{Name: "r", URL: srv.URL, Secrets: []string{secret}, Echo: "success"}},
		notify.WithTable(pg.Name, ""), notify.WithLogger(testenv.Logger(t)), notify.WithPlainHTTP())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := n.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Pool.Exec(ctx, `create table orders (id bigint primary key)`); err != nil {
		t.Fatal(err)
	}
	payload := json.RawMessage(`{"amount":1}`)
	var i int64
	do := func() {
		i++
		if err := n.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `insert into orders values ($1)`, i); err != nil {
				return err
			}
			_, err := n.Enqueue(ctx, tx, notify.Notification{Receiver: "r", Key: strconv.FormatInt(i, 10), Payload: payload})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if err := n.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		do()
	}
	a := testing.AllocsPerRun(200, do)
	t.Logf("%.0f allocations per Do, post and record", a)
	if a > 245 {
		t.Fatalf("%.0f allocations per Do, post and record; want at most 245", a)
	}
}

// TestIntegrationLeaderRecordRoundTrips: the leader's record of its results — the fence check,
// the attempts' statement and the commit — goes out in one round trip (four before: begin, check,
// statement, commit). Refused by the fence (a newer leader has written), it commits nothing: the
// notifications stay pending with no attempt counted, and the error is the fence's refusal with
// the recorded token.
func TestIntegrationLeaderRecordRoundTrips(t *testing.T) {
	w := newWorld(t)
	pool, rt := testenv.CountingPool(t, w.sender)
	n, err := notify.New(pool, w.receivers(), notify.WithTable(w.sender.Name, ""), notify.WithLogger(testenv.Logger(t)),
		notify.WithPlainHTTP())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := n.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	resource := n.FenceResourceForTest(0)
	tok, newer := lock.Token{Epoch: 1, Seq: 1}, lock.Token{Epoch: 1, Seq: 2}
	// states returns the status and attempts of each of ids.
	states := func(ids []uuid.UUID) []string {
		var out []string
		for _, id := range ids {
			var status string
			var attempts int
			if err := pool.QueryRow(ctx, `select status, attempts from `+w.sender.Name+`.txkit_notify where id = $1`, id).Scan(&status, &attempts); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprint(status, "/", attempts))
		}
		return out
	}
	for i := range 3 {
		ids := []uuid.UUID{w.enqueue(n, "shop", fmt.Sprint("a", i), 1).ID, w.enqueue(n, "shop", fmt.Sprint("b", i), 1).ID}
		q, b := rt.During(func() { err = n.RecordForTest(ctx, tok, 0, ids) })
		if err != nil {
			t.Fatal(err)
		}
		if q != 0 || b != 1 {
			t.Fatalf("record %d sent %d statements and %d batches; want 0 and 1 (begin, fence, record and commit in one)", i, q, b)
		}
		if got := states(ids); got[0] != "delivered/1" || got[1] != "delivered/1" {
			t.Fatalf("record %d: notifications %v; want delivered/1 each", i, got)
		}
	}
	f, err := fence.New(pool, fence.WithTable(w.sender.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return f.Check(ctx, tx, resource, newer) }); err != nil {
		t.Fatal(err)
	}
	ids := []uuid.UUID{w.enqueue(n, "shop", "c", 1).ID, w.enqueue(n, "shop", "d", 1).ID}
	err = n.RecordForTest(ctx, tok, 0, ids)
	var fe *fence.FencedError
	if !errors.Is(err, lock.ErrFenced) || !errors.As(err, &fe) || fe.Current != newer || fe.Token != tok || fe.Resource != resource {
		t.Fatalf("refused record: %v; want a FencedError of %s with %s below %s", err, resource, tok, newer)
	}
	if got := states(ids); got[0] != "pending/0" || got[1] != "pending/0" {
		t.Fatalf("a refused record left the notifications %v; want pending/0 each", got)
	}
}
