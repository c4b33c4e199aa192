package core_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/tcpproxy"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

// groupLog is a migrated Log with group commit (a window long enough that no queued write ever
// sends itself in a test) on a pool of its own, so that the pool's acquire count is the log's
// statements; and the test's schema, whose pool the test uses for everything else.
func groupLog(t *testing.T) (*core.Log, *pgxpool.Pool, *testenv.Schema) {
	t.Helper()
	return migratedLog(t, core.WithGroupCommit(time.Minute))
}

// migratedLog returns a log with opts, migrated in a schema of the test's own, and its pool of
// its own (closed when the test ends).
func migratedLog(t *testing.T, opts ...core.LogOption) (*core.Log, *pgxpool.Pool, *testenv.Schema) {
	t.Helper()
	s := testenv.PG(t)
	pool, err := pgxpool.New(t.Context(), s.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l, err := core.New(pool, append([]core.LogOption{core.WithSchema(s.Name)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return l, pool, s
}

// holdRow locks gid's global row in a transaction of its own until the returned func commits it:
// a write of gid through the log blocks meanwhile, its flush in flight.
func holdRow(t *testing.T, s *testenv.Schema, gid string) (release func()) {
	t.Helper()
	tx, err := s.Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), `select 1 from txkit_global where gid = $1 for update`, gid); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := tx.Commit(context.Background()); err != nil {
			t.Error(err)
		}
	}
}

// goWrite runs write in a goroutine; the returned channel delivers its error.
func goWrite(write func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- write() }()
	return ch
}

