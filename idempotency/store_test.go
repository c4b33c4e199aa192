package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaksWithExamples(m) }

const testTimeout = 30 * time.Second

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// newStore returns a migrated Store in the test's own schema.
// begin starts an integration test that needs one store: in parallel with the others, in a
// schema of its own, with a migrated store on it (opts added to newStore's) and a ctx that ends
// with the test or after testTimeout.
func begin(t *testing.T, opts ...idempotency.Option) (*testenv.Schema, *idempotency.Store, context.Context) {
	t.Helper()
	s, ctx := testenv.Parallel(t, testTimeout)
	return s, newStore(t, s, opts...), ctx
}

func newStore(t testing.TB, s *testenv.Schema, opts ...idempotency.Option) *idempotency.Store {
	t.Helper()
	opts = append([]idempotency.Option{idempotency.WithLogger(testLogger(t))}, opts...)
	st, err := idempotency.New(s.Pool, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return st
}

// inTx runs fn in a transaction on pool and commits it when fn returns nil.
func inTx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, pool, fn)
}

func claimInTx(t testing.TB, ctx context.Context, st *idempotency.Store, pool *pgxpool.Pool, scope, key string) bool {
	t.Helper()
	var first bool
	err := inTx(ctx, pool, func(tx pgx.Tx) error {
		var err error
		first, err = st.Claim(ctx, tx, scope, key)
		return err
	})
	if err != nil {
		t.Fatalf("Claim(%s, %s): %v", scope, key, err)
	}
	return first
}

