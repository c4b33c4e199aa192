package notify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/notify"
)

// Deliver posts a committed notification at once from the enqueuing process, with no leader
// running: delivered at attempt 1, applied once, the attempt recorded; a second Deliver posts
// nothing; an id that was never committed is not found.
func TestIntegrationDeliverAtOnce(t *testing.T) {
	w := newWorld(t)
	n := w.notifier(w.receivers()) // no elector: nothing else delivers
	nt := w.enqueue(n, "shop", "order-1", 30)
	if err := n.Deliver(t.Context(), nt.ID); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	rec, err := n.Get(t.Context(), nt.ID)
	if err != nil || rec.Status != notify.StatusDelivered || rec.Attempts != 1 || rec.LastStatusCode != 200 {
		t.Fatalf("after Deliver: %+v, %v; want delivered at attempt 1 with 200", rec, err)
	}
	if got := w.applied("order-1"); got != 1 {
		t.Fatalf("applied %d times", got)
	}
	if as, err := n.Attempts(t.Context(), nt.ID); err != nil || len(as) != 1 || as[0].N != 1 || as[0].StatusCode != 200 {
		t.Fatalf("attempts %+v, %v", as, err)
	}
	if err := n.Deliver(t.Context(), nt.ID); err != nil {
		t.Fatalf("Deliver again: %v", err)
	}
	if got := w.posts.Load(); got != 1 {
		t.Fatalf("%d posts, want 1: Deliver of a delivered notification posted it again", got)
	}
	// Deliver inside the transaction, before its commit: not found (the leader will have it).
	err = pgx.BeginFunc(t.Context(), w.sender.Pool, func(tx pgx.Tx) error {
		id, err := n.Enqueue(t.Context(), tx, notify.Notification{Receiver: "shop", Key: "order-2", Payload: json.RawMessage(`{"amount":1}`)})
		if err != nil {
			return err
		}
		if err := n.Deliver(t.Context(), id); !errors.Is(err, notify.ErrNotFound) {
			t.Errorf("Deliver before commit: %v, want ErrNotFound", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// What the first attempt does not finish, the leader does: a notification nobody Delivers, and one
// whose first attempt failed (500). (A process killed before Deliver or mid-post:
// TestIntegrationDeliverEnqueuerKilled.)
func TestIntegrationDeliverLeftToLeader(t *testing.T) {
	w := newWorld(t)
	enqueuer := w.notifier(w.receivers()) // the process that dies: it never runs
	died := w.enqueue(enqueuer, "shop", "died-before-deliver", 1)
	failed := w.enqueue(enqueuer, "shop", "first-attempt-500", 3)
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) bool {
		http.Error(rw, "down", http.StatusInternalServerError)
		return true
	})
	if err := enqueuer.Deliver(t.Context(), failed.ID); err == nil {
		t.Fatal("Deliver to a receiver answering 500: nil error")
	}
	if rec, err := enqueuer.Get(t.Context(), failed.ID); err != nil || rec.Status != notify.StatusPending || rec.Attempts != 1 || rec.LastStatusCode != 500 {
		t.Fatalf("after the failed Deliver: %+v, %v; want pending after attempt 1 (500)", rec, err)
	}
	w.setAnswer(nil)
	start := time.Now()
	n := w.running("leader", w.receivers())
	for _, nt := range []notify.Notification{died, failed} {
		w.waitStatus(n, nt, notify.StatusDelivered, 15*time.Second)
	}
	t.Logf("the leader delivered them %v after it started", time.Since(start).Round(time.Millisecond))
	for key, want := range map[string]int{"died-before-deliver": 1, "first-attempt-500": 1} {
		if got := w.applied(key); got != want {
			t.Errorf("%s applied %d times, want %d", key, got, want)
		}
	}
	if as, err := n.Attempts(t.Context(), failed.ID); err != nil || len(as) != 2 || as[0].StatusCode != 500 || as[1].StatusCode != 200 {
		t.Fatalf("attempts of the failed one %+v, %v; want 500 then 200", as, err)
	}
}

// Enqueue wakes nobody: a notification nobody Delivers is the leader's at its tick, or sooner
// while its receiver has pending notifications. The tick here is an hour and one notification is
// pending (its Delivered attempt failed, its retry an hour away): the leader's poll finds each
// notification enqueued and not Delivered and delivers it, posting the pending one no more.
func TestIntegrationUndeliveredTakenWhilePending(t *testing.T) {
	w := newWorld(t)
	opts := []notify.Option{notify.WithTick("@every 1h", 100), notify.WithSchedule([]time.Duration{time.Hour}, 0)}
	enqueuer := w.notifier(w.receivers(), opts...)
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) bool {
		http.Error(rw, "down", http.StatusInternalServerError)
		return true
	})
	stuck := w.enqueue(enqueuer, "shop", "stuck", 1)
	if err := enqueuer.Deliver(t.Context(), stuck.ID); err == nil {
		t.Fatal("Deliver to a receiver answering 500: nil error")
	}
	w.setAnswer(nil)
	n := w.running("leader", w.receivers(), opts...)
	for i := range 3 {
		nt := w.enqueue(enqueuer, "shop", fmt.Sprintf("not-delivered-%d", i), 1)
		start := time.Now()
		w.waitStatus(n, nt, notify.StatusDelivered, 15*time.Second)
		t.Logf("%s delivered by the leader %v after its commit", nt.Key, time.Since(start).Round(time.Millisecond))
	}
	if got := w.posts.Load(); got != 4 {
		t.Errorf("%d posts, want 4: the failed one once, each of the others once", got)
	}
	if rec, err := n.Get(t.Context(), stuck.ID); err != nil || rec.Status != notify.StatusPending || rec.Attempts != 1 {
		t.Errorf("the pending one: %+v, %v; want pending after its one attempt", rec, err)
	}
}

// The enqueuer's Deliver, another process's Deliver of the same id and the leader (ticking every
// 10 ms) all try each notification at once: each is posted exactly once (counted at the
// receiver) and recorded delivered at attempt 1.
func TestIntegrationDeliverRacePostedOnce(t *testing.T) {
	w := newWorld(t)
	r := w.newRace()
	const total = 200
	ids := make([]uuid.UUID, total)
	var wg sync.WaitGroup
	errs := make(chan error, 2*total)
	for i := range total {
		nt := w.enqueue(r.a, "shop", fmt.Sprintf("order-%03d", i), i)
		ids[i] = nt.ID
		for _, n := range []*notify.Notifier{r.a, r.b} {
			wg.Go(func() {
				if err := n.Deliver(t.Context(), nt.ID); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Deliver: %v", err)
	}
	r.postedOnce(ids)
	byLeader := int(r.leader.Stats().Delivered)
	t.Logf("%d notifications: %d delivered by the leader, %d by a Deliver call (a, b: %d, %d)", total, byLeader, total-byLeader,
		r.a.Stats().Delivered, r.b.Stats().Delivered)
}

// race is the set-up of the race tests: receiver "shop" counting the posts of each notification
// (it acknowledges them all), its leader ticking every 10 ms, a notifier of this process (a) and
// one of another (b, with a pool of its own).
type race struct {
	w            *world
	leader, a, b *notify.Notifier
	mu           sync.Mutex
	posts        map[string]int // by notification id
}

func (w *world) newRace() *race {
	r := &race{w: w, posts: map[string]int{}}
	rcv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.posts[req.Header.Get(notify.HeaderID)]++
		r.mu.Unlock()
		_, _ = rw.Write([]byte("success"))
	}))
	w.t.Cleanup(rcv.Close)
	rcvs := []notify.Receiver{{Name: "shop", URL: rcv.URL, Secrets: []string{secret}, Echo: "success", Concurrency: 8}}
	r.leader = w.running("leader", rcvs, notify.WithTick("@every 10ms", 100))
	r.a = w.notifier(rcvs)
	other, err := pgxpool.New(w.t.Context(), os.Getenv(testenv.EnvPG)) // the second process's own pool
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(other.Close)
	r.b, err = notify.New(other, rcvs, notify.WithTable(w.sender.Name, ""), notify.WithPlainHTTP(), notify.WithLogger(testenv.Logger(w.t)))
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { flush(w.t, r.b) }) // b's records, before its pool closes
	return r
}

