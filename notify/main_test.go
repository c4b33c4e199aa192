package notify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/notify"
	"github.com/txkit/txkit/notify/inbox"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	if code, ok := testenv.RunWorker(partWorkerEnv, partWorker); ok {
		os.Exit(code) // a notifier process (partition_test.go)
	}
	if code, ok := testenv.RunWorker(enqueuerEnv, enqueuer); ok {
		os.Exit(code) // an enqueuing process (direct_test.go)
	}
	testenv.VerifyNoLeaks(m)
}

// The environment of a child process that runs a notifier until it is killed.
const (
	childEnv      = "TXKIT_NOTIFY_CHILD"        // the schema of the notifier's tables
	childReceiver = "TXKIT_NOTIFY_CHILD_URL"    // the receiver's URL
	childPath     = "TXKIT_NOTIFY_CHILD_ZKPATH" // the election path
)

// child runs a notifier (the same settings as world.notifier) that leads and delivers until it is
// killed.
func child() int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(testenv.EnvPG))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := zklock.NewSession(ctx, strings.Split(os.Getenv(testenv.EnvZK), ","), zklock.WithSessionTimeout(3*time.Second), zklock.WithDigestAuth(zkenv.Digest()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	el, err := zklock.NewElector(s, os.Getenv(childPath), "child")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	n, err := notify.New(pool, []notify.Receiver{{Name: "shop", URL: os.Getenv(childReceiver), Secrets: []string{secret}, Echo: "success"}},
		notify.WithTable(os.Getenv(childEnv), ""), notify.WithElector(el), notify.CallTimeoutForTest(2*time.Second), notify.WithPlainHTTP(),
		notify.WithSchedule([]time.Duration{100 * time.Millisecond}, 0.1))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Fprintln(os.Stderr, n.Run(ctx))
	return 1
}

// The receivers' secrets: the current one and the old one of a key rotation.
const (
	secret    = "s3cret-0123456789"
	oldSecret = "old-secret-0123456789"
)

// world is one test's sender (the notifier's tables in a schema of its own) and receiver (an
// Inbox over another schema, counting what it applied), with a switch in front of the inbox to
// make it fail, hang or go slow.
type world struct {
	t        *testing.T
	sender   *testenv.Schema
	receiver *testenv.Schema
	path     string
	inbox    *inbox.Inbox
	srv      *httptest.Server
	// answer, when set, answers a delivery instead of the inbox (a receiver that is down, fails
	// or hangs); it returns false to let the inbox answer.
	mu     sync.Mutex
	answer func(w http.ResponseWriter, r *http.Request) bool
	posts  atomic.Int64
}

func newWorld(t *testing.T) *world {
	w := &world{t: t, sender: testenv.PG(t), receiver: testenv.PG(t), path: testenv.ZKRoot(t) + "/notify-leader"}
	ctx := t.Context()
	if _, err := w.receiver.Pool.Exec(ctx, `create table applied (id uuid primary key, key text not null, amount int not null)`); err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.New(w.receiver.Pool, idempotency.WithTable(w.receiver.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	w.inbox, err = inbox.New(w.receiver.Pool, store, "shop", []string{oldSecret, secret}, func(ctx context.Context, tx pgx.Tx, d notify.Delivery) error {
		var p struct{ Amount int }
		if err := json.Unmarshal(d.Payload, &p); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `insert into applied values ($1, $2, $3)`, d.ID, d.Key, p.Amount)
		return err
	}, inbox.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.posts.Add(1)
		w.mu.Lock()
		answer := w.answer
		w.mu.Unlock()
		if answer != nil && answer(rw, r) {
			return
		}
		w.inbox.ServeHTTP(rw, r)
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *world) setAnswer(f func(rw http.ResponseWriter, r *http.Request) bool) {
	w.mu.Lock()
	w.answer = f
	w.mu.Unlock()
}

func (w *world) receivers(extra ...notify.Receiver) []notify.Receiver {
	return append([]notify.Receiver{{Name: "shop", URL: w.srv.URL, Secrets: []string{secret}, Echo: "success"}}, extra...)
}

// notifier returns a migrated Notifier on the sender's schema with a compressed schedule.
func (w *world) notifier(rcvs []notify.Receiver, opts ...notify.Option) *notify.Notifier {
	w.t.Helper()
	opts = append([]notify.Option{notify.WithTable(w.sender.Name, ""), notify.WithLogger(testenv.Logger(w.t)), notify.WithPlainHTTP(),
		notify.WithSchedule([]time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}, 0.1),
		notify.CallTimeoutForTest(2 * time.Second)}, opts...)
	n, err := notify.New(w.sender.Pool, rcvs, opts...)
	if err != nil {
		w.t.Fatalf("notify.New: %v", err)
	}
	if err := n.Migrate(w.t.Context()); err != nil {
		w.t.Fatalf("Migrate: %v", err)
	}
	w.t.Cleanup(func() { flush(w.t, n) }) // Do's records, before the pool closes
	return n
}

// running returns a notifier that delivers (Run, as a candidate called id) until the test ends.
func (w *world) running(id string, rcvs []notify.Receiver, opts ...notify.Option) *notify.Notifier {
	n := w.notifier(rcvs, append([]notify.Option{notify.WithElector(zkenv.Elector(w.t, w.path, id))}, opts...)...)
	testenv.Run(w.t, n.Run)
	return n
}

// client returns the receiver "shop"'s client of the query handler at url (an httptest server:
// plain HTTP on the loopback interface), signing with secret.
func (w *world) client(url, secret string) notify.Client {
	return notify.Client{URL: url, Receiver: "shop", Secrets: []string{secret}, PlainHTTP: true}
}

// strictClient is client without PlainHTTP: it must refuse an http:// URL.
func (w *world) strictClient(url, secret string) notify.Client {
	return notify.Client{URL: url, Receiver: "shop", Secrets: []string{secret}}
}

// newInbox builds another Inbox for "shop" over the receiver's schema, verifying with secrets.
func (w *world) newInbox(secrets []string) error {
	store, err := idempotency.New(w.receiver.Pool, idempotency.WithTable(w.receiver.Name, ""))
	if err != nil {
		return err
	}
	_, err = inbox.New(w.receiver.Pool, store, "shop", secrets, func(context.Context, pgx.Tx, notify.Delivery) error { return nil })
	return err
}

// The limits the tests check, as the package states them.
var (
	errTooLarge = notify.ErrTooLarge
	maxPayload  = notify.MaxPayloadLen
)

// strictNotifier is notify.New without WithPlainHTTP, plainNotifier with it.
func strictNotifier(w *world, rcvs []notify.Receiver) (*notify.Notifier, error) {
	return notify.New(w.sender.Pool, rcvs, notify.WithTable(w.sender.Name, ""))
}

func plainNotifier(w *world, rcvs []notify.Receiver) (*notify.Notifier, error) {
	return notify.New(w.sender.Pool, rcvs, notify.WithTable(w.sender.Name, ""), notify.WithPlainHTTP())
}

// enqueue records a notification of amount for key in a transaction of the sender's.
func (w *world) enqueue(n *notify.Notifier, receiver, key string, amount int) notify.Notification {
	w.t.Helper()
	nt := notify.Notification{Receiver: receiver, Key: key, Payload: json.RawMessage(fmt.Sprintf(`{"amount":%d}`, amount))}
	err := pgx.BeginFunc(w.t.Context(), w.sender.Pool, func(tx pgx.Tx) error {
		var err error
		nt.ID, err = n.Enqueue(w.t.Context(), tx, nt)
		return err
	})
	if err != nil {
		w.t.Fatalf("Enqueue: %v", err)
	}
	return nt
}

// applied returns how many times key was applied by the receiver.
func (w *world) applied(key string) int {
	var c int
	if err := w.receiver.Pool.QueryRow(w.t.Context(), `select count(*) from applied where key = $1`, key).Scan(&c); err != nil {
		w.t.Fatal(err)
	}
	return c
}

func (w *world) waitStatus(n *notify.Notifier, nt notify.Notification, want notify.Status, within time.Duration) *notify.Record {
	w.t.Helper()
	var rec *notify.Record
	testenv.Eventually(w.t, within, 20*time.Millisecond, func() bool {
		r, err := n.Get(w.t.Context(), nt.ID)
		rec = r
		return err == nil && r.Status == want
	}, "notification %s did not become %s", nt.Key, want)
	return rec
}
