// Package coretest holds test helpers shared by the tests of the coordinators built on the core
// (core, tcc, saga, twopc): building a migrated coordinator with the options the tests start
// from, registering participants and reading statuses, checking that the leader backs off a
// transaction it keeps failing, collecting a logger's output, and reading the spans of an
// in-memory OpenTelemetry exporter. It serves this repository's tests only.
package coretest

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/participant"
)

// Env is one coordinator test's database schema and election path, shared by the test's
// coordinators (which stand for coordinator processes).
type Env struct {
	T      *testing.T
	Schema *testenv.Schema
	Path   string
}

// NewEnv returns t's Env: a schema of its own and the election path leader under the test's
// ZooKeeper root.
func NewEnv(t *testing.T, leader string) *Env {
	return &Env{T: t, Schema: testenv.PG(t), Path: testenv.ZKRoot(t) + "/" + leader}
}

// Elector returns a candidate called id in the test's election, on a session of its own.
func (e *Env) Elector(id string) lock.Elector { return zkenv.Elector(e.T, e.Path, id) }

// Options returns the options a coordinator test starts from — the test's schema, its logger, a
// 20-100 ms backoff and a recovery pass every 100 ms — followed by opts, which win.
func Options(t testing.TB, schema string, opts ...coordinator.Option) []coordinator.Option {
	return append([]coordinator.Option{coordinator.WithSchema(schema), coordinator.WithLogger(testenv.Logger(t)),
		coordinator.WithRetry(10*time.Second, 20*time.Millisecond, 100*time.Millisecond), coordinator.WithRecovery("@every 100ms", 100, 16)}, opts...)
}

// CallTimeout returns the option that bounds each participant call by d, with the backoff of
// [Options] (coordinator.WithRetry sets both).
func CallTimeout(d time.Duration) coordinator.Option {
	return coordinator.WithRetry(d, 20*time.Millisecond, 100*time.Millisecond)
}

// New returns a migrated coordinator made by newFn (tcc.New, saga.New, twopc.New) on pool with
// Options(t, schema, opts...), failing the test when either step fails; the test's cleanup
// flushes its deferred finishes.
func New[C coordinator.Base](t testing.TB, newFn func(*pgxpool.Pool, ...coordinator.Option) (C, error),
	pool *pgxpool.Pool, schema string, opts ...coordinator.Option) C {
	t.Helper()
	c, err := newFn(pool, Options(t, schema, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := c.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	FlushAtCleanup(t, c)
	return c
}

// FlushAtCleanup makes the test's cleanup wait (up to core.CleanupTimeout) for c's deferred
// finishes, before the pools and the logger the test made before it go.
func FlushAtCleanup(t testing.TB, c coordinator.Base) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), core.CleanupTimeout)
		defer cancel()
		_ = c.Flush(ctx)
	})
}

// Register registers p as name with c and returns the participant to put in a branch, failing
// the test when c refuses it.
func Register(t testing.TB, c coordinator.Base, name string, p participant.Participant) participant.Participant {
	t.Helper()
	h, err := c.Register(name, p)
	if err != nil {
		t.Fatalf("Register(%s): %v", name, err)
	}
	return h
}

// Status returns gid's status in c, failing the test when it cannot be read.
func Status(t testing.TB, c coordinator.Base, gid string) coordinator.Status {
	t.Helper()
	s, err := c.Status(t.Context(), gid)
	if err != nil {
		t.Fatalf("Status(%s): %v", gid, err)
	}
	return s
}

// Get returns gid's transaction with its branches, failing the test when it cannot.
func Get(t testing.TB, l *core.Log, gid string) *core.Transaction {
	t.Helper()
	tx, err := l.Get(t.Context(), gid)
	if err != nil {
		t.Fatalf("Get(%s): %v", gid, err)
	}
	return tx
}

// Leads fails the test unless the candidate called id leads el's election: the leader a
// failure test ran is still alive and leading.
func Leads(t testing.TB, el lock.Elector, id string) {
	t.Helper()
	if got, err := el.Leader(t.Context()); err != nil || got != id {
		t.Fatalf("Leader = %q, %v: %s should still lead", got, err, id)
	}
}

// WatchBackoff polls a transaction that the leader keeps failing, through get, until at least
// attempts failures are counted, three attempt counts have been seen and done returns true. For
// each attempt count it notes the delay the reschedule gave it (next_retry_at - updated_at; a
// claim, which sets the lease instead, is told apart by lease). It fails the test unless the
// delays grow with the attempts, and returns them. Keep the backoff's cap well above the delays
// the test reaches and its minimum above the leader's tick.
func WatchBackoff(t testing.TB, lease time.Duration, attempts int, get func() *core.Transaction,
	done func(*core.Transaction) bool) map[int]time.Duration {
	t.Helper()
	delays := map[int]time.Duration{}
	testenv.Eventually(t, 30*time.Second, 2*time.Millisecond, func() bool {
		tx := get()
		if d := tx.NextRetryAt.Sub(tx.UpdatedAt); tx.Attempts > 0 && d < lease/2 {
			if _, ok := delays[tx.Attempts]; !ok {
				delays[tx.Attempts] = d
			}
		}
		return tx.Attempts >= attempts && len(delays) >= 3 && done(tx)
	}, "the leader retries the failing transaction")
	var seen []int
	for n := range delays {
		seen = append(seen, n)
	}
	slices.Sort(seen)
	for i := 1; i < len(seen); i++ {
		if delays[seen[i]] < delays[seen[i-1]] {
			t.Fatalf("the backoff shrank: %v", delays)
		}
	}
	if first, last := delays[seen[0]], delays[seen[len(seen)-1]]; last <= first {
		t.Fatalf("the backoff does not grow: %v", delays)
	}
	return delays
}

// LogBuffer collects what a logger writes. It is safe for concurrent use.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Logger returns a text logger of every level writing to l.
func (l *LogBuffer) Logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }
