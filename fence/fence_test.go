package fence_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/obs/obstest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

const fenceTimeout = 30 * time.Second

// newFence returns a migrated Fence in the test's own schema.
// begin starts a fence test in parallel with the others: a schema of its own, a migrated fence
// on it with opts, and a ctx that ends with the test or after fenceTimeout.
func begin(t *testing.T, opts ...fence.Option) (*testenv.Schema, *fence.Fence, context.Context) {
	t.Helper()
	s, ctx := testenv.Parallel(t, fenceTimeout)
	return s, newFence(t, s, opts...), ctx
}

func newFence(t *testing.T, s *testenv.Schema, opts ...fence.Option) *fence.Fence {
	t.Helper()
	f, err := fence.New(s.Pool, opts...)
	if err != nil {
		t.Fatalf("NewFence: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), fenceTimeout)
	defer cancel()
	if err := f.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return f
}

// fenceCheckTx runs Check for resource and tok in a transaction of its own, committed when Check
// passes.
func fenceCheckTx(ctx context.Context, f *fence.Fence, pool *pgxpool.Pool, resource string, tok lock.Token) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return f.Check(ctx, tx, resource, tok) })
}

// fenceBegin begins a transaction on its own connection, rolled back when the test ends if still
// open.
func fenceBegin(t *testing.T, ctx context.Context, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// fenceWaitBlocked waits until the backend of tx waits on a lock.
func fenceWaitBlocked(t *testing.T, ctx context.Context, pool *pgxpool.Pool, tx pgx.Tx) {
	t.Helper()
	pid := tx.Conn().PgConn().PID()
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		var ev *string
		err := pool.QueryRow(ctx, `select wait_event_type from pg_stat_activity where pid = $1`, pid).Scan(&ev)
		return err == nil && ev != nil && *ev == "Lock"
	}, "backend %d to wait on a lock", pid)
}

func TestNewOptions(t *testing.T) {
	tests := []struct {
		name string
		opts []fence.Option
		ok   bool
	}{
		{"defaults", nil, true},
		{"schema and table", []fence.Option{fence.WithTable("app", "fence")}, true},
		{"quotes in names", []fence.Option{fence.WithTable(`a "b"`, `t"; drop table x; --`)}, true},
		{"table of 58 bytes", []fence.Option{fence.WithTable("", strings.Repeat("t", 58))}, true},
		{"table of 59 bytes", []fence.Option{fence.WithTable("", strings.Repeat("t", 59))}, false},
		{"table with NUL", []fence.Option{fence.WithTable("", "a\x00")}, false},
		{"schema not UTF-8", []fence.Option{fence.WithTable("\xff", "")}, false},
		{"schema of 64 bytes", []fence.Option{fence.WithTable(strings.Repeat("s", 64), "")}, false},
		{"metrics on a registry", []fence.Option{fence.WithRegisterer(prometheus.NewRegistry())}, true},
		{"metric name taken", []fence.Option{fence.WithRegisterer(takenRegistry(t))}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := fence.New(unusedPool(t), tc.opts...)
			if tc.ok {
				if err != nil || f == nil {
					t.Fatalf("NewFence = %v, %v; want a Fence", f, err)
				}
				return
			}
			if !errors.Is(err, fence.ErrInvalidOption) {
				t.Fatalf("New error = %v; want ErrInvalidOption", err)
			}
		})
	}
}

// takenRegistry returns a registry where txkit_fence_refused_total is a gauge.
func takenRegistry(t *testing.T) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	if err := reg.Register(prometheus.NewGauge(prometheus.GaugeOpts{Name: "txkit_fence_refused_total", Help: "taken"})); err != nil {
		t.Fatal(err)
	}
	return reg
}

// fenceNoDB is a DBTX that fails every call: bad input must be refused before the database.
type fenceNoDB struct{}

var errFenceReached = errors.New("the database was reached")

func (fenceNoDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errFenceReached
}
func (fenceNoDB) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errFenceReached
}
func (fenceNoDB) QueryRow(context.Context, string, ...any) pgx.Row { return fenceErrRow{} }

type fenceErrRow struct{}

