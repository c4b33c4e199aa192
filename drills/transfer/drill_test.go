package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/drills/internal/drilltest"
	fencing "github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/pglock"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

func config(t *testing.T) Config {
	return Config{
		Instances: 2, Concurrency: 8, PauseAt: "both",
		PG: testenv.PGURL(t), ZK: strings.Join(testenv.ZK(t), ","),
		Dir: t.TempDir(), Log: t.Output(),
	}
}

// TestIntegrationTransferDemo: the script on two bank instances — three transfers committed in
// both databases, two refused for insufficient funds, one to a missing account rolled back — with
// the balances it should leave, money conserved and no prepared transaction left.
func TestIntegrationTransferDemo(t *testing.T) {
	cfg := config(t)
	rep := drilltest.Run(t, 2*time.Minute, Run, cfg)
	if rep.Globals["committed"] != 3 || rep.NotInLog != 3 {
		t.Fatalf("log: %v and %d transfers not in it; want 3 committed and 3 never recorded", rep.Globals, rep.NotInLog)
	}
}

// TestIntegrationTransferDrill: 200 transfers on two bank instances, a fifth of the commits
// pausing a second between the phases, the leader SIGKILLed twice, each time while it holds a
// transfer between the phases when one comes within 5s: the invariants hold, each kill is followed
// by the next leader's recovery, and the prepared transactions a dead leader left all end. Once
// with the decision written between the phases, once with vote markers (-votes: the leader
// settles what a dead starter left voting from the votes).
func TestIntegrationTransferDrill(t *testing.T) {
	for _, votes := range []bool{false, true} {
		t.Run(map[bool]string{false: "decision", true: "votes"}[votes], func(t *testing.T) {
			cfg := config(t)
			cfg.Transfers, cfg.Rate, cfg.Drill, cfg.Kills, cfg.KillEvery = 200, 8, true, 2, time.Second
			cfg.PauseRate, cfg.Pause, cfg.Votes = 0.2, time.Second, votes
			rep := drilltest.Run(t, 3*time.Minute, Run, cfg)
			if rep.LeaderKills != cfg.Kills || len(rep.Failovers) != cfg.Kills {
				t.Fatalf("%d leader kills, %d failovers measured; want %d each", rep.LeaderKills, len(rep.Failovers), cfg.Kills)
			}
			stranded := 0
			for _, n := range rep.InDoubt {
				stranded += n
			}
			if stranded == 0 {
				t.Fatalf("no kill left a transfer between the phases (in doubt per kill: %v)", rep.InDoubt)
			}
			if len(rep.InDoubtEnd) == 0 || rep.InDoubtEnd["not in the log"] > 0 {
				t.Fatalf("outcomes of the transfers left in doubt: %v", rep.InDoubtEnd)
			}
		})
	}
}

// TestIntegrationTransferDemo3PC: the script with -protocol 3pc and an agent beside each
// database: the same answers and balances as two-phase commit — the refusals now come from the
// CanCommit checks, before anything was executed, so those transfers never reach the log.
func TestIntegrationTransferDemo3PC(t *testing.T) {
	cfg := config(t)
	cfg.Protocol = "3pc"
	rep := drilltest.Run(t, 2*time.Minute, Run, cfg)
	if rep.Globals["committed"] != 3 || rep.NotInLog != 3 {
		t.Fatalf("log: %v and %d transfers not in it; want 3 committed and 3 never recorded", rep.Globals, rep.NotInLog)
	}
}

