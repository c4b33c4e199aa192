package notify_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/notify"
)

func TestIntegrationDeliveredAndAppliedOnce(t *testing.T) {
	w := newWorld(t)
	n := w.running("a", w.receivers())
	nt := w.enqueue(n, "shop", "order-1", 30)
	rec := w.waitStatus(n, nt, notify.StatusDelivered, 10*time.Second)
	if rec.Attempts != 1 || rec.LastStatusCode != 200 || rec.DeliveredAt == nil {
		t.Fatalf("record %+v, want delivered at the first attempt with 200", rec)
	}
	if got := w.applied("order-1"); got != 1 {
		t.Fatalf("applied %d times", got)
	}
	as, err := n.Attempts(t.Context(), nt.ID)
	if err != nil || len(as) != 1 || as[0].StatusCode != 200 || as[0].Error != "" || as[0].Latency <= 0 {
		t.Fatalf("attempts %+v, %v", as, err)
	}
	// Enqueuing the same business key again records nothing new.
	again := w.enqueue(n, "shop", "order-1", 999)
	if again.ID != nt.ID {
		t.Fatalf("second Enqueue of the key returned %s, want the first id %s", again.ID, nt.ID)
	}
}

// The receiver answers 503 (down), then 500, then acknowledges: the notification is delivered at
// the third attempt, on the schedule, and every attempt's status is kept.
func TestIntegrationReceiverDownThenBack(t *testing.T) {
	w := newWorld(t)
	var calls atomic.Int32
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) bool {
		switch calls.Add(1) {
		case 1:
			http.Error(rw, "down", http.StatusServiceUnavailable)
			return true
		case 2:
			http.Error(rw, "boom", http.StatusInternalServerError)
			return true
		}
		return false
	})
	n := w.running("a", w.receivers())
	nt := w.enqueue(n, "shop", "order-2", 5)
	rec := w.waitStatus(n, nt, notify.StatusDelivered, 15*time.Second)
	if rec.Attempts != 3 {
		t.Fatalf("delivered at attempt %d, want 3", rec.Attempts)
	}
	as, err := n.Attempts(t.Context(), nt.ID)
	if err != nil || len(as) != 3 {
		t.Fatalf("attempts %+v, %v", as, err)
	}
	if as[0].StatusCode != 503 || as[1].StatusCode != 500 || as[2].StatusCode != 200 || !strings.Contains(as[1].Error, "boom") {
		t.Fatalf("attempts %+v, want 503, 500 (boom), 200", as)
	}
	// The second attempt waited for the schedule's first delay (100 ms ± 10 %), by PostgreSQL's clock.
	if gap := as[1].At.Sub(as[0].At); gap < 85*time.Millisecond {
		t.Fatalf("second attempt %v after the first, before the schedule's 100ms", gap)
	}
	if got := w.applied("order-2"); got != 1 {
		t.Fatalf("applied %d times", got)
	}
}

// A receiver that never recovers: after the last attempt of the schedule the notification is
// failed and listed; an operator redelivers it once the receiver is back.
func TestIntegrationFailedThenRedelivered(t *testing.T) {
	w := newWorld(t)
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) bool {
		http.Error(rw, "still broken", http.StatusBadGateway)
		return true
	})
	n := w.running("a", w.receivers())
	nt := w.enqueue(n, "shop", "order-3", 7)
	rec := w.waitStatus(n, nt, notify.StatusFailed, 15*time.Second)
	if rec.Attempts != 4 || rec.LastStatusCode != 502 {
		t.Fatalf("failed record %+v, want 4 attempts (1 + a schedule of 3), last 502", rec)
	}
	failed, err := n.ListFailed(t.Context(), 10)
	if err != nil || len(failed) != 1 || failed[0].ID != nt.ID {
		t.Fatalf("ListFailed = %v, %v", failed, err)
	}
	if err := n.Redeliver(t.Context(), uuid.New()); !errors.Is(err, notify.ErrNotFound) {
		t.Fatalf("Redeliver(unknown) = %v, want ErrNotFound", err)
	}
	w.setAnswer(nil)
	if err := n.Redeliver(t.Context(), nt.ID); err != nil {
		t.Fatalf("Redeliver: %v", err)
	}
	rec = w.waitStatus(n, nt, notify.StatusDelivered, 10*time.Second)
	if rec.Attempts != 1 {
		t.Fatalf("redelivered record %+v, want delivered at the first attempt of the new schedule", rec)
	}
	if err := n.Redeliver(t.Context(), nt.ID); !errors.Is(err, notify.ErrInvalidOption) {
		t.Fatalf("Redeliver(delivered) = %v, want ErrInvalidOption", err)
	}
	as, err := n.Attempts(t.Context(), nt.ID)
	if err != nil || len(as) != 5 || as[3].StatusCode != 502 || as[4].N != 5 || as[4].StatusCode != 200 {
		t.Fatalf("attempts after the redelivery %+v, %v; want the 4 failed ones and the success as the 5th", as, err)
	}
	if got := w.applied("order-3"); got != 1 {
		t.Fatalf("applied %d times", got)
	}
}