func (fenceErrRow) Scan(...any) error { return errFenceReached }

func TestFenceCheckBadInput(t *testing.T) {
	f, err := fence.New(unusedPool(t))
	if err != nil {
		t.Fatal(err)
	}
	var nilPool *pgxpool.Pool
	tests := []struct {
		name     string
		db       fence.DBTX
		resource string
		tok      lock.Token
		want     error
	}{
		{"zero token", fenceNoDB{}, "r", lock.Token{}, fence.ErrInvalidOption},
		{"negative epoch", fenceNoDB{}, "r", lock.Token{Epoch: -1, Seq: 5}, fence.ErrInvalidOption},
		{"negative seq", fenceNoDB{}, "r", lock.Token{Epoch: 1, Seq: -1}, fence.ErrInvalidOption},
		{"empty resource", fenceNoDB{}, "", lock.Token{Epoch: 1}, fence.ErrInvalidOption},
		{"resource too long", fenceNoDB{}, strings.Repeat("r", fence.MaxResourceLen+1), lock.Token{Epoch: 1}, fence.ErrInvalidOption},
		{"resource with NUL", fenceNoDB{}, "a\x00", lock.Token{Epoch: 1}, fence.ErrInvalidOption},
		{"nil tx", nil, "r", lock.Token{Epoch: 1}, fence.ErrInvalidOption},
		{"nil pool", nilPool, "r", lock.Token{Epoch: 1}, fence.ErrInvalidOption},
		{"good input reaches the database", fenceNoDB{}, "r", lock.Token{Seq: 1}, errFenceReached},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := f.Check(t.Context(), tc.db, tc.resource, tc.tok); !errors.Is(err, tc.want) {
				t.Fatalf("Check error = %v; want %v", err, tc.want)
			}
		})
	}
	if _, err := fence.New(nil); !errors.Is(err, fence.ErrInvalidOption) {
		t.Fatalf("New(nil) error = %v; want ErrInvalidOption", err)
	}
}

// unusedPool is a pool that never connects (pgxpool connects lazily): for what must be refused
// before the database.
func unusedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(t.Context(), "postgres://txkit@127.0.0.1:1/unused")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// TestIntegrationFenceOrder passes a sequence of tokens, each in a transaction of its own, through
// the fence of one resource.
func TestIntegrationFenceOrder(t *testing.T) {
	s, f, ctx := begin(t)
	if err := f.Migrate(ctx); err != nil { // a second Migrate is a no-op
		t.Fatalf("second Migrate: %v", err)
	}

	steps := []struct {
		name     string
		resource string
		tok      lock.Token
		fenced   bool
		current  lock.Token // the token named in the refusal
	}{
		{"first holder", "orders", lock.Token{Epoch: 1, Seq: 5}, false, lock.Token{}},
		{"same holder writes again", "orders", lock.Token{Epoch: 1, Seq: 5}, false, lock.Token{}},
		{"next holder", "orders", lock.Token{Epoch: 1, Seq: 6}, false, lock.Token{}},
		{"deposed holder", "orders", lock.Token{Epoch: 1, Seq: 5}, true, lock.Token{Epoch: 1, Seq: 6}},
		{"parent re-created: epoch beats seq", "orders", lock.Token{Epoch: 2, Seq: 0}, false, lock.Token{}},
		{"old epoch, high seq", "orders", lock.Token{Epoch: 1, Seq: 99}, true, lock.Token{Epoch: 2, Seq: 0}},
		{"resources are independent", "payments", lock.Token{Epoch: 1, Seq: 1}, false, lock.Token{}},
	}
	for _, st := range steps {
		err := fenceCheckTx(ctx, f, s.Pool, st.resource, st.tok)
		if !st.fenced {
			if err != nil {
				t.Fatalf("%s: Check(%s, %s) = %v; want nil", st.name, st.resource, st.tok, err)
			}
			continue
		}
		if !errors.Is(err, lock.ErrFenced) {
			t.Fatalf("%s: Check(%s, %s) = %v; want ErrFenced", st.name, st.resource, st.tok, err)
		}
		var fe *fence.FencedError
		if !errors.As(err, &fe) || fe.Resource != st.resource || fe.Token != st.tok || fe.Current != st.current {
			t.Fatalf("%s: error %#v; want a FencedError for %s with %s below %s", st.name, err, st.resource, st.tok, st.current)
		}
		for _, part := range []string{st.resource, st.tok.String(), st.current.String(), "lock: fenced"} {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("%s: error %q does not name %q", st.name, err, part)
			}
		}
	}
	var epoch, seq int64
	if err := s.Pool.QueryRow(ctx, `select epoch, seq from txkit_fence where resource = 'orders'`).Scan(&epoch, &seq); err != nil {
		t.Fatal(err)
	}
	if (lock.Token{Epoch: epoch, Seq: seq}) != (lock.Token{Epoch: 2, Seq: 0}) {
		t.Fatalf("recorded token %d.%d; want 2.0", epoch, seq)
	}
}