// TestIntegrationTransferDrill3PC: the short 3PC drill in consult-log mode: 150 transfers on two
// bank instances, a fifth of the commits pausing a second between the phases, the leader
// SIGKILLed twice while it holds a transfer there; then two partition trials (the banks' link
// to txkit_west partitioned right after a PREPARE reached it). The invariants hold — money
// conserved, every transfer on both sides or on neither, nothing left prepared — the agents end
// what the dead leaders left (the blocking figure is reported), and no partition trial ends
// committed on one side only.
func TestIntegrationTransferDrill3PC(t *testing.T) {
	cfg := config(t)
	cfg.Protocol, cfg.Termination, cfg.Partitions, cfg.ParticipantTimeout = "3pc", "consult-log", 2, 3*time.Second
	cfg.Transfers, cfg.Rate, cfg.Drill, cfg.Kills, cfg.KillEvery = 150, 8, true, 2, time.Second
	cfg.PauseRate, cfg.Pause = 0.2, time.Second
	rep := drilltest.Run(t, 3*time.Minute, Run, cfg)
	if rep.LeaderKills != cfg.Kills {
		t.Fatalf("%d leader kills; want %d", rep.LeaderKills, cfg.Kills)
	}
	stranded := 0
	for _, n := range rep.InDoubt {
		stranded += n
	}
	if stranded == 0 || len(rep.Blocking) != stranded {
		t.Fatalf("%d transfers left in doubt by the kills (%v), %d blocking times measured; want some, one each", stranded, rep.InDoubt, len(rep.Blocking))
	}
	t.Logf("blocking after a leader kill, 3pc consult-log: p50 %v, p99 %v over %d transfers (participant timeout %v)",
		rep.BlockingP(50), rep.BlockingP(99), len(rep.Blocking), cfg.ParticipantTimeout)
	if rep.Partitioned != cfg.Partitions || rep.PartitionEnds["aborted on both sides"] != cfg.Partitions {
		t.Fatalf("%d of %d trials partitioned, ended %v; want every one partitioned and aborted on both sides", rep.Partitioned, cfg.Partitions, rep.PartitionEnds)
	}
	if rep.Anomalies != 0 || rep.AgainstLog != 0 {
		t.Fatalf("consult-log: %d one-sided transfers, %d against the log; want none", rep.Anomalies, rep.AgainstLog)
	}
}

// TestIntegrationTransferPartitionsTextbook: three partition trials with the agents in textbook
// mode. The coordinator aborts each transfer (its PreCommit to west timed out), and west's
// agent, hearing nothing within its timeout, commits what it prepared: the documents' anomaly,
// a transfer committed in west and aborted in east. The count is reported, not asserted to be
// zero, and must be what the ledgers show (the trials' own classification agrees with the
// checks'); the report's checks account for it and hold otherwise.
func TestIntegrationTransferPartitionsTextbook(t *testing.T) {
	cfg := config(t)
	cfg.Protocol, cfg.Termination, cfg.Partitions = "3pc", "textbook", 3
	rep := drilltest.Run(t, 2*time.Minute, Run, cfg)
	oneSided := rep.PartitionEnds["committed in west only"] + rep.PartitionEnds["committed in east only"]
	t.Logf("textbook partition anomalies: %d of %d trials (%d partitioned) ended committed on one side and aborted on the other; ends %v",
		rep.Anomalies, rep.PartitionTrials, rep.Partitioned, rep.PartitionEnds)
	if rep.Anomalies != oneSided {
		t.Fatalf("the checks count %d one-sided transfers, the trials %d (%v)", rep.Anomalies, oneSided, rep.PartitionEnds)
	}
	if rep.Created != int64(rep.PartitionEnds["committed in west only"]-rep.PartitionEnds["committed in east only"]) {
		t.Fatalf("the one-sided transfers moved %d; want +1 per west-only and -1 per east-only end (%v)", rep.Created, rep.PartitionEnds)
	}
	if rep.Partitioned == 0 {
		t.Fatalf("no trial partitioned (%d trials)", rep.PartitionTrials)
	}
}

