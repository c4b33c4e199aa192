package zklock_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/locktest"
	"github.com/txkit/txkit/lock/zklock"
)

func TestMain(m *testing.M) {
	if locktest.IsWorker() {
		os.Exit(locktest.RunWorker(zkBackend))
	}
	testenv.VerifyNoLeaks(m)
}

const testSessionTimeout = 3 * time.Second

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// session opens a Session for the test, as the ensemble's digest user (TXKIT_ZK_AUTH), and
// closes it when the test ends.
func session(t testing.TB, servers []string, opts ...zklock.SessionOption) *zklock.Session {
	t.Helper()
	return sessionAs(t, servers, append([]zklock.SessionOption{zkenv.Auth(t)}, opts...)...)
}

// sessionAs is session with only the credentials in opts (none: give zklock.WithInsecureWorldACL).
func sessionAs(t testing.TB, servers []string, opts ...zklock.SessionOption) *zklock.Session {
	t.Helper()
	opts = append([]zklock.SessionOption{zklock.WithSessionTimeout(testSessionTimeout), zklock.WithLogger(testLogger(t))}, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := zklock.NewSession(ctx, servers, opts...)
	if err != nil {
		t.Fatalf("NewSession(%v): %v", servers, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mutex(t testing.TB, s *zklock.Session, path string, opts ...zklock.Option) *zklock.Mutex {
	t.Helper()
	m, err := zklock.NewMutex(s, path, opts...)
	if err != nil {
		t.Fatalf("NewMutex(%s): %v", path, err)
	}
	return m
}

// history is the [locktest.History] of the in-process tests, with the number of holds.
type history struct {
	all   locktest.History
	holds int // set by check
}

func (h *history) enter(tok lock.Token) { h.all.Enter(tok) }

func (h *history) exit() { h.all.Exit() }

// check reports what went wrong, and sets holds.
func (h *history) check(t testing.TB) {
	t.Helper()
	if err := h.all.Err(); err != nil {
		t.Error(err)
	}
	h.holds = h.all.Holds()
	if h.holds == 0 {
		t.Error("history: no holds recorded")
	}
}

// children lists the lock path's children through s's connection.
func children(t testing.TB, s *zklock.Session, path string) []string {
	t.Helper()
	names, _, err := s.Conn().Children(path)
	if err != nil {
		t.Fatalf("children %s: %v", path, err)
	}
	return names
}

func waitChildren(t testing.TB, s *zklock.Session, path string, n int) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		names, _, err := s.Conn().Children(path)
		return err == nil && len(names) == n
	}, "%s to have %d children", path, n)
}