// TestIntegrationFenceRefusedMetric: txkit_fence_refused_total counts each refused write once, by
// cause (a lower seq, a lower epoch), and nothing for writes that pass; two fences on one registry
// share the series.
func TestIntegrationFenceRefusedMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, f, ctx := begin(t, fence.WithRegisterer(reg))
	other := newFence(t, s, fence.WithRegisterer(reg)) // the same table, another Fence value
	steps := []struct {
		f      *fence.Fence
		tok    lock.Token
		fenced bool
	}{
		{f, lock.Token{Epoch: 1, Seq: 5}, false},
		{f, lock.Token{Epoch: 1, Seq: 6}, false},
		{f, lock.Token{Epoch: 1, Seq: 6}, false}, // equal passes
		{f, lock.Token{Epoch: 1, Seq: 5}, true},  // seq below
		{other, lock.Token{Epoch: 1, Seq: 4}, true},
		{f, lock.Token{Epoch: 2, Seq: 0}, false},
		{f, lock.Token{Epoch: 1, Seq: 99}, true}, // epoch below
	}
	for i, st := range steps {
		err := fenceCheckTx(ctx, st.f, s.Pool, "orders", st.tok)
		if got := errors.Is(err, lock.ErrFenced); got != st.fenced || (!st.fenced && err != nil) {
			t.Fatalf("step %d: Check(%s) = %v; want fenced %v", i, st.tok, err, st.fenced)
		}
	}
	for cause, want := range map[string]float64{"seq": 2, "epoch": 1, "unknown": 0} {
		if got := obstest.Value(t, reg, "txkit_fence_refused_total", "cause", cause); got != want {
			t.Errorf("txkit_fence_refused_total{cause=%q} = %v; want %v", cause, got, want)
		}
	}
	if _, ok := obstest.Series(t, reg, "txkit_fence_refused_total", "cause", "unknown"); !ok {
		t.Error("no txkit_fence_refused_total{cause=\"unknown\"} series at 0")
	}
}

// TestIntegrationFenceDeposedHolder: the old holder's transaction began before the new holder
// wrote; after the new holder commits, the old holder's write is refused, its transaction stays
// usable and rolls back without a trace.
func TestIntegrationFenceDeposedHolder(t *testing.T) {
	s, f, ctx := begin(t)
	if _, err := s.Pool.Exec(ctx, `create table orders (id int primary key, by_token text not null)`); err != nil {
		t.Fatal(err)
	}
	oldTok, newTok := lock.Token{Epoch: 7, Seq: 1}, lock.Token{Epoch: 7, Seq: 2}
	if err := fenceCheckTx(ctx, f, s.Pool, "orders", oldTok); err != nil {
		t.Fatalf("the old holder's earlier write: %v", err)
	}

	old := fenceBegin(t, ctx, s.Pool) // the old holder starts a write, then pauses
	if _, err := old.Exec(ctx, `insert into orders values (1, $1)`, oldTok.String()); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error { // the new holder writes and commits
		if err := f.Check(ctx, tx, "orders", newTok); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `insert into orders values (2, $1)`, newTok.String())
		return err
	}); err != nil {
		t.Fatalf("new holder: %v", err)
	}

	err := f.Check(ctx, old, "orders", oldTok)
	if !errors.Is(err, lock.ErrFenced) {
		t.Fatalf("deposed holder's Check = %v; want ErrFenced", err)
	}
	var one int
	if err := old.QueryRow(ctx, `select 1`).Scan(&one); err != nil {
		t.Fatalf("the refused transaction is not usable: %v", err)
	}
	if err := old.Rollback(ctx); err != nil {
		t.Fatalf("rollback after refusal: %v", err)
	}
	rows, err := s.Pool.Query(ctx, `select id from orders order by id`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 1 || ids[0] != 2 {
		t.Fatalf("orders %v; want only the new holder's row 2", ids)
	}
}