// TestIntegrationDisruptivePGFailover is the short form of `make drill-pg-failover`: 300 transfers
// with vote markers on two bank instances whose databases are on the HA PostgreSQL
// (deploy/local/pg-ha, synchronous_mode), its primary SIGKILLed once mid-load (Patroni and
// postmaster): a standby is promoted, the banks' pools reconnect to it, the prepared transactions
// moved with it are resolved, and every invariant holds — money conserved, every transfer on both
// sides or neither, no prepared transaction left, no global transaction unfinished. Beside the
// load, two pglock holds taken on the HA PostgreSQL before the kill: the lease Mutex's (TTL 30 s,
// a committed row) is still held after the failover, and released cleanly; the AdvisoryMutex's (a
// session lock, gone with the old primary's session) is reported lost (lock.ErrLockLost); another
// client then takes the advisory lock, and the fence refuses the write the old holder makes with
// its token (lock.ErrFenced) after the new holder has written. And a notifier whose table is on
// the HA PostgreSQL delivers, through the failover, every notification enqueued at 20 a second
// from before the kill to after it (an enqueue that failed is retried with its key): each one
// delivered, applied once by the receiver, none lost.
func TestIntegrationDisruptivePGFailover(t *testing.T) {
	cfg := config(t)
	cfg.PG = testenv.PGHAURL(t)
	cfg.Transfers, cfg.Rate, cfg.Votes = 300, 30, true
	cfg.PGFailovers, cfg.KillEvery = 1, 3*time.Second

	s := testenv.PGHA(t)
	ctx := t.Context()
	locks, err := pglock.New(s.Pool, pglock.WithTTL(30*time.Second), pglock.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locks.Close() })
	if err := locks.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err := locks.NewMutex("lease-" + s.Name)
	if err != nil {
		t.Fatal(err)
	}
	leaseHold, err := lease.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	adv, err := locks.NewAdvisoryMutex("advisory-" + s.Name)
	if err != nil {
		t.Fatal(err)
	}
	advHold, err := adv.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The holder writes through the fence before the failover: its token is on record (and with it
	// the sequence value behind it: the fence's commit waited for the synchronous standby, and WAL
	// is in order, so the new primary's sequence is past it).
	f, err := fencing.New(s.Pool, fencing.WithTable(s.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	fenced := func(tok lock.Token) error {
		return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error { return f.Check(ctx, tx, "advisory-resource", tok) })
	}
	if err := fenced(advHold.Token()); err != nil {
		t.Fatalf("the advisory holder's fenced write before the failover: %v", err)
	}
	nw := newNotifyWorld(t, s)
	stopEnqueue := nw.enqueueEvery(50 * time.Millisecond)

	rep := drilltest.Run(t, 4*time.Minute, Run, cfg)
	keys := stopEnqueue()
	if len(rep.PGFailovers) != 1 {
		t.Fatalf("%d PostgreSQL failovers measured, want 1", len(rep.PGFailovers))
	}
	if f := rep.PGFailovers[0]; f.Unavailable <= 0 || f.Promoted == f.Node {
		t.Fatalf("failover %+v: no new primary took writes", f)
	}
	select {
	case <-advHold.Done():
		if err := advHold.Err(); !errors.Is(err, lock.ErrLockLost) {
			t.Fatalf("the advisory hold ended with %v, want ErrLockLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the advisory hold, whose session died with the old primary, is not reported lost")
	}
	if err := leaseHold.Err(); err != nil {
		t.Fatalf("the lease hold (TTL 30 s) ended in the failover: %v", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("releasing the lease after the failover: %v", err)
	}
	_ = adv.Unlock(ctx)

	// Another holder takes the advisory lock the failover released and writes; the old holder,
	// unaware, writes with its token: refused.
	adv2, err := locks.NewAdvisoryMutex("advisory-" + s.Name)
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	newHold, err := adv2.Lock(lctx)
	if err != nil {
		t.Fatalf("another client taking the advisory lock after the failover: %v", err)
	}
	defer func() { _ = adv2.Unlock(context.WithoutCancel(ctx)) }()
	if old, cur := advHold.Token(), newHold.Token(); cur.Compare(old) <= 0 {
		t.Fatalf("the new holder's token %s is not above the old holder's %s", cur, old)
	}
	if err := fenced(newHold.Token()); err != nil {
		t.Fatalf("the new advisory holder's fenced write: %v", err)
	}
	if err := fenced(advHold.Token()); !errors.Is(err, lock.ErrFenced) {
		t.Fatalf("the old advisory holder's fenced write after the failover: %v, want lock.ErrFenced", err)
	}
	nw.allDelivered(keys, 60*time.Second)
}
