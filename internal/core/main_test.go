package core_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
)

func TestMain(m *testing.M) {
	if code, ok := testenv.RunWorker(recoveryWorkerEnv, recoveryWorker); ok {
		os.Exit(code) // a recovery process (partition_test.go)
	}
	testenv.VerifyNoLeaks(m)
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// newLog migrates a Log in a schema of the test's own.
func newLog(t testing.TB, opts ...core.LogOption) *core.Log {
	t.Helper()
	l, _ := newLogOn(t, opts...)
	return l
}

// newLogOn is newLog that also returns the test's schema, for tests that reach into its tables.
func newLogOn(t testing.TB, opts ...core.LogOption) (*core.Log, *testenv.Schema) {
	t.Helper()
	s := testenv.PG(t)
	l, err := core.New(s.Pool, append([]core.LogOption{core.WithSchema(s.Name)}, opts...)...)
	if err != nil {
		t.Fatalf("core.New: %v", err)
	}
	if err := l.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return l, s
}

// elector returns a candidate in an election of the test's own.
func elector(t testing.TB, path, id string) lock.Elector {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := zklock.NewSession(ctx, testenv.ZK(t), zklock.WithSessionTimeout(3*time.Second), zklock.WithLogger(testLogger(t)), zkenv.Auth(t))
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	el, err := zklock.NewElector(s, path, id)
	if err != nil {
		t.Fatalf("NewElector: %v", err)
	}
	return el
}

// run runs f in a goroutine until the test ends, then waits for it and reports its error.
func run(t testing.TB, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// tccLogWrites makes the log writes of a TCC transaction gid of two branches that its starter
// finishes: the first Try's insert with its branch, the second branch, the decision, the finish.
func tccLogWrites(ctx context.Context, l *core.Log, gid string) error {
	if err := l.CreateIn(ctx, gid, core.KindTCC, core.StatusTrying, time.Minute, nil, httpBranch("a")); err != nil {
		return err
	}
	if err := l.AddBranch(ctx, gid, core.StatusTrying, httpBranch("b")); err != nil {
		return err
	}
	if _, err := l.Decide(ctx, gid, core.StatusTrying, core.StatusConfirming); err != nil {
		return err
	}
	return l.Record(ctx, lock.Token{}, core.Progress{GID: gid, From: core.StatusConfirming, Done: []string{"a", "b"},
		Next: core.StatusConfirmed})
}