// TestIntegrationFenceConcurrentWriters runs two open transactions against one resource: the
// second Check blocks on the first's row lock until the first ends, then compares with what was
// committed.
func TestIntegrationFenceConcurrentWriters(t *testing.T) {
	t.Parallel()
	s := testenv.PG(t)
	f := newFence(t, s)
	low, high := lock.Token{Epoch: 3, Seq: 10}, lock.Token{Epoch: 3, Seq: 11}
	tests := []struct {
		name        string
		existing    bool       // the resource has a row before the two writers start
		first, next lock.Token // the first writer's token, then the blocked writer's
		firstEnds   func(pgx.Tx, context.Context) error
		nextFenced  bool
	}{
		{"new holder commits, deposed waiter refused", true, high, low, pgx.Tx.Commit, true},
		{"new holder commits, first write of the resource", false, high, low, pgx.Tx.Commit, true},
		{"new holder rolls back, deposed waiter passes", true, high, low, pgx.Tx.Rollback, false},
		{"deposed holder commits, new waiter passes", true, low, high, pgx.Tx.Commit, false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), fenceTimeout)
			defer cancel()
			resource := "r" + string(rune('a'+i))
			if tc.existing {
				if err := fenceCheckTx(ctx, f, s.Pool, resource, lock.Token{Epoch: 3, Seq: 1}); err != nil {
					t.Fatal(err)
				}
			}
			first, next := fenceBegin(t, ctx, s.Pool), fenceBegin(t, ctx, s.Pool)
			if err := f.Check(ctx, first, resource, tc.first); err != nil {
				t.Fatalf("first writer: %v", err)
			}
			done := make(chan error, 1)
			var wg sync.WaitGroup
			wg.Go(func() { done <- f.Check(ctx, next, resource, tc.next) })
			defer wg.Wait()
			fenceWaitBlocked(t, ctx, s.Pool, next)
			select {
			case err := <-done:
				t.Fatalf("second writer's Check returned %v while the first transaction was open", err)
			default:
			}
			if err := tc.firstEnds(first, ctx); err != nil {
				t.Fatal(err)
			}
			err := <-done
			if tc.nextFenced {
				var fe *fence.FencedError
				if !errors.As(err, &fe) || !errors.Is(err, lock.ErrFenced) || fe.Current != tc.first {
					t.Fatalf("blocked writer's Check = %v; want ErrFenced naming %s", err, tc.first)
				}
				return
			}
			if err != nil {
				t.Fatalf("blocked writer's Check = %v; want nil", err)
			}
			if err := next.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestIntegrationFenceRepeatableRead: under REPEATABLE READ a deposed writer blocked behind the new
// holder fails with a serialization failure instead of ErrFenced; either way it cannot commit.
func TestIntegrationFenceRepeatableRead(t *testing.T) {
	s, f, ctx := begin(t)
	if err := fenceCheckTx(ctx, f, s.Pool, "r", lock.Token{Epoch: 1, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	newer := fenceBegin(t, ctx, s.Pool)
	older, err := s.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = older.Rollback(context.Background()) })
	var one int
	if err := older.QueryRow(ctx, `select 1`).Scan(&one); err != nil { // take the snapshot now
		t.Fatal(err)
	}
	if err := f.Check(ctx, newer, "r", lock.Token{Epoch: 1, Seq: 3}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() { done <- f.Check(ctx, older, "r", lock.Token{Epoch: 1, Seq: 2}) })
	defer wg.Wait()
	fenceWaitBlocked(t, ctx, s.Pool, older)
	if err := newer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-done
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
		t.Fatalf("deposed writer under REPEATABLE READ: %v; want SQLSTATE 40001", err)
	}
}

