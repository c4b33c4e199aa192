package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/notify"
	"github.com/txkit/txkit/notify/inbox"
)

// notifyWorld is a notifier whose table is in a schema of the HA PostgreSQL (the sender, which
// fails over) and its receiver: an Inbox on the plain PostgreSQL that applies each notification
// once (a row per key).
type notifyWorld struct {
	t        *testing.T
	sender   *testenv.Schema
	receiver *testenv.Schema
	n        *notify.Notifier
}

const notifySecret = "pg-failover-secret-0123"

func newNotifyWorld(t *testing.T, sender *testenv.Schema) *notifyWorld {
	t.Helper()
	ctx := t.Context()
	w := &notifyWorld{t: t, sender: sender, receiver: testenv.PG(t)}
	if _, err := w.receiver.Pool.Exec(ctx, `create table applied (id uuid primary key, key text not null)`); err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.New(w.receiver.Pool, idempotency.WithTable(w.receiver.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(w.receiver.Pool, store, "shop", []string{notifySecret}, func(ctx context.Context, tx pgx.Tx, d notify.Delivery) error {
		_, err := tx.Exec(ctx, `insert into applied values ($1, $2)`, d.ID, d.Key)
		return err
	}, inbox.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(in)
	t.Cleanup(srv.Close)
	// A schedule long enough to outlast the failover many times over: nothing may end failed.
	var schedule []time.Duration
	for range 30 {
		schedule = append(schedule, 500*time.Millisecond)
	}
	w.n, err = notify.New(sender.Pool, []notify.Receiver{{Name: "shop", URL: srv.URL, Secrets: []string{notifySecret}, Echo: "success"}},
		notify.WithTable(sender.Name, ""), notify.WithLogger(testenv.Logger(t)), notify.WithPlainHTTP(),
		notify.WithSchedule(schedule, 0.1), notify.WithElector(zkenv.Elector(t, testenv.ZKRoot(t)+"/notify-leader", "a")))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.n.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, w.n.Run)
	return w
}

// enqueueEvery enqueues a notification every d (keys n-0, n-1, ...), each in a transaction of its
// own, retried with its key until it commits (a commit whose outcome was lost in the failover is
// retried safely: the key is recorded once). stop ends it and returns the ids enqueued by key.
func (w *notifyWorld) enqueueEvery(d time.Duration) (stop func() map[string]uuid.UUID) {
	ctx, cancel := context.WithCancel(w.t.Context())
	ids := map[string]uuid.UUID{}
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(d)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			key := fmt.Sprintf("n-%d", i)
			deadline := time.Now().Add(90 * time.Second)
			for {
				id, err := w.enqueue(ctx, key)
				if err == nil {
					ids[key] = id
					break
				}
				if ctx.Err() != nil {
					return
				}
				if time.Now().After(deadline) {
					errc <- fmt.Errorf("enqueue %s: not committed within 90 s: %w", key, err)
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}()
	return func() map[string]uuid.UUID {
		cancel()
		wg.Wait()
		select {
		case err := <-errc:
			w.t.Fatal(err)
		default:
		}
		return ids
	}
}

func (w *notifyWorld) enqueue(ctx context.Context, key string) (uuid.UUID, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var id uuid.UUID
	err := pgx.BeginFunc(ctx, w.sender.Pool, func(tx pgx.Tx) error {
		var err error
		id, err = w.n.Enqueue(ctx, tx, notify.Notification{Receiver: "shop", Key: key, Payload: json.RawMessage(`{}`)})
		return err
	})
	return id, err
}

// allDelivered waits (at most within) until every notification of ids is delivered, then checks
// that the receiver applied each once and nothing else.
func (w *notifyWorld) allDelivered(ids map[string]uuid.UUID, within time.Duration) {
	w.t.Helper()
	ctx := w.t.Context()
	pending := map[string]uuid.UUID{}
	for k, id := range ids {
		pending[k] = id
	}
	testenv.Eventually(w.t, within, 200*time.Millisecond, func() bool {
		for k, id := range pending {
			rec, err := w.n.Get(ctx, id)
			if err != nil || rec.Status != notify.StatusDelivered {
				return false
			}
			delete(pending, k)
		}
		return true
	}, "%d of %d notifications not delivered after the failover", len(pending), len(ids))
	var keys, rows int
	if err := w.receiver.Pool.QueryRow(ctx, `select count(distinct key), count(*) from applied`).Scan(&keys, &rows); err != nil {
		w.t.Fatal(err)
	}
	if keys != len(ids) || rows != len(ids) {
		w.t.Fatalf("the receiver applied %d keys in %d rows; want the %d enqueued, once each", keys, rows, len(ids))
	}
	w.t.Logf("notifier through the failover: %d notifications enqueued, every one delivered and applied once", len(ids))
}
