package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/notify"
)

// doEnqueue runs Do with a transaction that enqueues a notification of amount for each key, and
// returns their ids.
func (w *world) doEnqueue(n *notify.Notifier, amount int, keys ...string) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, len(keys))
	err := n.Do(w.t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		for i, key := range keys {
			var err error
			ids[i], err = n.Enqueue(ctx, tx, notify.Notification{Receiver: "shop", Key: key, Payload: json.RawMessage(fmt.Sprintf(`{"amount":%d}`, amount))})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return ids, err
}

// Do posts what its transaction enqueued before it returns, with no leader running, and records
// the attempts in the background (Flush waits for them): several notifications of one Do are all
// posted; a Do whose fn fails rolls back and posts nothing; a key that already has a notification
// (enqueuing is idempotent per receiver and key, so a key never has a later one to order) returns
// that one and posts nothing.
func TestIntegrationDoPostsAfterCommit(t *testing.T) {
	w := newWorld(t)
	n := w.notifier(w.receivers()) // no elector: nothing else delivers
	ids, err := w.doEnqueue(n, 10, "order-1")
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if got := w.posts.Load(); got != 1 {
		t.Fatalf("%d posts when Do returned, want 1", got)
	}
	if err := n.Flush(t.Context()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	rec, err := n.Get(t.Context(), ids[0])
	if err != nil || rec.Status != notify.StatusDelivered || rec.Attempts != 1 || rec.LastStatusCode != 200 {
		t.Fatalf("after Do and Flush: %+v, %v; want delivered at attempt 1 with 200", rec, err)
	}
	if as, err := n.Attempts(t.Context(), ids[0]); err != nil || len(as) != 1 || as[0].N != 1 {
		t.Fatalf("attempts %+v, %v; want the one", as, err)
	}

	several, err := w.doEnqueue(n, 1, "order-2", "order-3", "order-4")
	if err != nil {
		t.Fatalf("Do of three: %v", err)
	}
	if got := w.posts.Load(); got != 4 {
		t.Fatalf("%d posts, want 4: Do of three posted %d", got, got-1)
	}

	refused := errors.New("refused")
	var rolledBack uuid.UUID
	err = n.Do(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		var err error
		rolledBack, err = n.Enqueue(ctx, tx, notify.Notification{Receiver: "shop", Key: "order-5", Payload: json.RawMessage(`{"amount":1}`)})
		if err != nil {
			return err
		}
		return refused
	})
	if !errors.Is(err, refused) {
		t.Fatalf("Do whose fn fails: %v, want its error", err)
	}
	if _, err := n.Get(t.Context(), rolledBack); !errors.Is(err, notify.ErrNotFound) {
		t.Fatalf("the rolled back notification: %v, want ErrNotFound", err)
	}

	again, err := w.doEnqueue(n, 10, "order-1")
	if err != nil || again[0] != ids[0] {
		t.Fatalf("Do enqueuing order-1 again: %v, %v; want %v", again, err, ids[0])
	}
	if got := w.posts.Load(); got != 4 {
		t.Fatalf("%d posts, want 4: the rolled back one or the existing key was posted", got)
	}
	if err := n.Flush(t.Context()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	for _, key := range []string{"order-1", "order-2", "order-3", "order-4"} {
		if got := w.applied(key); got != 1 {
			t.Errorf("%s applied %d times, want 1", key, got)
		}
	}
	for _, id := range several {
		if rec, err := n.Get(t.Context(), id); err != nil || rec.Status != notify.StatusDelivered || rec.Attempts != 1 {
			t.Errorf("%s: %+v, %v; want delivered at attempt 1", id, rec, err)
		}
	}
}

// Savepoints: a notification enqueued while a savepoint is open — with the outer tx, too — is not
// Do's to post, since rolling the savepoint back undoes it: one rolled back is never posted, one
// whose savepoint was released is left to the leader (pending, unclaimed); what is enqueued once
// the savepoints are closed Do posts.
func TestIntegrationDoSavepoint(t *testing.T) {
	w := newWorld(t)
	n := w.notifier(w.receivers()) // no elector: nothing else delivers
	enqueue := func(ctx context.Context, tx pgx.Tx, key string) (uuid.UUID, error) {
		return n.Enqueue(ctx, tx, notify.Notification{Receiver: "shop", Key: key, Payload: json.RawMessage(`{"amount":1}`)})
	}
	var kept, after uuid.UUID
	err := n.Do(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := enqueue(ctx, tx, "rolled-back"); err != nil { // the outer tx, inside the savepoint
			return err
		}
		if err := sp.Rollback(ctx); err != nil {
			return err
		}
		if err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) (err error) {
			kept, err = enqueue(ctx, sp, "released")
			return err
		}); err != nil {
			return err
		}
		after, err = enqueue(ctx, tx, "after")
		return err
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if got := w.posts.Load(); got != 1 {
		t.Fatalf("%d posts, want 1 (the one enqueued after the savepoints): a notification enqueued in a savepoint was posted", got)
	}
	if _, err := n.ByKey(t.Context(), "shop", "rolled-back"); !errors.Is(err, notify.ErrNotFound) {
		t.Fatalf("the rolled back one: %v, want ErrNotFound", err)
	}
	if rec, err := n.Get(t.Context(), kept); err != nil || rec.Status != notify.StatusPending || rec.Attempts != 0 {
		t.Fatalf("the released one: %+v, %v; want pending, not attempted (the leader's)", rec, err)
	}
	if err := n.Deliver(t.Context(), kept); err != nil { // unclaimed: Deliver can claim it
		t.Fatalf("Deliver of the released one: %v", err)
	}
	if err := n.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, id := range []uuid.UUID{kept, after} {
		if rec, err := n.Get(t.Context(), id); err != nil || rec.Status != notify.StatusDelivered || rec.Attempts != 1 {
			t.Errorf("%s: %+v, %v; want delivered at attempt 1", id, rec, err)
		}
	}
}

// Do in two processes (two notifiers, each with its pool) and the leader ticking every 10 ms, all
// at once, and a Deliver of each id from the other process once its Do has returned: each
// notification is posted exactly once (counted at the receiver) and recorded delivered at attempt
// 1. With Do's rows written unclaimed, the leader posts them too ("posted 2 times").
func TestIntegrationDoRacePostedOnce(t *testing.T) {
	w := newWorld(t)
	r := w.newRace()
	const workers, each = 8, 25
	ids := make(chan uuid.UUID, workers*each)
	errs := make(chan error, workers*each)
	var wg sync.WaitGroup
	for i := range workers {
		n, m := r.a, r.b // Do in one process, Deliver of the same id from the other
		if i%2 == 1 {
			n, m = r.b, r.a
		}
		wg.Go(func() {
			for j := range each {
				got, err := w.doEnqueue(n, j, fmt.Sprintf("w%d-%03d", i, j))
				if err != nil {
					errs <- fmt.Errorf("Do: %w", err)
					return
				}
				ids <- got[0]
				if err := m.Deliver(t.Context(), got[0]); err != nil {
					errs <- fmt.Errorf("Deliver after Do: %w", err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	close(ids)
	for err := range errs {
		t.Error(err)
	}
	var all []uuid.UUID
	for id := range ids {
		all = append(all, id)
	}
	if len(all) != workers*each {
		t.Errorf("%d notifications enqueued, want %d", len(all), workers*each)
	}
	r.postedOnce(all)
	t.Logf("%d notifications: %d delivered by the leader, %d recorded by Do (a, b: %d, %d)", len(all), r.leader.Stats().Delivered,
		r.a.Stats().Delivered+r.b.Stats().Delivered, r.a.Stats().Delivered, r.b.Stats().Delivered)
}

// What Do does not finish, the leader does: a first attempt that failed (500) is recorded, not
// Do's error, and retried on the schedule; a notification Do committed and never posted (its
// process died after the commit: the seam) is the leader's once the claim's lease — the call
// timeout (1 s here) + 5 s — has passed, not before. Each is applied once.
func TestIntegrationDoLeftToLeader(t *testing.T) {
	w := newWorld(t)
	opts := []notify.Option{notify.CallTimeoutForTest(time.Second)}
	n := w.running("leader", w.receivers(), opts...)
	dying := w.notifier(w.receivers(), append(opts, notify.PostAfterCommitForTest(false))...)
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) bool {
		http.Error(rw, "down", http.StatusInternalServerError)
		return true
	})
	failed, err := w.doEnqueue(w.notifier(w.receivers(), opts...), 3, "first-attempt-500")
	if err != nil {
		t.Fatalf("Do whose post is answered 500: %v, want nil (the transaction committed)", err)
	}
	w.setAnswer(nil)
	never, err := w.doEnqueue(dying, 1, "never-posted")
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	committed := time.Now() // after the row's insert: the lease ran from before then
	w.waitStatus(n, notify.Notification{ID: failed[0], Key: "first-attempt-500"}, notify.StatusDelivered, 15*time.Second)
	if as, err := n.Attempts(t.Context(), failed[0]); err != nil || len(as) != 2 || as[0].StatusCode != 500 || as[1].StatusCode != 200 {
		t.Fatalf("attempts of the failed one %+v, %v; want 500 then 200", as, err)
	}
	rec := w.waitStatus(n, notify.Notification{ID: never[0], Key: "never-posted"}, notify.StatusDelivered, 30*time.Second)
	after := rec.DeliveredAt.Sub(committed)
	if lease := 6 * time.Second; after < lease-500*time.Millisecond {
		t.Errorf("the never posted one was delivered %v after its commit: before the claim's lease of %v", after, lease)
	}
	if rec.Attempts != 1 {
		t.Errorf("the never posted one: delivered at attempt %d, want 1", rec.Attempts)
	}
	t.Logf("never posted by Do: delivered by the leader %v after its commit", after.Round(time.Millisecond))
	for _, key := range []string{"first-attempt-500", "never-posted"} {
		if got := w.applied(key); got != 1 {
			t.Errorf("%s applied %d times, want 1", key, got)
		}
	}
}

// flush waits for n's background records, as a test's cleanup: before the pool closes.
func flush(t *testing.T, n *notify.Notifier) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Flush(ctx); err != nil {
		t.Errorf("Flush: %v", err)
	}
}