// postedOnce checks that each of ids was delivered at attempt 1 and posted exactly once, and that
// nothing else was posted.
func (r *race) postedOnce(ids []uuid.UUID) {
	t := r.w.t
	t.Helper()
	for _, id := range ids {
		rec := r.w.waitStatus(r.leader, notify.Notification{ID: id}, notify.StatusDelivered, 15*time.Second)
		if rec.Attempts != 1 {
			t.Errorf("%s delivered at attempt %d, want 1", id, rec.Attempts)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if got := r.posts[id.String()]; got != 1 {
			t.Errorf("%s posted %d times, want exactly 1", id, got)
		}
	}
	if len(r.posts) != len(ids) {
		t.Errorf("%d notifications posted, want %d", len(r.posts), len(ids))
	}
}

// Deliver's breaker: after the breaker's failures in a row to one receiver, a Deliver call posts
// nothing and leaves the notification pending, no attempt counted, for the leader.
func TestIntegrationDeliverBreaker(t *testing.T) {
	w := newWorld(t)
	n := w.notifier(w.receivers(), notify.WithBreaker(2, time.Minute))
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) bool {
		http.Error(rw, "down", http.StatusServiceUnavailable)
		return true
	})
	for i := range 2 {
		nt := w.enqueue(n, "shop", fmt.Sprintf("order-%d", i), 1)
		if err := n.Deliver(t.Context(), nt.ID); err == nil {
			t.Fatalf("Deliver %d to a receiver answering 503: nil error", i)
		}
	}
	held := w.enqueue(n, "shop", "held", 1)
	if err := n.Deliver(t.Context(), held.ID); err != nil {
		t.Fatalf("Deliver with the circuit open: %v", err)
	}
	if got := w.posts.Load(); got != 2 {
		t.Fatalf("%d posts, want 2: the open circuit let a post through", got)
	}
	rec, err := n.Get(t.Context(), held.ID)
	if err != nil || rec.Status != notify.StatusPending || rec.Attempts != 0 || !rec.NextAttemptAt.After(time.Now().Add(30*time.Second)) {
		t.Fatalf("held back: %+v, %v; want pending, no attempt, due after the cool-down", rec, err)
	}
	if st := n.Stats(); st.BreakerOpened != 1 || st.FailedAttempts != 2 {
		t.Fatalf("stats %+v, want the breaker opened once after 2 failed attempts", st)
	}
}

