package core_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/placement"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
)

// Recovery worker processes: the test binary runs itself with recoveryWorkerEnv set to a JSON
// recoveryWorkerConfig (testenv.StartWorker), and TestMain runs recoveryWorker instead of the
// tests. A worker is a coordinator instance's recovery as a deployment runs it: its own ZooKeeper session (candidate id
// = pid), pool and partitioned Recoverer. Its driver records the transaction's effect (a row of
// effects, written through the fence of the gid's partition with the drive's token, as a
// fenced participant would), then finishes the transaction with Record. It runs until SIGTERM or
// SIGKILL.
const recoveryWorkerEnv = "TXKIT_CORE_RECOVERY_WORKER"

type recoveryWorkerConfig struct {
	PG             string
	Schema         string
	Election       string
	Parts          int
	SessionTimeout time.Duration
}

func recoveryWorker(ctx context.Context, c recoveryWorkerConfig) error {
	log, pool, sess, closeConns, err := zkenv.WorkerConns(ctx, c.PG, c.SessionTimeout)
	if err != nil {
		return err
	}
	defer closeConns()
	l, err := core.New(pool, core.WithSchema(c.Schema), core.WithPartitions(c.Parts), core.WithLease(200*time.Millisecond))
	if err != nil {
		return err
	}
	f, err := fence.New(pool, fence.WithTable(c.Schema, ""))
	if err != nil {
		return err
	}
	resource := "core:" + c.Schema + ".txkit_global"
	pid := os.Getpid()
	drive := core.DriverFunc(func(ctx context.Context, tok lock.Token, t *core.Transaction) error {
		p := placement.Partition(t.GID, c.Parts)
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := f.Check(ctx, tx, leader.PartitionName(resource, p), tok); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `insert into effects (gid, part, epoch, seq, pid) values ($1, $2, $3, $4, $5)`,
				t.GID, p, tok.Epoch, tok.Seq, pid)
			return err
		}); err != nil {
			return err
		}
		return l.Record(ctx, tok, core.Progress{GID: t.GID, From: t.Status, Next: core.StatusConfirmed})
	})
	var names []string
	for p := range c.Parts {
		names = append(names, leader.PartitionName(c.Election, p))
	}
	id := strconv.Itoa(pid)
	r, err := core.NewPartitionedRecoverer(l, func(p int) (lock.Elector, error) {
		return zklock.NewElector(sess, leader.PartitionName(c.Election, p), id)
	}, leader.ContenderMembership(sess.Inspector(), names...), map[core.Kind]core.Driver{core.KindTCC: drive},
		core.WithSchedule("@every 100ms"), core.WithBatchSize(20), core.WithLogger(log))
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// TestIntegrationPartitionedRecoveryAcrossKills: three recovery processes share a log of 12
// partitions; 600 decided transactions arrive in bursts whose starters "died" (nobody finishes
// them but the recovery), while two of the processes are SIGKILLed in turn (one replaced). Every
// transaction ends confirmed; each was driven in its own partition, with that partition's token;
// in each partition's commit order the tokens never go back (no partition led by two processes
// at once). A transaction is driven more than once only when a killed leader had recorded its
// effect without its end: the number of such repeats is logged and bounded by the drives in
// flight at the kills.
func TestIntegrationPartitionedRecoveryAcrossKills(t *testing.T) {
	s := testenv.PG(t)
	ctx := t.Context()
	l, err := core.New(s.Pool, core.WithSchema(s.Name), core.WithPartitions(12), core.WithLease(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `create table effects (id bigserial primary key, gid text not null, part int not null,
		epoch bigint not null, seq bigint not null, pid int not null, at timestamptz not null default clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	cfg := recoveryWorkerConfig{PG: s.URL, Schema: s.Name, Election: testenv.ZKRoot(t) + "/recovery", Parts: 12,
		SessionTimeout: 2 * time.Second}
	workers := []*testenv.Worker{testenv.StartWorker(t, recoveryWorkerEnv, cfg, "recovery worker: "), testenv.StartWorker(t, recoveryWorkerEnv, cfg, "recovery worker: "), testenv.StartWorker(t, recoveryWorkerEnv, cfg, "recovery worker: ")}

	const total = 600
	create := func(from, to int) {
		for i := from; i < to; i++ {
			// Recorded as decided: its starter's lease (200 ms) passes and the recovery finishes it.
			if err := l.CreateIn(ctx, fmt.Sprintf("g%04d", i), core.KindTCC, core.StatusConfirming, time.Hour, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	confirmed := func() int {
		var n int
		if err := s.Pool.QueryRow(ctx, `select count(*) from txkit_global where status = 'confirmed'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testenv.KillDrill(t, workers, func() *testenv.Worker {
		return testenv.StartWorker(t, recoveryWorkerEnv, cfg, "recovery worker: ")
	}, create, confirmed, total)

	// Each effect in its gid's partition; tokens never go back in a partition's commit order.
	rows, err := s.Pool.Query(ctx, `select gid, part, epoch, seq, pid from effects order by part, id`)
	if err != nil {
		t.Fatal(err)
	}
	last := map[int]lock.Token{}
	drives := map[string]int{}
	var gid string
	var part, pid int
	var tok lock.Token
	if _, err := pgx.ForEachRow(rows, []any{&gid, &part, &tok.Epoch, &tok.Seq, &pid}, func() error {
		if want := placement.Partition(gid, 12); part != want {
			t.Errorf("%s driven in partition %d, its partition is %d", gid, part, want)
		}
		if tok.Less(last[part]) {
			t.Errorf("partition %d: %s driven with token %s after a drive with %s", part, gid, tok, last[part])
		}
		last[part] = tok
		drives[gid]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var repeats int
	for g, n := range drives {
		if n > 1 {
			repeats += n - 1
			t.Logf("%s driven %d times (a killed leader's drive not recorded)", g, n)
		}
	}
	if len(drives) != total {
		t.Errorf("%d transactions driven, want %d", len(drives), total)
	}
	// A repeat needs a drive in flight at a kill: at most batch (20) per partition the killed led.
	if repeats > 2*12*20 {
		t.Errorf("%d repeated drives after 2 kills", repeats)
	}
	t.Logf("%d transactions confirmed by 3 recovery processes (2 SIGKILLed, 1 started) over 12 partitions; %d repeated drives", total, repeats)
}

// TestIntegrationPartitionsRefusedWhenChanged: the number of partitions is stored when a
// recoverer first runs; a recoverer with another number is refused with ErrInvalidOption, and so
// is an unpartitioned one.
func TestIntegrationPartitionsRefusedWhenChanged(t *testing.T) {
	s := testenv.PG(t)
	ctx := t.Context()
	d := map[core.Kind]core.Driver{core.KindTCC: core.DriverFunc(func(context.Context, lock.Token, *core.Transaction) error { return nil })}
	newRec := func(parts int) *core.Recoverer {
		l, err := core.New(s.Pool, core.WithSchema(s.Name), core.WithPartitions(parts))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		base := testenv.ZKRoot(t) + "/p" + strconv.Itoa(parts)
		if parts == 1 {
			r, err := core.NewRecoverer(l, elector(t, base, "a"), d)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		r, err := core.NewPartitionedRecoverer(l, func(p int) (lock.Elector, error) {
			return elector(t, leader.PartitionName(base, p), "a"), nil
		}, nil, d)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	first := newRec(4)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- first.Run(rctx) }()
	var stored int
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		err := s.Pool.QueryRow(ctx, `select partitions from txkit_partitions`).Scan(&stored)
		return err == nil
	}, "the number of partitions is not stored")
	if stored != 4 {
		t.Fatalf("stored %d partitions, want 4", stored)
	}
	for _, parts := range []int{8, 1} {
		err := newRec(parts).Run(ctx)
		if !errors.Is(err, core.ErrInvalidOption) || !strings.Contains(err.Error(), "recovered with 4") {
			t.Fatalf("Run with %d partitions = %v, want ErrInvalidOption naming the stored 4", parts, err)
		}
		t.Logf("%d partitions: %v", parts, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	// NewRecoverer refuses a partitioned log.
	l, err := core.New(s.Pool, core.WithSchema(s.Name), core.WithPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.NewRecoverer(l, elector(t, testenv.ZKRoot(t)+"/x", "a"), d); !errors.Is(err, core.ErrInvalidOption) {
		t.Fatalf("NewRecoverer on a partitioned log = %v, want ErrInvalidOption", err)
	}
}

// TestIntegrationPartitionedConcurrencyIsShared: one recoverer leading all 4 partitions drives
// at most WithConcurrency transactions at once across them, not that many per partition.
func TestIntegrationPartitionedConcurrencyIsShared(t *testing.T) {
	ctx := t.Context()
	l := newLog(t, core.WithPartitions(4), core.WithLease(100*time.Millisecond))
	var mu sync.Mutex
	var now, peak, driven int
	drive := core.DriverFunc(func(ctx context.Context, tok lock.Token, tx *core.Transaction) error {
		mu.Lock()
		now++
		peak = max(peak, now)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // a participant call
		mu.Lock()
		now--
		driven++
		mu.Unlock()
		return l.Record(ctx, tok, core.Progress{GID: tx.GID, From: tx.Status, Next: core.StatusConfirmed})
	})
	base := testenv.ZKRoot(t) + "/conc"
	sess, err := zklock.NewSession(ctx, testenv.ZK(t), zklock.WithSessionTimeout(3*time.Second), zklock.WithLogger(testLogger(t)), zkenv.Auth(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	r, err := core.NewPartitionedRecoverer(l, func(p int) (lock.Elector, error) {
		return zklock.NewElector(sess, leader.PartitionName(base, p), "a")
	}, nil, map[core.Kind]core.Driver{core.KindTCC: drive}, core.WithConcurrency(2), core.WithSchedule("@every 100ms"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if err := l.CreateIn(ctx, fmt.Sprintf("g%02d", i), core.KindTCC, core.StatusConfirming, time.Hour, nil); err != nil {
			t.Fatal(err)
		}
	}
	run(t, r.Run)
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return driven >= 40
	}, "the transactions were not driven")
	mu.Lock()
	defer mu.Unlock()
	if peak > 2 {
		t.Fatalf("%d drives at once across the partitions, want at most 2", peak)
	}
	t.Logf("40 transactions over 4 partitions driven with at most %d at once", peak)
}

// BenchmarkPartitionedRecovery measures how recovery capacity grows with instances: a backlog of
// 1500 decided transactions, 12 partitions, 1 to 3 instances (each its own ZooKeeper session,
// balanced by ContenderCount) driving at most 4 at once each, every drive waiting 20 ms as a
// remote participant call would. One leader is capped at 4 / 20 ms = 200 tx/s; N instances lead
// about 12/N partitions each, with 4 slots each. Timed from the backlog's creation to its last
// confirmation (including the first leaders' election).
func BenchmarkPartitionedRecovery(b *testing.B) {
	for _, instances := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("instances=%d", instances), func(b *testing.B) {
			var total time.Duration
			for range b.N {
				total += partitionedRecoveryRun(b, instances)
			}
			b.ReportMetric(float64(benchBacklog*b.N)/total.Seconds(), "tx/s")
		})
	}
}

// benchBacklog is the number of transactions BenchmarkPartitionedRecovery recovers per run.
const benchBacklog = 1500

func partitionedRecoveryRun(b *testing.B, instances int) time.Duration {
	ctx := b.Context()
	s := testenv.PG(b)
	l, err := core.New(s.Pool, core.WithSchema(s.Name), core.WithPartitions(12), core.WithLease(time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	drive := core.DriverFunc(func(ctx context.Context, tok lock.Token, tx *core.Transaction) error {
		select { // a participant call elsewhere
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		return l.Record(ctx, tok, core.Progress{GID: tx.GID, From: tx.Status, Next: core.StatusConfirmed})
	})
	base := testenv.ZKRoot(b) + "/bench"
	paths := make([]string, 12)
	for p := range paths {
		paths[p] = leader.PartitionName(base, p)
	}
	gids := make([]string, benchBacklog)
	for i := range gids {
		gids[i] = fmt.Sprintf("g%04d", i)
	}
	start := time.Now()
	if _, err := s.Pool.Exec(ctx, `insert into txkit_global (gid, kind, status, timeout_at, next_retry_at)
		select g, 'tcc', 'confirming', now() + interval '1 hour', now() from unnest($1::text[]) g`, gids); err != nil {
		b.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range instances {
		sess, err := zklock.NewSession(ctx, testenv.ZK(b), zklock.WithSessionTimeout(3*time.Second), zklock.WithLogger(testLogger(b)), zkenv.Auth(b))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sess.Close() })
		id := strconv.Itoa(i)
		r, err := core.NewPartitionedRecoverer(l, func(p int) (lock.Elector, error) { return zklock.NewElector(sess, paths[p], id) },
			leader.ContenderMembership(sess.Inspector(), paths...), map[core.Kind]core.Driver{core.KindTCC: drive},
			core.WithConcurrency(4), core.WithSchedule("@every 100ms"), core.WithBatchSize(20))
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			if err := r.Run(rctx); err != nil {
				b.Errorf("Run: %v", err)
			}
		})
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	testenv.Eventually(b, 120*time.Second, 10*time.Millisecond, func() bool {
		var n int
		if err := s.Pool.QueryRow(ctx, `select count(*) from txkit_global where status = 'confirmed'`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n == len(gids)
	}, "the backlog was not recovered")
	return time.Since(start)
}