// signed builds a delivery request to the inbox, signed with key at ts.
func signed(t *testing.T, url, key string, ts time.Time, d notify.Delivery) *http.Request {
	body := fmt.Appendf(nil, `{"id":%q,"receiver":"shop","key":%q,"payload":{"amount":1},"created_at":"2026-01-01T00:00:00Z"}`, d.ID, d.Key)
	r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set(notify.HeaderID, d.ID.String())
	r.Header.Set(notify.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	r.Header.Set(notify.HeaderSignature, notify.Sign(key, ts.Unix(), http.MethodPost, "/", body))
	return r
}

func post(t *testing.T, r *http.Request) int {
	t.Helper()
	body, _ := r.GetBody()
	r2 := r.Clone(t.Context())
	r2.Body = body
	resp, err := http.DefaultClient.Do(r2)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Bad signatures, stale timestamps and replays are refused with 401 and apply nothing; a
// duplicate delivery (the sender's retry, signed anew) is acknowledged and applied once; the old
// key of a rotation still verifies.
func TestIntegrationInboxRefuses(t *testing.T) {
	w := newWorld(t)
	now := time.Now()
	d := notify.Delivery{ID: uuid.New(), Key: "order-4"}
	for name, r := range map[string]*http.Request{
		"wrong key": signed(t, w.srv.URL, "not-the-secret-0123456789", now, d),
		"stale":     signed(t, w.srv.URL, secret, now.Add(-10*time.Minute), d),
		"future":    signed(t, w.srv.URL, secret, now.Add(10*time.Minute), d),
		"tampered key": func() *http.Request {
			r := signed(t, w.srv.URL, secret, now, d)
			r.Header.Set(notify.HeaderID, uuid.NewString())
			return r
		}(),
	} {
		if code := post(t, r); code != http.StatusUnauthorized && code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 401 (or 400)", name, code)
		}
	}
	if got := w.applied("order-4"); got != 0 {
		t.Fatalf("refused requests applied %d", got)
	}
	first := signed(t, w.srv.URL, secret, now, d)
	if code := post(t, first); code != http.StatusOK {
		t.Fatalf("good delivery: %d", code)
	}
	if code := post(t, first); code != http.StatusUnauthorized {
		t.Fatalf("replay of the same request: %d, want 401", code)
	}
	if code := post(t, signed(t, w.srv.URL, oldSecret, now.Add(time.Second), d)); code != http.StatusOK {
		t.Fatalf("the sender's retry, signed with the rotation's old key: %d, want 200", code)
	}
	if got := w.applied("order-4"); got != 1 {
		t.Fatalf("applied %d times, want 1", got)
	}
}

// A slow receiver (one delivery at a time, 1.5 s each) does not delay a fast one.
func TestIntegrationSlowReceiverDoesNotDelayFast(t *testing.T) {
	w := newWorld(t)
	slow := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(1500 * time.Millisecond):
		case <-r.Context().Done():
		}
		_, _ = rw.Write([]byte("success"))
	}))
	t.Cleanup(slow.Close)
	// Enqueue does not wake the leader (nobody Delivers here): it finds them on a 100 ms tick.
	n := w.running("a", w.receivers(notify.Receiver{Name: "slow", URL: slow.URL, Secrets: []string{secret}, Concurrency: 1}),
		notify.WithTick("@every 100ms", 100))
	var slows []notify.Notification
	for i := range 4 {
		slows = append(slows, w.enqueue(n, "slow", fmt.Sprint("s", i), 1))
	}
	start := time.Now()
	var fast []notify.Notification
	for i := range 10 {
		fast = append(fast, w.enqueue(n, "shop", fmt.Sprint("f", i), 1))
	}
	for _, nt := range fast {
		w.waitStatus(n, nt, notify.StatusDelivered, 10*time.Second)
	}
	took := time.Since(start)
	pending := 0
	for _, nt := range slows {
		if r, _ := n.Get(t.Context(), nt.ID); r.Status == notify.StatusPending {
			pending++
		}
	}
	if took > 3*time.Second || pending < 2 {
		t.Fatalf("fast receiver's 10 took %v with %d of the slow one's 4 still pending; want well under 3s while the slow one works", took, pending)
	}
}

