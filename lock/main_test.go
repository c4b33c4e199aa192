package lock_test

import (
	"log/slog"
	"testing"

	"github.com/txkit/txkit/internal/testkit/testenv"
)

// The tests of the contract run on PostgreSQL (lock/pglock): each backend's own tests live in
// its package, lock/zklock's among them.
func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}
