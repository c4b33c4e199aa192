package notify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/testkit/testenv"
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
