// Package coretest holds test helpers shared by the tests of the coordinators built on the core
// (core, tcc, saga): checking that the leader backs off a transaction it keeps failing, and
// collecting a logger's output. It serves this repository's tests only.
package coretest

import (
	"bytes"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testenv"
	"github.com/txkit/txkit/lock"
)

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
func Leads(t testing.TB, el *lock.Elector, id string) {
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
