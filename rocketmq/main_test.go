package rocketmq_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

func TestMain(m *testing.M) {
	// The client's process-wide logger: warnings and errors to stderr, through the adapter.
	rlog.SetLogger(rocketmq.NewRlogAdapter(slog.New(slog.NewTextHandler(os.Stderr, nil)), slog.LevelError))
	testenv.VerifyNoLeaks(m)
}

// waitFor is how long tests wait for a broker round trip; check-backs take seconds.
const waitFor = 60 * time.Second

// logBuffer collects a test's log lines; they are printed only when the test fails. Writes after
// the test ended (a client goroutine finishing late) go to the buffer harmlessly.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func testLogger(t testing.TB) (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", b.String())
		}
	})
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// env is what an integration test works with: its own topic, schema and consumer group name.
type env struct {
	ns     []string
	topic  string
	schema *testenv.Schema
	pool   *pgxpool.Pool
	store  *idempotency.Store
	log    *slog.Logger
	logs   *logBuffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{ns: testenv.Namesrv(t), topic: testenv.Topic(t), schema: testenv.PG(t)}
	e.pool = e.schema.Pool
	e.log, e.logs = testLogger(t)
	st, err := idempotency.New(e.pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.store = st
	if _, err := e.pool.Exec(t.Context(), `create table applied (id uuid not null, key text, seq int, body text)`); err != nil {
		t.Fatal(err)
	}
	return e
}

// group returns a consumer or producer group name of the test's own, and creates the group's
// retry topic %RETRY%<group> (1 queue, as the broker would). The broker creates that topic itself
// when a consumer of the group first connects, but the consumer learns its route only at its next
// route poll, up to 30 s later — until then redeliveries wait. The group's retry and dead-letter
// topics are deleted when the test ends.
func group(t *testing.T, role string) string {
	t.Helper()
	g := "txkit-" + role + "-" + testenv.Name(t)
	ns, broker := testenv.Namesrv(t), testenv.Broker(t)
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(ns)))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close() //nolint:errcheck // test helper
	if err := adm.CreateTopic(t.Context(), admin.WithTopicCreate("%RETRY%"+g), admin.WithBrokerAddrCreate(broker),
		admin.WithReadQueueNums(1), admin.WithWriteQueueNums(1)); err != nil {
		t.Fatalf("create retry topic of %s: %v", g, err)
	}
	t.Cleanup(func() {
		adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(ns)))
		if err != nil {
			return
		}
		defer adm.Close() //nolint:errcheck // test cleanup
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, topic := range []string{"%RETRY%" + g, "%DLQ%" + g} {
			_ = adm.DeleteTopic(ctx, admin.WithTopicDelete(topic), admin.WithBrokerAddrDelete(broker), admin.WithNameSrvAddr(ns))
		}
	})
	return g
}

// recordingHandler inserts each message into the applied table and remembers the order of calls.
type recorder struct {
	mu    sync.Mutex
	calls []outbox.Message // every call, failed ones included
}

func (r *recorder) handler(fn func(outbox.Message, int) error) rocketmq.Handler {
	return func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
		r.mu.Lock()
		r.calls = append(r.calls, msg)
		n := 0
		for _, c := range r.calls {
			if c.ID == msg.ID {
				n++
			}
		}
		r.mu.Unlock()
		if _, err := tx.Exec(ctx, `insert into applied (id, key, seq, body) values ($1, $2, nullif($3, '')::int, $4)`,
			msg.ID, msg.Key, msg.Headers["seq"], string(msg.Body)); err != nil {
			return err
		}
		if fn != nil {
			return fn(msg, n)
		}
		return nil
	}
}

func (r *recorder) count(pred func(outbox.Message) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if pred(c) {
			n++
		}
	}
	return n
}

// run runs c until the test ends, then checks that Run returned nil.
func run(t *testing.T, c *rocketmq.Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(waitFor):
				t.Errorf("Run did not return within %v of its ctx ending", waitFor)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func rows(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

var errBoom = errors.New("boom")

func contains(s, sub string) bool { return strings.Contains(s, sub) }