// queuedTx sends, on one connection of pool and in one round trip, a transaction of the queued
// check of (resource, tok) followed by the statements of writes and the commit; when it fails it
// rolls back and returns the check's Err.
func queuedTx(ctx context.Context, f *fence.Fence, pool *pgxpool.Pool, resource string, tok lock.Token, writes ...string) error {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	q, err := f.Queue(b, resource, tok)
	if err != nil {
		return err
	}
	for _, w := range writes {
		b.Queue(w, tok.String())
	}
	b.Queue("commit")
	br := c.SendBatch(ctx, b)
	tx := br.Tx()
	if err = br.Close(); err != nil {
		_ = tx.Rollback(ctx)
		return q.Err(ctx, c, err)
	}
	return nil
}

// TestIntegrationFenceQueue: a check queued into a batch passes the holders Check passes and
// refuses the ones it refuses; a refused batch commits nothing of its writes, and its error is
// the FencedError Check returns (Current filled, counted by cause). A division by zero in a write
// of the batch is that write's error, not a refusal.
func TestIntegrationFenceQueue(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, f, ctx := begin(t, fence.WithRegisterer(reg))
	if _, err := s.Pool.Exec(ctx, `create table orders (id serial primary key, by_token text not null)`); err != nil {
		t.Fatal(err)
	}
	const write = `insert into orders (by_token) values ($1)`
	rows := func() int {
		var n int
		if err := s.Pool.QueryRow(ctx, `select count(*) from orders`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	first, next := lock.Token{Epoch: 1, Seq: 5}, lock.Token{Epoch: 1, Seq: 6}
	for _, tok := range []lock.Token{first, first, next} {
		if err := queuedTx(ctx, f, s.Pool, "orders", tok, write); err != nil {
			t.Fatalf("queued check with %s: %v", tok, err)
		}
	}
	if n := rows(); n != 3 {
		t.Fatalf("%d orders after three passing batches; want 3", n)
	}
	for _, tok := range []lock.Token{first, {Epoch: 0, Seq: 99}} {
		err := queuedTx(ctx, f, s.Pool, "orders", tok, write, write)
		var fe *fence.FencedError
		if !errors.Is(err, lock.ErrFenced) || !errors.As(err, &fe) || fe.Resource != "orders" || fe.Token != tok || fe.Current != next {
			t.Fatalf("refused batch with %s: %#v; want a FencedError for orders with %s below %s", tok, err, tok, next)
		}
	}
	if n := rows(); n != 3 {
		t.Fatalf("%d orders after two refused batches; want 3 (nothing of theirs committed)", n)
	}
	for cause, want := range map[string]float64{"seq": 1, "epoch": 1, "unknown": 0} {
		if got := obstest.Value(t, reg, "txkit_fence_refused_total", "cause", cause); got != want {
			t.Errorf("txkit_fence_refused_total{cause=%q} = %v; want %v", cause, got, want)
		}
	}
	err := queuedTx(ctx, f, s.Pool, "orders", next, write, `select 1 / (length($1) - length($1))`)
	var pe *pgconn.PgError
	if errors.Is(err, lock.ErrFenced) || !errors.As(err, &pe) || pe.Code != "22012" {
		t.Fatalf("a write dividing by zero: %v; want its own division_by_zero, not a refusal", err)
	}
	if n := rows(); n != 3 {
		t.Fatalf("%d orders after a failed batch; want 3", n)
	}
	if _, err := f.Queue(&pgx.Batch{}, "orders", lock.Token{}); !errors.Is(err, fence.ErrInvalidOption) {
		t.Fatalf("Queue with a zero token: %v; want ErrInvalidOption", err)
	}
	if _, err := f.Queue(nil, "orders", next); !errors.Is(err, fence.ErrInvalidOption) {
		t.Fatalf("Queue with a nil batch: %v; want ErrInvalidOption", err)
	}
}