// A receiver that keeps failing is held back as a whole: after two consecutive failures its
// circuit opens and no more attempts are made during the cool-down.
func TestIntegrationBreaker(t *testing.T) {
	w := newWorld(t)
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) bool {
		http.Error(rw, "overloaded", http.StatusServiceUnavailable)
		return true
	})
	n := w.running("a", w.receivers(), notify.WithBreaker(2, time.Hour))
	for i := range 20 {
		w.enqueue(n, "shop", fmt.Sprint("b", i), 1)
	}
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool { return n.Stats().BreakerOpened == 1 },
		"the breaker did not open")
	// Posts the receiver's workers had begun before the breaker opened may still land: wait until
	// the count holds still, then watch a window in which no post may happen.
	posts := w.posts.Load()
	for deadline := time.Now().Add(5 * time.Second); ; {
		time.Sleep(200 * time.Millisecond)
		p := w.posts.Load()
		if p == posts {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("posts did not stop after the breaker opened: %d, then %d", posts, p)
		}
		posts = p
	}
	time.Sleep(1500 * time.Millisecond) // the absence is the assertion
	if more := w.posts.Load() - posts; more != 0 {
		t.Fatalf("%d more posts to a receiver whose circuit is open", more)
	}
	// The held-back notifications did not spend their attempts.
	var spent int
	if err := w.sender.Pool.QueryRow(t.Context(), `select coalesce(sum(attempts), 0) from txkit_notify`).Scan(&spent); err != nil {
		t.Fatal(err)
	}
	// 2 failures open it; the receiver's 4 workers may each have sent one more meanwhile.
	if spent > 2+4 {
		t.Fatalf("%d attempts of 20 notifications spent, with the circuit open after 2 failures", spent)
	}
}

// The leader loses its leadership while a delivery hangs: the next leader delivers it again, and
// the receiver applies it once.
func TestIntegrationLeaderLostMidDelivery(t *testing.T) {
	w := newWorld(t)
	var hung atomic.Bool
	entered := make(chan struct{}, 1)
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) bool {
		if hung.CompareAndSwap(false, true) {
			entered <- struct{}{}
			_, _ = io.Copy(io.Discard, r.Body) // the server notices a closed connection only once the body is read
			<-r.Context().Done()               // the first delivery hangs until its leader gives up
			return true
		}
		return false
	})
	first := w.notifier(w.receivers(), notify.WithElector(zkenv.Elector(t, w.path, "first")))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	nt := w.enqueue(first, "shop", "order-5", 9)
	<-entered
	second := w.running("second", w.receivers())
	cancel() // the first leader stops mid-delivery (its Run ends, its leadership with it)
	if err := <-done; err != nil {
		t.Fatalf("first Run: %v", err)
	}
	rec := w.waitStatus(second, nt, notify.StatusDelivered, 20*time.Second)
	if got := w.applied("order-5"); got != 1 {
		t.Fatalf("applied %d times", got)
	}
	t.Logf("delivered by the second leader; attempts %d", rec.Attempts)
}