// A write that finds nothing in flight is flushed at once, alone, by its caller: it waits for
// no partner (the window is a minute, and nothing else writes).
func TestIntegrationGroupCommitLoneWrite(t *testing.T) {
	ctx := t.Context()
	l, pool, _ := groupLog(t)
	acq0 := pool.Stat().AcquireCount()
	if err := l.Create(ctx, "g1", core.KindTCC, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	want := core.GroupCommitStats{Flushes: 1, Writes: 1, Immediate: 1}
	if got := l.GroupCommitStats(); got != want {
		t.Fatalf("after a lone write: %+v, want %+v", got, want)
	}
	if err := l.AddBranch(ctx, "g1", core.StatusTrying, httpBranch("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Decide(ctx, "g1", core.StatusTrying, core.StatusConfirming); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, lock.Token{}, core.Progress{GID: "g1", From: core.StatusConfirming, Done: []string{"a"},
		Next: core.StatusConfirmed}); err != nil {
		t.Fatal(err)
	}
	want = core.GroupCommitStats{Flushes: 4, Writes: 4, Immediate: 4}
	if got := l.GroupCommitStats(); got != want {
		t.Fatalf("after four lone writes: %+v, want %+v", got, want)
	}
	if n := pool.Stat().AcquireCount() - acq0; n != 4 {
		t.Fatalf("%d statements for four lone writes, want 4", n)
	}
	if tx := get(t, l, "g1"); tx.Status != core.StatusConfirmed || tx.Branches[0].Status != core.BranchConfirmed {
		t.Fatalf("g1: %+v", tx)
	}
}

// Writes of concurrent transactions that arrive while a flush is in flight share the next one:
// one batch, one round trip; each caller gets its own outcome, and a write whose
// condition fails (a gid taken, a status already moved) fails alone.
func TestIntegrationGroupCommitShares(t *testing.T) {
	ctx := t.Context()
	l, pool, s := groupLog(t)
	const n = 8
	// Setup, one lone write at a time: blocker; d0..d7 trying (to decide); f0..f7 confirming
	// with branch a (to finish); b0..b7 trying (to get a branch); moved, already confirming.
	for _, gid := range []string{"blocker", "moved"} {
		if err := l.Create(ctx, gid, core.KindTCC, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Decide(ctx, "moved", core.StatusTrying, core.StatusConfirming); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		for _, gid := range []string{fmt.Sprint("d", i), fmt.Sprint("b", i)} {
			if err := l.Create(ctx, gid, core.KindTCC, time.Minute, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.CreateIn(ctx, fmt.Sprint("f", i), core.KindTCC, core.StatusConfirming, time.Minute, nil, httpBranch("a")); err != nil {
			t.Fatal(err)
		}
	}
	before := l.GroupCommitStats()

	release := holdRow(t, s, "blocker")
	acq0 := pool.Stat().AcquireCount()
	blocked := goWrite(func() error {
		_, err := l.Decide(ctx, "blocker", core.StatusTrying, core.StatusConfirming)
		return err
	})
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		return l.GroupCommitStats().Immediate == before.Immediate+1
	}, "the blocked decision is in flight")

	var writes []<-chan error
	for i := range n {
		writes = append(writes,
			goWrite(func() error {
				_, err := l.Decide(ctx, fmt.Sprint("d", i), core.StatusTrying, core.StatusConfirming)
				return err
			}),
			goWrite(func() error {
				return l.Record(ctx, lock.Token{}, core.Progress{GID: fmt.Sprint("f", i), From: core.StatusConfirming,
					Done: []string{"a"}, Next: core.StatusConfirmed})
			}),
			goWrite(func() error { return l.AddBranch(ctx, fmt.Sprint("b", i), core.StatusTrying, httpBranch("a")) }),
			goWrite(func() error {
				return l.Create(ctx, fmt.Sprint("c", i), core.KindSaga, time.Minute, nil, httpBranch("x"), httpBranch("y"))
			}))
	}
	// Their own failures: a gid taken (its branch recorded neither), a decision on a transaction
	// no longer trying.
	taken := goWrite(func() error { return l.Create(ctx, "d0", core.KindTCC, time.Minute, nil, httpBranch("q")) })
	late := goWrite(func() error {
		_, err := l.Decide(ctx, "moved", core.StatusTrying, core.StatusCancelling)
		return err
	})
	// A second branch of b0 waits for the next flush: one write per gid per flush.
	second := goWrite(func() error { return l.AddBranch(ctx, "b0", core.StatusTrying, httpBranch("z")) })
	// A write whose caller gives up while queued leaves the queue and is never made.
	gone, cancel := context.WithCancel(ctx)
	abandoned := goWrite(func() error { return l.Create(gone, "abandoned", core.KindTCC, time.Minute, nil) })
	queued := 4*n + 4
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool { return l.GroupCommitStats().Queued == queued },
		"%d writes queued behind the blocked one", queued)
	cancel()
	if err := <-abandoned; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned write = %v, want context.Canceled", err)
	}
	if q := l.GroupCommitStats().Queued; q != queued-1 {
		t.Fatalf("%d queued after the abandoned write left, want %d", q, queued-1)
	}

	release()
	for _, ch := range append(writes, blocked) {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-taken; !errors.Is(err, core.ErrInvalidState) {
		t.Fatalf("create of a gid taken = %v, want ErrInvalidState", err)
	}
	if err := <-late; !errors.Is(err, core.ErrInvalidState) {
		t.Fatalf("a late decision = %v, want ErrInvalidState", err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	got := l.GroupCommitStats()
	// The blocked flush, then one batch of 4n+2 writes handed over when it ended, then b0's
	// second branch (handed over when the batch ended).
	want := core.GroupCommitStats{Flushes: before.Flushes + 3, Writes: before.Writes + 1 + 4*n + 2 + 1,
		Immediate: before.Immediate + 1}
	if got != want {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
	// Statements: the blocked one, the batch, b0's second branch, and the status read of the
	// late decision (which reports the status it found).
	if a := pool.Stat().AcquireCount() - acq0; a != 4 {
		t.Fatalf("%d statements for %d writes, want 4", a, queued)
	}

	for i := range n {
		for gid, st := range map[string]core.Status{fmt.Sprint("d", i): core.StatusConfirming, fmt.Sprint("f", i): core.StatusConfirmed,
			fmt.Sprint("b", i): core.StatusTrying, fmt.Sprint("c", i): core.StatusRunning} {
			tx := get(t, l, gid)
			nb := map[byte]int{'d': 0, 'f': 1, 'b': 1, 'c': 2}[gid[0]]
			if gid == "b0" {
				nb = 2
			}
			if tx.Status != st || len(tx.Branches) != nb {
				t.Fatalf("%s: %s with %d branches, want %s with %d", gid, tx.Status, len(tx.Branches), st, nb)
			}
			if gid[0] == 'f' && tx.Branches[0].Status != core.BranchConfirmed {
				t.Fatalf("%s: branch %+v not confirmed", gid, tx.Branches[0])
			}
		}
	}
	if tx := get(t, l, "moved"); tx.Status != core.StatusConfirming {
		t.Fatalf("moved: %s", tx.Status)
	}
	if _, err := l.Get(ctx, "abandoned"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("the abandoned write was made: %v", err)
	}
}

// A row PostgreSQL refuses fails its batch's transaction — the statements before it in the batch
// too — and the batch's writes are then made one by one, so only the bad one fails: a bad
// transaction to record (the batch's first statement: a batch runs its writes in gid order), and a
// bad decision (its last: the creates before it in the batch rolled back with it, or their second
// insert would find their gids taken).
func TestIntegrationGroupCommitBadRow(t *testing.T) {
	for _, tc := range []struct {
		name string
		bad  func(l *core.Log, ctx context.Context) error
	}{
		{"create", func(l *core.Log, ctx context.Context) error {
			return l.Create(ctx, "a\x00bad", core.KindTCC, time.Minute, nil) // NUL: not valid text
		}},
		{"decide", func(l *core.Log, ctx context.Context) error {
			_, err := l.Decide(ctx, "z\x00bad", core.StatusTrying, core.StatusConfirming)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			l, _, s := groupLog(t)
			for _, gid := range []string{"blocker", "d"} {
				if err := l.Create(ctx, gid, core.KindTCC, time.Minute, nil); err != nil {
					t.Fatal(err)
				}
			}
			release := holdRow(t, s, "blocker")
			blocked := goWrite(func() error {
				_, err := l.Decide(ctx, "blocker", core.StatusTrying, core.StatusCancelling)
				return err
			})
			testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool { return l.GroupCommitStats().Immediate == 3 },
				"the blocked decision is in flight")
			good1 := goWrite(func() error { return l.Create(ctx, "good1", core.KindTCC, time.Minute, nil) })
			bad := goWrite(func() error { return tc.bad(l, ctx) })
			good2 := goWrite(func() error { return l.Create(ctx, "good2", core.KindSaga, time.Minute, nil, httpBranch("x")) })
			decided := goWrite(func() error {
				_, err := l.Decide(ctx, "d", core.StatusTrying, core.StatusConfirming)
				return err
			})
			testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool { return l.GroupCommitStats().Queued == 4 },
				"four writes queued")
			release()
			for _, ch := range []<-chan error{blocked, good1, good2, decided} {
				if err := <-ch; err != nil {
					t.Fatal(err)
				}
			}
			err := <-bad
			if err == nil || errors.Is(err, core.ErrInvalidState) || errors.Is(err, core.ErrNotFound) {
				t.Fatalf("the bad row's write = %v, want PostgreSQL's refusal", err)
			}
			if st := l.GroupCommitStats(); st.Fallbacks != 1 || st.Flushes != 4 {
				t.Fatalf("stats %+v, want one batch refused after three lone writes", st)
			}
			// Each good write made once.
			for gid, want := range map[string]core.Status{"good1": core.StatusTrying, "good2": core.StatusRunning, "d": core.StatusConfirming} {
				if tx := get(t, l, gid); tx.Status != want {
					t.Fatalf("%s: %s, want %s", gid, tx.Status, want)
				}
			}
			if tx := get(t, l, "good2"); len(tx.Branches) != 1 {
				t.Fatalf("good2's branches: %+v", tx.Branches)
			}
		})
	}
}

func TestGroupCommitOption(t *testing.T) {
	if _, err := core.New(&pgxpool.Pool{}, core.WithGroupCommit(-time.Millisecond)); !errors.Is(err, core.ErrInvalidOption) {
		t.Fatalf("negative window = %v, want ErrInvalidOption", err)
	}
}

// proxiedLog returns a migrated log with opts whose pool reaches PostgreSQL through the proxy
// listening on proxy(target) (target: the server's host:port), and the test's schema.
func proxiedLog(t *testing.T, proxy func(target string) string, opts ...core.LogOption) (*core.Log, *testenv.Schema) {
	t.Helper()
	s := testenv.PG(t)
	cfg, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(proxy(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))))
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = host, uint16(p), nil
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l, err := core.New(pool, append([]core.LogOption{core.WithSchema(s.Name)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return l, s
}

// batchBehindPartition records the transactions gc-lead and gc-other (and blocker) through a proxy,
// then queues a decision of gc-lead (with leadCtx, first: it leads the batch) and one of gc-other
// (with otherCtx) behind a blocked decision of blocker, and lets the batch go, armed to partition
// the proxy the moment the batch reaches PostgreSQL: the batch commits, its answer is lost. It
// returns the two decisions' errors; the blocked one has returned nil.
func batchBehindPartition(t *testing.T, leadCtx func() context.Context, otherCtx context.Context, opts ...core.LogOption) (
	l *core.Log, p *testenv.Proxy, lead, other <-chan error) {
	t.Helper()
	ctx := t.Context()
	l, s := proxiedLog(t, func(target string) string { p = testenv.NewRawProxy(t, target); return p.Addr() },
		append([]core.LogOption{core.WithGroupCommit(time.Minute)}, opts...)...)
	for _, gid := range []string{"blocker", "gc-lead", "gc-other"} {
		if err := l.Create(ctx, gid, core.KindTCC, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
	}
	release := holdRow(t, s, "blocker")
	blocked := goWrite(func() error {
		_, err := l.Decide(ctx, "blocker", core.StatusTrying, core.StatusConfirming)
		return err
	})
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool { return l.GroupCommitStats().Immediate == 4 },
		"the blocked decision is in flight")
	decide := func(ctx context.Context, gid string) <-chan error {
		return goWrite(func() error {
			_, err := l.Decide(ctx, gid, core.StatusTrying, core.StatusConfirming)
			return err
		})
	}
	lead = decide(leadCtx(), "gc-lead")
	testenv.Eventually(t, 10*time.Second, time.Millisecond, func() bool { return l.GroupCommitStats().Queued == 1 }, "gc-lead queued")
	other = decide(otherCtx, "gc-other")
	testenv.Eventually(t, 10*time.Second, time.Millisecond, func() bool { return l.GroupCommitStats().Queued == 2 }, "gc-other queued")
	p.PartitionAfter([]byte("gc-other"))
	release()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	return l, p, lead, other
}

// The writer leading a batch returns when its ctx ends — 1 s — with an error wrapping ErrInDoubt,
// while the batch goes on for the others: behind a network partition, the other writer (no
// deadline) waits until the partition heals (its connection cut: in doubt too), and the batch,
// which reached PostgreSQL, committed both decisions. Before, the leader waited for the batch,
// bounded only by the latest deadline of its writers — none here: until the partition healed.
func TestIntegrationGroupCommitLeaderDeadline(t *testing.T) {
	ctx := t.Context()
	var begun time.Time
	l, p, lead, other := batchBehindPartition(t, func() context.Context {
		begun = time.Now()
		c, cancel := context.WithTimeout(ctx, time.Second)
		t.Cleanup(cancel)
		return c
	}, ctx)
	select {
	case err := <-lead:
		if !errors.Is(err, core.ErrInDoubt) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the leader's decision = %v, want ErrInDoubt and DeadlineExceeded", err)
		}
		if d := time.Since(begun); d > 2500*time.Millisecond {
			t.Fatalf("the leader returned %v after its ctx began, deadline 1 s", d)
		}
	case <-time.After(6 * time.Second):
		p.Heal()
		t.Fatalf("the leader, deadline 1 s, still blocked %v after its ctx began", time.Since(begun))
	}
	if !p.Partitioned() {
		t.Fatal("the batch never reached the proxy's pattern: the test shows nothing")
	}
	select {
	case err := <-other:
		t.Fatalf("the other writer returned with the leader (%v): the batch did not go on for it", err)
	default:
	}
	p.Heal()
	if err := <-other; !errors.Is(err, core.ErrInDoubt) {
		t.Fatalf("the other writer, its connection cut = %v, want ErrInDoubt", err)
	}
	for _, gid := range []string{"gc-lead", "gc-other"} {
		if tx := get(t, l, gid); tx.Status != core.StatusConfirming {
			t.Fatalf("%s: %s, want confirming (the batch committed)", gid, tx.Status)
		}
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// A batch none of whose writers has a deadline is bounded by the log's lease: behind a partition,
// both writers return in doubt once it has passed (2 s here), before the partition heals. Before,
// such a batch had no bound: with TCP's retries, about 15 minutes.
func TestIntegrationGroupCommitBatchCap(t *testing.T) {
	ctx := t.Context()
	const lease = 2 * time.Second
	l, p, lead, other := batchBehindPartition(t, func() context.Context { return ctx }, ctx, core.WithLease(lease))
	sent := time.Now()
	timeout := time.After(lease + 6*time.Second)
	for _, ch := range []<-chan error{lead, other} {
		select {
		case err := <-ch:
			if !errors.Is(err, core.ErrInDoubt) {
				t.Fatalf("a decision of the batch = %v, want ErrInDoubt", err)
			}
		case <-timeout:
			p.Heal()
			t.Fatalf("a batch without deadline still blocked %v behind the partition (lease %v)", time.Since(sent), lease)
		}
	}
	if !p.Partitioned() {
		t.Fatal("the partition healed before the writers returned: the test shows nothing")
	}
	p.Heal()
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// fatalAfterCommit is a proxy's copy of PostgreSQL's messages that, once armed, replaces the
// ReadyForQuery that ends a batch (two CommandCompletes or more since the last one: every
// statement ran, and the implicit transaction committed) with the FATAL error a backend sends
// when it is terminated (57P01, pg_terminate_backend, a failover), and cuts the connection.
func fatalAfterCommit(armed *atomic.Bool) func(dst io.Writer, src io.Reader) error {
	return fatalAfterCompletes(armed, 2)
}

// fatalAfterCompletes is fatalAfterCommit for a ReadyForQuery after n CommandCompletes or more (1:
// one statement in autocommit).
func fatalAfterCompletes(armed *atomic.Bool, n int) func(dst io.Writer, src io.Reader) error {
	return func(dst io.Writer, src io.Reader) error {
		hdr := make([]byte, 5)
		completes := 0
		for {
			if _, err := io.ReadFull(src, hdr); err != nil {
				return err
			}
			body := make([]byte, binary.BigEndian.Uint32(hdr[1:])-4)
			if _, err := io.ReadFull(src, body); err != nil {
				return err
			}
			switch hdr[0] {
			case 'C':
				completes++
			case 'Z':
				if completes >= n && armed.CompareAndSwap(true, false) {
					var e []byte
					for _, f := range []string{"SFATAL", "VFATAL", "C57P01", "Mterminating connection due to administrator command"} {
						e = append(append(e, f...), 0)
					}
					e = append(e, 0)
					msg := binary.BigEndian.AppendUint32([]byte{'E'}, uint32(len(e)+4))
					_, err := dst.Write(append(msg, e...))
					return err
				}
				completes = 0
			}
			if _, err := dst.Write(append(hdr, body...)); err != nil {
				return err
			}
		}
	}
}

// A batch whose session ends after its statements ran — PostgreSQL committed, then the backend was
// terminated (FATAL 57P01, as in a failover) before the answer — is in doubt: each writer gets an
// error wrapping ErrInDoubt, and the rows are there. Before, the FATAL error was taken for a
// refusal and each write made again alone, which found its own committed row: "gid exists"
// (ErrInvalidState) for a transaction this very call recorded.
func TestIntegrationGroupCommitAmbiguousCommit(t *testing.T) {
	ctx := t.Context()
	var armed atomic.Bool
	l, s := proxiedLog(t, func(target string) string {
		p, err := tcpproxy.New(target, tcpproxy.WithReplies(fatalAfterCommit(&armed)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		return p.Addr()
	}, core.WithGroupCommit(time.Minute))
	if err := l.Create(ctx, "blocker", core.KindTCC, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	release := holdRow(t, s, "blocker")
	blocked := goWrite(func() error {
		_, err := l.Decide(ctx, "blocker", core.StatusTrying, core.StatusConfirming)
		return err
	})
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool { return l.GroupCommitStats().Immediate == 2 },
		"the blocked decision is in flight")
	c1 := goWrite(func() error { return l.Create(ctx, "c1", core.KindTCC, time.Minute, nil) })
	c2 := goWrite(func() error { return l.Create(ctx, "c2", core.KindSaga, time.Minute, nil, httpBranch("x")) })
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool { return l.GroupCommitStats().Queued == 2 },
		"two creates queued")
	armed.Store(true)
	release()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan error{c1, c2} {
		if err := <-ch; !errors.Is(err, core.ErrInDoubt) {
			t.Fatalf("a create whose batch committed, then lost its session = %v, want ErrInDoubt", err)
		}
	}
	if armed.Load() {
		t.Fatal("the proxy never sent the FATAL error: the test shows nothing")
	}
	for gid, want := range map[string]core.Status{"c1": core.StatusTrying, "c2": core.StatusRunning} {
		if tx := get(t, l, gid); tx.Status != want {
			t.Fatalf("%s: %s, want %s (the batch committed)", gid, tx.Status, want)
		}
	}
	if st := l.GroupCommitStats(); st.Fallbacks != 0 {
		t.Fatalf("stats %+v: the batch was made again one by one", st)
	}
}

// Without group commit too, a write whose session ends after PostgreSQL committed it (FATAL 57P01
// before the answer: a failover's terminated backend) is in doubt, not failed: Create and Decide
// return errors wrapping ErrInDoubt, and what they wrote is there — the caller's retry of the
// decision finds it made. Before, they returned the bare FATAL error, which a caller takes for a
// failure.
func TestIntegrationAmbiguousCommitAlone(t *testing.T) {
	ctx := t.Context()
	var armed atomic.Bool
	l, _ := proxiedLog(t, func(target string) string {
		p, err := tcpproxy.New(target, tcpproxy.WithReplies(fatalAfterCompletes(&armed, 1)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		return p.Addr()
	})
	armed.Store(true)
	if err := l.Create(ctx, "a1", core.KindTCC, time.Minute, nil); !errors.Is(err, core.ErrInDoubt) {
		t.Fatalf("a create that committed, then lost its session = %v, want ErrInDoubt", err)
	}
	if armed.Load() {
		t.Fatal("the proxy never sent the FATAL error: the test shows nothing")
	}
	if tx := get(t, l, "a1"); tx.Status != core.StatusTrying {
		t.Fatalf("a1: %s, want trying (the create committed)", tx.Status)
	}
	armed.Store(true)
	if _, err := l.Decide(ctx, "a1", core.StatusTrying, core.StatusConfirming); !errors.Is(err, core.ErrInDoubt) {
		t.Fatalf("a decision that committed, then lost its session = %v, want ErrInDoubt", err)
	}
	if st, err := l.Decide(ctx, "a1", core.StatusTrying, core.StatusConfirming); err != nil || st != core.StatusConfirming {
		t.Fatalf("the retried decision = %v, %v; want confirming (found made)", st, err)
	}
}
