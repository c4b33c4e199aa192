// Package barriertest is the fixture of the tests of participant/barrier and threepc/agent: a
// migrated barrier in the test's own schema, and business code that counts its invocations
// (committed or not) and writes one row per invocation in the caller's transaction.
package barriertest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/signing"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
)

// Timeout bounds what a fixture waits for.
const Timeout = 30 * time.Second

// Secret is the secret the tests' coordinators sign with.
const Secret = "test-secret-0123456789abcdef"

// Logger returns a logger that writes to the test's output from level info up.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// Fixture is a migrated barrier in the test's own schema, and business code ([Fixture.Record]).
type Fixture struct {
	T    testing.TB
	Pool *pgxpool.Pool
	Bar  *barrier.Barrier

	mu      sync.Mutex
	invoked map[string]int
}

// New returns the fixture of t: a barrier built with opts (after a logger of t's), migrated, and
// the table calls of [Fixture.Record].
func New(t testing.TB, opts ...barrier.Option) *Fixture {
	t.Helper()
	s := testenv.PG(t)
	opts = append([]barrier.Option{barrier.WithLogger(Logger(t))}, opts...)
	bar, err := barrier.New(s.Pool, opts...)
	if err != nil {
		t.Fatalf("barrier.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := bar.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := s.Pool.Exec(ctx, `create table calls (id bigserial primary key, gid text, branch text, op text)`); err != nil {
		t.Fatalf("create calls: %v", err)
	}
	return &Fixture{T: t, Pool: s.Pool, Bar: bar, invoked: map[string]int{}}
}

func callKey(gid, branch string, op participant.Op) string {
	return gid + "|" + branch + "|" + op.String()
}

// Record is the business code of every test: it counts the invocation and writes a row in tx.
func (f *Fixture) Record(ctx context.Context, tx pgx.Tx, req participant.Request) error {
	f.mu.Lock()
	f.invoked[callKey(req.GID, req.Branch, req.Op)]++
	f.mu.Unlock()
	_, err := tx.Exec(ctx, `insert into calls (gid, branch, op) values ($1, $2, $3)`, req.GID, req.Branch, req.Op.String())
	return err
}

// Fn adapts Record to barrier.Barrier.Call's signature for req.
func (f *Fixture) Fn(req participant.Request) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error { return f.Record(ctx, tx, req) }
}

// Invocations is how often Record ran for op of gid's branch, committed or not.
func (f *Fixture) Invocations(gid, branch string, op participant.Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.invoked[callKey(gid, branch, op)]
}

// Committed is how many of Record's rows for op of gid's branch committed.
func (f *Fixture) Committed(gid, branch string, op participant.Op) int {
	f.T.Helper()
	var n int
	if err := f.Pool.QueryRow(context.Background(), `select count(*) from calls where gid = $1 and branch = $2 and op = $3`,
		gid, branch, op.String()).Scan(&n); err != nil {
		f.T.Fatalf("count calls: %v", err)
	}
	return n
}

// Markers is the number of rows of table.
func (f *Fixture) Markers(table string) int {
	f.T.Helper()
	var n int
	if err := f.Pool.QueryRow(context.Background(), `select count(*) from `+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
		f.T.Fatalf("count markers: %v", err)
	}
	return n
}

// Expect checks how often Record was invoked and how many of its effects committed.
func (f *Fixture) Expect(gid, branch string, op participant.Op, invoked, committed int) {
	f.T.Helper()
	if got := f.Invocations(gid, branch, op); got != invoked {
		f.T.Errorf("%s %s/%s: business code invoked %d times, want %d", op, gid, branch, got, invoked)
	}
	if got := f.Committed(gid, branch, op); got != committed {
		f.T.Errorf("%s %s/%s: %d effects committed, want %d", op, gid, branch, got, committed)
	}
}

// Post sends body to url with method, signed with [Secret], and returns the status and the
// trimmed answer.
func Post(t testing.TB, url, method, body string) (int, string) {
	t.Helper()
	hr, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	signing.SignRequest(hr, Secret, time.Now(), []byte(body))
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, strings.TrimSpace(string(b))
}