func countKeys(t testing.TB, ctx context.Context, db idempotency.DBTX, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(ctx, "select count(*) from "+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func TestOptions(t *testing.T) {
	tests := []struct {
		name string
		opts []idempotency.Option
		ok   bool
	}{
		{"defaults", nil, true},
		{"all set", []idempotency.Option{
			idempotency.WithTable("app", "keys"), idempotency.WithRetention(time.Hour, "*/5 * * * *"),
			idempotency.WithLogger(nil), idempotency.PurgeBatchForTest(1),
		}, true},
		{"quotes and spaces in names", []idempotency.Option{
			idempotency.WithTable(`My "Schema"`, `keys"; drop table x; --`),
		}, true},
		{"table of 48 bytes", []idempotency.Option{idempotency.WithTable("", strings.Repeat("t", 48))}, true},
		{"table of 49 bytes", []idempotency.Option{idempotency.WithTable("", strings.Repeat("t", 49))}, false},
		{"table with NUL", []idempotency.Option{idempotency.WithTable("", "a\x00b")}, false},
		{"table not UTF-8", []idempotency.Option{idempotency.WithTable("", "a\xffb")}, false},
		{"schema of 63 bytes", []idempotency.Option{idempotency.WithTable(strings.Repeat("s", 63), "")}, true},
		{"schema of 64 bytes", []idempotency.Option{idempotency.WithTable(strings.Repeat("s", 64), "")}, false},
		{"schema with NUL", []idempotency.Option{idempotency.WithTable("\x00", "")}, false},
		{"retention 1µs", []idempotency.Option{idempotency.WithRetention(time.Microsecond, "@every 1m")}, true},
		{"retention below 1µs", []idempotency.Option{idempotency.WithRetention(time.Nanosecond, "@every 1m")}, false},
		{"retention zero", []idempotency.Option{idempotency.WithRetention(0, "@every 1m")}, false},
		{"retention negative", []idempotency.Option{idempotency.WithRetention(-time.Hour, "@every 1m")}, false},
		{"batch zero", []idempotency.Option{idempotency.PurgeBatchForTest(0)}, false},
		{"schedule descriptor", []idempotency.Option{idempotency.WithRetention(7*24*time.Hour, "@hourly")}, true},
		{"schedule garbage", []idempotency.Option{idempotency.WithRetention(7*24*time.Hour, "every minute")}, false},
		{"schedule empty", []idempotency.Option{idempotency.WithRetention(7*24*time.Hour, "")}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, err := idempotency.New(&pgxpool.Pool{}, tc.opts...)
			if tc.ok {
				if err != nil || st == nil {
					t.Fatalf("New = %v, %v; want a Store", st, err)
				}
				return
			}
			if !errors.Is(err, idempotency.ErrInvalidOption) {
				t.Fatalf("New error = %v; want ErrInvalidOption", err)
			}
			if !strings.HasPrefix(err.Error(), "idempotency: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}

// refuseDB is a DBTX that fails every call: input checks must fail before reaching the database.
type refuseDB struct{}

var errReached = errors.New("the database was reached")

func (refuseDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errReached
}
func (refuseDB) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, errReached }
func (refuseDB) QueryRow(context.Context, string, ...any) pgx.Row        { return errRow{} }

type errRow struct{}

func (errRow) Scan(...any) error { return errReached }

func TestBadInput(t *testing.T) {
	st, err := idempotency.New(&pgxpool.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	var nilPool *pgxpool.Pool
	var nilTx pgx.Tx
	long := strings.Repeat("k", idempotency.MaxKeyLen+1)
	tests := []struct {
		name       string
		db         idempotency.DBTX
		scope, key string
		want       error
	}{
		{"nil interface", nil, "s", "k", idempotency.ErrNilTx},
		{"nil pgx.Tx", nilTx, "s", "k", idempotency.ErrNilTx},
		{"nil *pgxpool.Pool", nilPool, "s", "k", idempotency.ErrNilTx},
		{"empty scope", refuseDB{}, "", "k", idempotency.ErrInvalidKey},
		{"empty key", refuseDB{}, "s", "", idempotency.ErrInvalidKey},
		{"key too long", refuseDB{}, "s", long, idempotency.ErrInvalidKey},
		{"scope too long", refuseDB{}, long, "k", idempotency.ErrInvalidKey},
		{"key with NUL", refuseDB{}, "s", "a\x00", idempotency.ErrInvalidKey},
		{"key not UTF-8", refuseDB{}, "s", "\xc3\x28", idempotency.ErrInvalidKey},
		{"longest key reaches the database", refuseDB{}, "s", long[1:], errReached},
	}
	ctx := t.Context()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls := map[string]error{}
			_, calls["Claim"] = st.Claim(ctx, tc.db, tc.scope, tc.key)
			calls["ClaimFirst"] = st.ClaimFirst(ctx, tc.db, tc.scope, tc.key)
			_, calls["Begin"] = st.Begin(ctx, tc.db, tc.scope, tc.key, []byte("fp"))
			calls["Complete"] = st.Complete(ctx, tc.db, tc.scope, tc.key, []byte("r"))
			for name, err := range calls {
				if !errors.Is(err, tc.want) {
					t.Errorf("%s error = %v; want %v", name, err, tc.want)
				}
			}
		})
	}
	if _, err := idempotency.New(nil); !errors.Is(err, idempotency.ErrInvalidOption) {
		t.Errorf("New(nil) error = %v; want ErrInvalidOption", err)
	}
	if _, err := st.Purge(ctx, nil); !errors.Is(err, idempotency.ErrNilTx) {
		t.Errorf("Purge(nil) error = %v; want ErrNilTx", err)
	}
}

func TestStatusString(t *testing.T) {
	for _, tc := range []struct {
		s    idempotency.Status
		want string
	}{
		{idempotency.StatusClaimed, "claimed"},
		{idempotency.StatusCompleted, "completed"},
		{0, "Status(0)"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("Status(%d).String() = %q; want %q", uint8(tc.s), got, tc.want)
		}
	}
}

func TestIntegrationClaimFirstThenDuplicate(t *testing.T) {
	s, st, ctx := begin(t)
	if err := st.Migrate(ctx); err != nil { // a second Migrate is a no-op
		t.Fatalf("second Migrate: %v", err)
	}

	if !claimInTx(t, ctx, st, s.Pool, "points", "msg-1") {
		t.Fatal("first Claim: first = false")
	}
	if claimInTx(t, ctx, st, s.Pool, "points", "msg-1") {
		t.Fatal("second Claim of the same key: first = true")
	}
	if !claimInTx(t, ctx, st, s.Pool, "emails", "msg-1") {
		t.Fatal("the same key in another scope: first = false")
	}
	err := inTx(ctx, s.Pool, func(tx pgx.Tx) error { return st.ClaimFirst(ctx, tx, "points", "msg-1") })
	if !errors.Is(err, idempotency.ErrDuplicate) {
		t.Fatalf("ClaimFirst of a claimed key: %v; want ErrDuplicate", err)
	}
	if err := inTx(ctx, s.Pool, func(tx pgx.Tx) error { return st.ClaimFirst(ctx, tx, "points", "msg-2") }); err != nil {
		t.Fatalf("ClaimFirst of a new key: %v", err)
	}
	// The longest key and non-ASCII text are stored unchanged.
	long := strings.Repeat("é", idempotency.MaxKeyLen/2)
	if !claimInTx(t, ctx, st, s.Pool, "points", long) || claimInTx(t, ctx, st, s.Pool, "points", long) {
		t.Fatal("a key of MaxKeyLen bytes was not claimed exactly once")
	}
}

func TestIntegrationClaimRolledBackLeavesNoKey(t *testing.T) {
	s, st, ctx := begin(t)
	if _, err := s.Pool.Exec(ctx, `create table points (account text primary key, points int not null)`); err != nil {
		t.Fatal(err)
	}

	errHandler := errors.New("handler failed after the claim")
	err := inTx(ctx, s.Pool, func(tx pgx.Tx) error {
		first, err := st.Claim(ctx, tx, "points", "msg-1")
		if err != nil || !first {
			return fmt.Errorf("claim: first=%v, %w", first, err)
		}
		if _, err := tx.Exec(ctx, `insert into points values ('alice', 10)`); err != nil {
			return err
		}
		return errHandler
	})
	if !errors.Is(err, errHandler) {
		t.Fatalf("transaction: %v; want the handler's error", err)
	}
	if n := countKeys(t, ctx, s.Pool, "txkit_idempotency"); n != 0 {
		t.Fatalf("%d keys left by a rolled-back claim; want 0", n)
	}
	if !claimInTx(t, ctx, st, s.Pool, "points", "msg-1") {
		t.Fatal("the redelivery after a rollback was not first")
	}
}

// bigPool returns a pool on the test's schema with n connections, so that n transactions can be
// open at once.
func bigPool(t testing.TB, s *testenv.Schema, n int) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(n)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

const claimers = 32

// openTxs begins n transactions, each on its own connection, and rolls back any left open when the
// test ends.
func openTxs(t *testing.T, ctx context.Context, pool *pgxpool.Pool, n int) []pgx.Tx {
	t.Helper()
	txs := make([]pgx.Tx, n)
	for i := range txs {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatalf("begin %d: %v", i, err)
		}
		txs[i] = tx
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	}
	return txs
}

func TestIntegrationConcurrentClaimersOneFirst(t *testing.T) {
	t.Parallel()
	s := testenv.PG(t)
	st := newStore(t, s)
	pool := bigPool(t, s, claimers)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()

	// Every claimer has its transaction open before any of them claims.
	txs := openTxs(t, ctx, pool, claimers)
	var (
		firsts atomic.Int32
		wg     sync.WaitGroup
		errs   = make(chan error, claimers)
		start  = make(chan struct{})
	)
	for _, tx := range txs {
		wg.Go(func() {
			<-start
			first, err := st.Claim(ctx, tx, "points", "msg-1")
			if err == nil {
				err = tx.Commit(ctx)
			}
			if err != nil {
				errs <- err
				return
			}
			if first {
				firsts.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := firsts.Load(); n != 1 {
		t.Fatalf("%d of %d concurrent claimers were first; want exactly 1", n, claimers)
	}
}

func TestIntegrationConcurrentBeginOneExecutes(t *testing.T) {
	t.Parallel()
	s := testenv.PG(t)
	st := newStore(t, s)
	pool := bigPool(t, s, claimers)
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()

	txs := openTxs(t, ctx, pool, claimers)
	type outcome struct {
		rec *idempotency.Record
		err error
	}
	var (
		wg       sync.WaitGroup
		outcomes = make(chan outcome, claimers)
		start    = make(chan struct{})
	)
	for i, tx := range txs {
		wg.Go(func() {
			<-start
			rec, err := st.Begin(ctx, tx, "orders", "req-1", []byte("POST /orders {}"))
			if err == nil && rec.New {
				err = st.Complete(ctx, tx, "orders", "req-1", fmt.Appendf(nil, "order made by %d", i))
			}
			if err == nil {
				err = tx.Commit(ctx)
			}
			outcomes <- outcome{rec, err}
		})
	}
	close(start)
	wg.Wait()
	close(outcomes)
	var executed int
	results := map[string]int{}
	for o := range outcomes {
		if o.err != nil {
			t.Error(o.err)
			continue
		}
		if o.rec.New {
			executed++
			continue
		}
		results[string(o.rec.Result)]++
	}
	if executed != 1 {
		t.Fatalf("%d of %d concurrent requests executed; want exactly 1", executed, claimers)
	}
	if len(results) != 1 {
		t.Fatalf("retries got different results: %v", results)
	}
	for r, n := range results {
		if !strings.HasPrefix(r, "order made by ") || n != claimers-1 {
			t.Fatalf("retries got %v; want %d copies of the stored result", results, claimers-1)
		}
	}
}

func TestIntegrationBeginReturnsStoredResult(t *testing.T) {
	s, st, ctx := begin(t)

	for _, fp := range [][]byte{[]byte("sha256:abc"), nil} {
		key := fmt.Sprintf("req-%x", fp)
		err := inTx(ctx, s.Pool, func(tx pgx.Tx) error {
			rec, err := st.Begin(ctx, tx, "orders", key, fp)
			if err != nil {
				return err
			}
			if !rec.New || rec.Status != idempotency.StatusClaimed || rec.Result != nil {
				return fmt.Errorf("first Begin = %+v; want a new claim", rec)
			}
			return st.Complete(ctx, tx, "orders", key, []byte(`{"order":42}`))
		})
		if err != nil {
			t.Fatalf("fingerprint %q: first request: %v", fp, err)
		}
		for range 2 {
			err := inTx(ctx, s.Pool, func(tx pgx.Tx) error {
				rec, err := st.Begin(ctx, tx, "orders", key, fp)
				if err != nil {
					return err
				}
				if rec.New || rec.Status != idempotency.StatusCompleted || string(rec.Result) != `{"order":42}` {
					return fmt.Errorf("retry Begin = %+v; want the stored result", rec)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("fingerprint %q: retry: %v", fp, err)
			}
		}
	}
}

func TestIntegrationBeginErrors(t *testing.T) {
	s, st, ctx := begin(t)
	run := func(fn func(tx pgx.Tx) error) error { return inTx(ctx, s.Pool, fn) }

	// A completed request, and one committed without Complete.
	if err := run(func(tx pgx.Tx) error {
		if _, err := st.Begin(ctx, tx, "orders", "done", []byte("a")); err != nil {
			return err
		}
		if err := st.Complete(ctx, tx, "orders", "done", []byte("r")); err != nil {
			return err
		}
		_, err := st.Begin(ctx, tx, "orders", "open", []byte("a"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !claimInTx(t, ctx, st, s.Pool, "orders", "claimed") {
		t.Fatal("Claim: not first")
	}

	tests := []struct {
		name string
		fn   func(tx pgx.Tx) error
		want error
	}{
		{"different fingerprint", func(tx pgx.Tx) error {
			_, err := st.Begin(ctx, tx, "orders", "done", []byte("b"))
			return err
		}, idempotency.ErrFingerprintMismatch},
		{"nil fingerprint for a key with one", func(tx pgx.Tx) error {
			_, err := st.Begin(ctx, tx, "orders", "done", nil)
			return err
		}, idempotency.ErrFingerprintMismatch},
		{"different fingerprint, never completed", func(tx pgx.Tx) error {
			_, err := st.Begin(ctx, tx, "orders", "open", []byte("b"))
			return err
		}, idempotency.ErrFingerprintMismatch},
		{"committed without Complete", func(tx pgx.Tx) error {
			_, err := st.Begin(ctx, tx, "orders", "open", []byte("a"))
			return err
		}, idempotency.ErrNotCompleted},
		{"begun twice in one tx", func(tx pgx.Tx) error {
			if _, err := st.Begin(ctx, tx, "orders", "twice", nil); err != nil {
				return err
			}
			_, err := st.Begin(ctx, tx, "orders", "twice", nil)
			return err
		}, idempotency.ErrNotCompleted},
		{"Complete without Begin", func(tx pgx.Tx) error {
			return st.Complete(ctx, tx, "orders", "never", nil)
		}, idempotency.ErrNotClaimed},
		{"Complete twice", func(tx pgx.Tx) error {
			return st.Complete(ctx, tx, "orders", "done", []byte("again"))
		}, idempotency.ErrNotClaimed},
		{"Complete a key from Claim", func(tx pgx.Tx) error {
			return st.Complete(ctx, tx, "orders", "claimed", nil)
		}, idempotency.ErrNotClaimed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.fn)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error = %v; want %v", err, tc.want)
			}
		})
	}
	// The failed calls changed nothing: the completed request still answers with its result.
	if err := run(func(tx pgx.Tx) error {
		rec, err := st.Begin(ctx, tx, "orders", "done", []byte("a"))
		if err == nil && string(rec.Result) != "r" {
			err = fmt.Errorf("result %q; want %q", rec.Result, "r")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// waitBlocked waits until the backend pid waits on a lock.
func waitBlocked(t *testing.T, ctx context.Context, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		var ev *string
		err := pool.QueryRow(ctx, `select wait_event_type from pg_stat_activity where pid = $1`, pid).Scan(&ev)
		return err == nil && ev != nil && *ev == "Lock"
	}, "backend %d to wait on a lock", pid)
}

// TestIntegrationInProgressBlocks checks what a second claimer sees while the first transaction
// still holds its claim: it blocks until that transaction ends, then sees a duplicate (and the
// stored result) if it committed, or becomes first if it rolled back.
func TestIntegrationInProgressBlocks(t *testing.T) {
	t.Parallel()
	s := testenv.PG(t)
	st := newStore(t, s)
	fp := []byte("fp")
	type claimResult struct {
		first  bool
		result []byte
	}
	claimers := []struct {
		name  string
		claim func(ctx context.Context, tx pgx.Tx, key string) (claimResult, error)
		// finish completes the first claimer's work before its commit.
		finish func(ctx context.Context, tx pgx.Tx, key string) error
		stored []byte // what a duplicate reports after the first committed
	}{
		{
			name: "Claim",
			claim: func(ctx context.Context, tx pgx.Tx, key string) (claimResult, error) {
				first, err := st.Claim(ctx, tx, "s", key)
				return claimResult{first: first}, err
			},
			finish: func(context.Context, pgx.Tx, string) error { return nil },
		},
		{
			name: "Begin",
			claim: func(ctx context.Context, tx pgx.Tx, key string) (claimResult, error) {
				rec, err := st.Begin(ctx, tx, "s", key, fp)
				if err != nil {
					return claimResult{}, err
				}
				return claimResult{first: rec.New, result: rec.Result}, nil
			},
			finish: func(ctx context.Context, tx pgx.Tx, key string) error {
				return st.Complete(ctx, tx, "s", key, []byte("result"))
			},
			stored: []byte("result"),
		},
	}
	for _, c := range claimers {
		for _, commit := range []bool{true, false} {
			name := c.name + "/first rolls back"
			if commit {
				name = c.name + "/first commits"
			}
			t.Run(name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
				defer cancel()
				key := testenv.Name(t)
				txs := openTxs(t, ctx, s.Pool, 2)
				first, second := txs[0], txs[1]

				r, err := c.claim(ctx, first, key)
				if err != nil || !r.first {
					t.Fatalf("first claimer: %+v, %v; want first", r, err)
				}
				type out struct {
					r   claimResult
					err error
				}
				done := make(chan out, 1)
				go func() {
					r, err := c.claim(ctx, second, key)
					done <- out{r, err}
				}()
				waitBlocked(t, ctx, s.Pool, second.Conn().PgConn().PID())
				select {
				case o := <-done:
					t.Fatalf("second claimer returned %+v while the first transaction was open", o)
				default:
				}

				if commit {
					if err := c.finish(ctx, first, key); err != nil {
						t.Fatal(err)
					}
					err = first.Commit(ctx)
				} else {
					err = first.Rollback(ctx)
				}
				if err != nil {
					t.Fatal(err)
				}
				o := <-done
				if o.err != nil {
					t.Fatalf("second claimer: %v", o.err)
				}
				if commit && (o.r.first || string(o.r.result) != string(c.stored)) {
					t.Fatalf("second claimer after commit: %+v; want a duplicate with result %q", o.r, c.stored)
				}
				if !commit && !o.r.first {
					t.Fatalf("second claimer after rollback: %+v; want first", o.r)
				}
				if err := second.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// countingDB counts the statements Purge sends.
type countingDB struct {
	idempotency.DBTX
	execs atomic.Int32
}

func (c *countingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.execs.Add(1)
	return c.DBTX.Exec(ctx, sql, args...)
}

func TestIntegrationPurgeInBatches(t *testing.T) {
	t.Parallel()
	s := testenv.PG(t)
	// Two Stores on one table: keys claimed through short expire at once, through long in an hour.
	short := newStore(t, s, idempotency.WithRetention(time.Microsecond, "@every 1m"), idempotency.PurgeBatchForTest(10))
	long := newStore(t, s, idempotency.WithRetention(time.Hour, "@every 1m"))
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()

	for i := range 25 {
		if first, err := short.Claim(ctx, s.Pool, "s", fmt.Sprint("expired-", i)); err != nil || !first {
			t.Fatalf("Claim: %v, %v", first, err)
		}
	}
	for i := range 5 {
		if first, err := long.Claim(ctx, s.Pool, "s", fmt.Sprint("live-", i)); err != nil || !first {
			t.Fatalf("Claim: %v, %v", first, err)
		}
	}
	db := &countingDB{DBTX: s.Pool}
	n, err := short.Purge(ctx, db)
	if err != nil {
		t.Fatalf("Purge: %v", err)
	}
	if n != 25 {
		t.Fatalf("Purge deleted %d keys; want 25", n)
	}
	if got := db.execs.Load(); got != 3 { // 10 + 10 + 5
		t.Errorf("Purge sent %d statements; want 3 batches of at most 10", got)
	}
	if left := countKeys(t, ctx, s.Pool, "txkit_idempotency"); left != 5 {
		t.Fatalf("%d keys left; want the 5 live ones", left)
	}
	if n, err := long.Purge(ctx, s.Pool); err != nil || n != 0 {
		t.Fatalf("second Purge = %d, %v; want 0, nil", n, err)
	}
	// An expired key that is gone can be claimed again; a live one cannot.
	if !claimInTx(t, ctx, long, s.Pool, "s", "expired-0") || claimInTx(t, ctx, long, s.Pool, "s", "live-0") {
		t.Fatal("after Purge: want expired-0 claimable and live-0 a duplicate")
	}
}

func TestIntegrationRunPurgesUntilCancelled(t *testing.T) {
	t.Parallel()
	s := testenv.PG(t)
	st := newStore(t, s, idempotency.WithRetention(time.Microsecond, "@every 1s"),
		idempotency.PurgeBatchForTest(3))
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	for i := range 10 {
		if _, err := st.Claim(ctx, s.Pool, "s", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}

	stop := startRun(t, ctx, st)
	testenv.Eventually(t, 15*time.Second, 20*time.Millisecond, func() bool {
		var n int
		err := s.Pool.QueryRow(ctx, `select count(*) from txkit_idempotency`).Scan(&n)
		return err == nil && n == 0
	}, "Run to purge the 10 expired keys")
	stop()
}

func TestIntegrationRunReturnsOnCancel(t *testing.T) {
	t.Parallel()
	s := testenv.PG(t)
	st := newStore(t, s, idempotency.WithRetention(7*24*time.Hour, "@hourly"))
	startRun(t, t.Context(), st)()
}

// startRun runs st.Run under a ctx derived from ctx; the stop it returns cancels that ctx and
// fails the test unless Run returns nil within 10s.
func startRun(t *testing.T, ctx context.Context, st *idempotency.Store) (stop func()) {
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- st.Run(runCtx) }()
	return func() {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run returned %v; want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return within 10s of its ctx ending")
		}
	}
}

// TestIntegrationNamesAndConcurrentMigrate migrates a schema and table with hostile names from
// several goroutines at once, then uses them.
func TestIntegrationNamesAndConcurrentMigrate(t *testing.T) {
	t.Parallel()
	s := testenv.PG(t)
	schema := `My "Schema"; -- ` + s.Name[len(s.Name)-8:]
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if _, err := s.Pool.Exec(ctx, "drop schema if exists "+pgx.Identifier{schema}.Sanitize()+" cascade"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	pool := bigPool(t, s, 8)
	st, err := idempotency.New(pool, idempotency.WithTable(schema, `Keys"; drop table x; --`),
		idempotency.WithRetention(time.Microsecond, "@every 1m"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- st.Migrate(ctx) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Migrate: %v", err)
		}
	}
	if first, err := st.Claim(ctx, s.Pool, "s", "k"); err != nil || !first {
		t.Fatalf("Claim = %v, %v", first, err)
	}
	if n, err := st.Purge(ctx, s.Pool); err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want 1", n, err)
	}
}

// TestIntegrationRepeatableReadWaiterFails: under REPEATABLE READ a claimer blocked behind another
// transaction's claim gets a serialization failure when that transaction commits, as documented.
func TestIntegrationRepeatableReadWaiterFails(t *testing.T) {
	s, st, ctx := begin(t)
	first := openTxs(t, ctx, s.Pool, 1)[0]
	second, err := s.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Rollback(context.Background()) })
	if ok, err := st.Claim(ctx, first, "s", "k"); err != nil || !ok {
		t.Fatalf("first Claim = %v, %v", ok, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := st.Claim(ctx, second, "s", "k")
		done <- err
	}()
	waitBlocked(t, ctx, s.Pool, second.Conn().PgConn().PID())
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-done
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
		t.Fatalf("blocked Claim under REPEATABLE READ: %v; want SQLSTATE 40001", err)
	}
}

// ClaimTx begins the transaction and claims in one round trip, and behaves as Begin then Claim:
// first once, a duplicate after the commit, nothing left by a rollback, a claim in progress
// waited for; bad input and a transaction as db are refused without leaving one open.
func TestIntegrationClaimTx(t *testing.T) {
	s, st, ctx := begin(t)
	pool, rt := testenv.CountingPool(t, s)
	var err error

	claim := func(key string) (pgx.Tx, bool) {
		t.Helper()
		var (
			tx    pgx.Tx
			first bool
			err   error
		)
		q, b := rt.During(func() { tx, first, err = st.ClaimTx(ctx, pool, "points", key) })
		if err != nil {
			t.Fatalf("ClaimTx(%s): %v", key, err)
		}
		if q != 0 || b != 1 {
			t.Fatalf("ClaimTx(%s) sent %d statements and %d batches; want one batch", key, q, b)
		}
		return tx, first
	}
	tx, first := claim("msg-1")
	if !first {
		t.Fatal("first ClaimTx: first = false")
	}
	// A second claimer of the key waits for the first transaction, then finds it claimed.
	type result struct {
		first bool
		err   error
	}
	waiter := make(chan result, 1)
	go func() {
		tx2, first, err := st.ClaimTx(ctx, s.Pool, "points", "msg-1")
		if err == nil {
			err = tx2.Commit(ctx)
		}
		waiter <- result{first, err}
	}()
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		var waiting int
		_ = s.Pool.QueryRow(ctx, `select count(*) from pg_stat_activity where wait_event_type = 'Lock' and query like '%txkit_idempotency%'`).Scan(&waiting)
		return waiting > 0
	}, "the second claimer never waited for the first transaction")
	if _, err := tx.Exec(ctx, `select 1`); err != nil { // the transaction is usable
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-waiter; r.err != nil || r.first {
		t.Fatalf("second claimer: first = %v, err = %v; want a duplicate", r.first, r.err)
	}

	// A rollback leaves no key.
	tx, first = claim("msg-2")
	if !first {
		t.Fatal("ClaimTx(msg-2): first = false")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if tx, first = claim("msg-2"); !first {
		t.Fatal("ClaimTx after a rolled-back claim: first = false")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// A duplicate of a committed claim: the plain insert aborts the first transaction, and
	// ClaimTx hands back a second, open one (the rollback and the begin: two round trips more).
	q, b := rt.During(func() { tx, first, err = st.ClaimTx(ctx, pool, "points", "msg-2") })
	if err != nil || first {
		t.Fatalf("ClaimTx of a claimed key: first = %v, err = %v; want a duplicate", first, err)
	}
	if q != 1 || b != 2 {
		t.Fatalf("duplicate ClaimTx sent %d statements and %d batches; want 1 (the rollback) and 2 (begin with the claim; begin)", q, b)
	}
	if _, err := tx.Exec(ctx, `select 1`); err != nil { // the transaction is usable
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	if _, _, err := st.ClaimTx(ctx, pool, "points", ""); !errors.Is(err, idempotency.ErrInvalidKey) {
		t.Errorf("ClaimTx of an empty key: %v; want ErrInvalidKey", err)
	}
	var nilPool *pgxpool.Pool
	if _, _, err := st.ClaimTx(ctx, nilPool, "points", "k"); !errors.Is(err, idempotency.ErrNilTx) {
		t.Errorf("ClaimTx on a nil pool: %v; want ErrNilTx", err)
	}
	outer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Rollback(ctx)
	if tx, _, err := st.ClaimTx(ctx, outer, "points", "msg-3"); err == nil || tx != nil {
		t.Errorf("ClaimTx in a transaction: tx %v, err %v; want refused", tx, err)
	}
	// Neither refusal nor any claim left a connection checked out.
	if err := outer.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool { return pool.Stat().AcquiredConns() == 0 },
		"a connection is still checked out")
}