// A notification that never reached the receiver (here the sender never ran) is recovered by
// the receiver through the query API, and applied once.
func TestIntegrationReconcile(t *testing.T) {
	w := newWorld(t)
	n := w.notifier(w.receivers())
	query := httptest.NewServer(n.QueryHandler())
	t.Cleanup(query.Close)
	nt := w.enqueue(n, "shop", "order-6", 11)
	c := w.client(query.URL, secret)
	res, err := c.ByKey(t.Context(), "order-6")
	if err != nil || res.ID != nt.ID || res.Status != notify.StatusPending {
		t.Fatalf("ByKey = %+v, %v", res, err)
	}
	applied, err := w.inbox.Reconcile(t.Context(), c, "order-6", "no-such-order")
	if err != nil || applied != 1 {
		t.Fatalf("Reconcile = %d, %v; want 1 applied", applied, err)
	}
	if applied, err = w.inbox.Reconcile(t.Context(), c, "order-6"); err != nil || applied != 0 {
		t.Fatalf("second Reconcile = %d, %v; want 0", applied, err)
	}
	if got := w.applied("order-6"); got != 1 {
		t.Fatalf("applied %d times", got)
	}
	// Queries are signed: a wrong secret is refused, an unknown id is not found.
	if _, err := w.client(query.URL, "wrong-secret-0123456789").ByKey(t.Context(), "order-6"); !errors.Is(err, notify.ErrUnauthorized) {
		t.Fatalf("query with a wrong secret = %v, want ErrUnauthorized", err)
	}
	if _, err := c.ByID(t.Context(), uuid.New()); !errors.Is(err, notify.ErrNotFound) {
		t.Fatalf("query of an unknown id = %v, want ErrNotFound", err)
	}
}

func TestIntegrationBadInput(t *testing.T) {
	w := newWorld(t)
	n := w.notifier(w.receivers())
	ctx := t.Context()
	enqueue := func(nt notify.Notification) error {
		return pgx.BeginFunc(ctx, w.sender.Pool, func(tx pgx.Tx) error { _, err := n.Enqueue(ctx, tx, nt); return err })
	}
	for name, tc := range map[string]struct {
		err  error
		want error
	}{
		"unknown receiver": {enqueue(notify.Notification{Receiver: "nobody", Key: "k", Payload: []byte(`{}`)}), notify.ErrInvalidNotification},
		"empty key":        {enqueue(notify.Notification{Receiver: "shop", Payload: []byte(`{}`)}), notify.ErrInvalidNotification},
		"long key":         {enqueue(notify.Notification{Receiver: "shop", Key: strings.Repeat("k", 300), Payload: []byte(`{}`)}), notify.ErrInvalidNotification},
		"not JSON":         {enqueue(notify.Notification{Receiver: "shop", Key: "k", Payload: []byte(`{`)}), notify.ErrInvalidNotification},
		"nil tx":           {func() error { _, err := n.Enqueue(ctx, nil, notify.Notification{}); return err }(), notify.ErrNilTx},
		"no URL": {func() error {
			_, err := notify.New(w.sender.Pool, []notify.Receiver{{Name: "x", Secrets: []string{secret}}})
			return err
		}(), notify.ErrInvalidOption},
		"no secret": {func() error {
			_, err := notify.New(w.sender.Pool, []notify.Receiver{{Name: "x", URL: "https://x"}})
			return err
		}(), notify.ErrInvalidOption},
		"twice": {func() error {
			_, err := notify.New(w.sender.Pool, append(w.receivers(), w.receivers()...), notify.WithPlainHTTP())
			return err
		}(), notify.ErrInvalidOption},
		"bad jitter":          {func() error { _, err := notify.New(w.sender.Pool, nil, notify.WithSchedule(nil, 2)); return err }(), notify.ErrInvalidOption},
		"no call timeout":     {func() error { _, err := notify.New(w.sender.Pool, nil, notify.CallTimeoutForTest(0)); return err }(), notify.ErrInvalidOption},
		"run without elector": {n.Run(ctx), notify.ErrInvalidOption},
		"nil elector":         {func() error { _, err := notify.New(w.sender.Pool, nil, notify.WithElector(nil)); return err }(), notify.ErrInvalidOption},
		"unknown id":          {func() error { _, err := n.Get(ctx, uuid.New()); return err }(), notify.ErrNotFound},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", name, tc.err, tc.want)
		}
	}
}