// An enqueuing process: the test binary run again with enqueuerEnv set to a JSON enqueuerConfig
// (testenv.StartWorker). It enqueues one notification and commits, then calls Deliver unless
// NoDeliver is set, and waits for its SIGKILL (or SIGTERM).
const enqueuerEnv = "TXKIT_NOTIFY_ENQUEUER"

type enqueuerConfig struct {
	PG, Schema, URL, Key string
	NoDeliver            bool
}

func enqueuer(ctx context.Context, c enqueuerConfig) error {
	pool, err := pgxpool.New(ctx, c.PG)
	if err != nil {
		return err
	}
	defer pool.Close()
	n, err := notify.New(pool, []notify.Receiver{{Name: "shop", URL: c.URL, Secrets: []string{secret}, Echo: "success"}},
		notify.WithTable(c.Schema, ""), notify.WithPlainHTTP(), notify.CallTimeoutForTest(2*time.Second))
	if err != nil {
		return err
	}
	var id uuid.UUID
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		id, err = n.Enqueue(ctx, tx, notify.Notification{Receiver: "shop", Key: c.Key, Payload: json.RawMessage(`{"amount":5}`)})
		return err
	}); err != nil {
		return err
	}
	if !c.NoDeliver {
		_ = n.Deliver(ctx, id) // the receiver holds the post until the process is killed
	}
	<-ctx.Done()
	return nil
}

// The enqueuing process is SIGKILLed after its commit: once before it calls Deliver, once while
// its post hangs in the receiver (claimed, not recorded). The leader delivers both, the second
// once the claim's lease (call timeout 2 s + 5 s) has run out; each is applied once.
func TestIntegrationDeliverEnqueuerKilled(t *testing.T) {
	w := newWorld(t)
	n := w.running("leader", w.receivers()) // migrates the tables the workers use
	var hung atomic.Bool
	entered := make(chan struct{}, 1)
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) bool {
		var d notify.Delivery
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if json.Unmarshal(body, &d) == nil && d.Key == "killed-mid-post" && hung.CompareAndSwap(false, true) {
			entered <- struct{}{}
			<-r.Context().Done() // hangs until the killed process's connection is gone
			return true
		}
		return false
	})
	cfg := enqueuerConfig{PG: os.Getenv(testenv.EnvPG), Schema: w.sender.Name, URL: w.srv.URL, Key: "killed-before-deliver", NoDeliver: true}
	worker := testenv.StartWorker(t, enqueuerEnv, cfg, "enqueuer: ")
	var before *notify.Record
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool {
		r, err := n.ByKey(t.Context(), "shop", cfg.Key)
		before = r
		return err == nil
	}, "the enqueuer never committed")
	worker.Kill()
	killed := time.Now()
	w.waitStatus(n, before.Notification, notify.StatusDelivered, 15*time.Second)
	t.Logf("killed after its commit, before Deliver: delivered by the leader %v after the SIGKILL", time.Since(killed).Round(time.Millisecond))

	cfg.Key, cfg.NoDeliver = "killed-mid-post", false
	worker = testenv.StartWorker(t, enqueuerEnv, cfg, "enqueuer: ")
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the enqueuer never posted")
	}
	worker.Kill()
	killed = time.Now()
	mid, err := n.ByKey(t.Context(), "shop", cfg.Key)
	if err != nil {
		t.Fatal(err)
	}
	rec := w.waitStatus(n, mid.Notification, notify.StatusDelivered, 30*time.Second)
	t.Logf("killed mid-post: delivered by the leader %v after the SIGKILL, attempt %d", time.Since(killed).Round(time.Millisecond), rec.Attempts)
	for _, key := range []string{"killed-before-deliver", "killed-mid-post"} {
		if got := w.applied(key); got != 1 {
			t.Errorf("%s applied %d times, want 1", key, got)
		}
	}
}