// The leading notifier is a child process, SIGKILLed while its delivery hangs in the receiver:
// the next leader delivers the notification again, and it is applied once.
func TestIntegrationLeaderKilledMidDelivery(t *testing.T) {
	w := newWorld(t)
	n := w.notifier(w.receivers()) // migrates the tables the child uses
	var hung atomic.Bool
	entered := make(chan struct{}, 1)
	w.setAnswer(func(rw http.ResponseWriter, r *http.Request) bool {
		if hung.CompareAndSwap(false, true) {
			entered <- struct{}{}
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done() // hangs until the killed child's connection is gone
			return true
		}
		return false
	})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+w.sender.Name, childReceiver+"="+w.srv.URL, childPath+"="+w.path)
	cmd.Stderr = t.Output()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	nt := w.enqueue(n, "shop", "order-7", 3)
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the child never delivered")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	next := w.running("next", w.receivers())
	rec := w.waitStatus(next, nt, notify.StatusDelivered, 30*time.Second)
	if got := w.applied("order-7"); got != 1 {
		t.Fatalf("applied %d times", got)
	}
	t.Logf("delivered %v after the SIGKILL (session timeout 3s); attempts recorded %d",
		time.Since(killed).Round(time.Millisecond), rec.Attempts)
}

// Two transactions enqueue the same receiver and key at once: the second waits for the first,
// records nothing and returns the first one's id.
func TestIntegrationConcurrentEnqueueSameKey(t *testing.T) {
	w := newWorld(t)
	n := w.notifier(w.receivers())
	ctx := t.Context()
	nt := notify.Notification{Receiver: "shop", Key: "order-1", Payload: []byte(`{"amount":1}`)}
	first, err := w.sender.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(context.WithoutCancel(ctx))
	id1, err := n.Enqueue(ctx, first, nt)
	if err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	var id2 uuid.UUID
	go func() {
		second <- pgx.BeginFunc(ctx, w.sender.Pool, func(tx pgx.Tx) error {
			var err error
			id2, err = n.Enqueue(ctx, tx, nt)
			return err
		})
	}()
	// The second enqueue waits on the first transaction's row lock; wait until PostgreSQL shows it
	// waiting, then commit the first.
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		var waiting int
		err := w.sender.Pool.QueryRow(ctx, `select count(*) from pg_stat_activity
			where datname = current_database() and wait_event_type = 'Lock' and query like '%insert into%'`).Scan(&waiting)
		return err == nil && waiting == 1
	}, "the second enqueue never waited for the first")
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatalf("second enqueue: %v", err)
	}
	if id2 != id1 {
		t.Fatalf("second enqueue returned %s, want the first one's %s", id2, id1)
	}
	var rows int
	if err := w.sender.Pool.QueryRow(ctx, `select count(*) from `+w.sender.Name+`.txkit_notify where key = 'order-1'`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Fatalf("%d rows for the key, want 1", rows)
	}
}

// The same notification posted twice at once — a new leader's post right after a dead leader's
// was applied and its answer lost, in the same second of the signature's timestamp — is not a
// replay: each post carries a nonce of its own, so the second is acknowledged as applied before,
// and the notification is applied once.
func TestIntegrationRepostNotReplay(t *testing.T) {
	w := newWorld(t)
	n := w.notifier(w.receivers())
	nt := w.enqueue(n, "shop", "order-repost", 7)
	d := notify.Delivery{ID: nt.ID, Receiver: "shop", Key: nt.Key, Payload: nt.Payload, CreatedAt: time.Now()}
	for i := range 3 {
		if ok, err := n.Post(t.Context(), "shop", d); !ok {
			t.Fatalf("post %d: %s", i+1, err)
		}
	}
	if got := w.applied("order-repost"); got != 1 {
		t.Fatalf("applied %d times, want once", got)
	}
}
