package leader_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
)

// Shard worker processes: the test binary runs itself with shardWorkerEnv set to a JSON
// shardWorkerConfig (testenv.StartWorker), and TestMain runs shardWorker instead of the tests. A
// worker is an instance as a deployment runs it: its own ZooKeeper session (its candidate id is its pid), its
// own pool, a leader.Shards whose work writes a row through the fence of its partition every
// 50 ms. It runs until SIGTERM (then it resigns and exits 0) or SIGKILL.
const shardWorkerEnv = "TXKIT_LEADER_SHARD_WORKER"

type shardWorkerConfig struct {
	PG             string // its search_path is the test's schema (the fence and writes tables)
	Election       string // base path of the partitions' elections
	Parts          int
	SessionTimeout time.Duration
}

// shardResource is the fence resource of the workers' partitions.
const shardResource = "shard-test"

func shardWorker(ctx context.Context, c shardWorkerConfig) error {
	log, pool, sess, closeConns, err := zkenv.WorkerConns(ctx, c.PG, c.SessionTimeout)
	if err != nil {
		return err
	}
	defer closeConns()
	f, err := fence.New(pool)
	if err != nil {
		return err
	}
	id := strconv.Itoa(os.Getpid())
	var names []string
	for p := range c.Parts {
		names = append(names, leader.PartitionName(c.Election, p))
	}
	s, err := leader.NewShards(c.Parts, func(p int) (lock.Elector, error) {
		return zklock.NewElector(sess, leader.PartitionName(c.Election, p), id)
	}, pool, f, shardResource, func(ctx context.Context, t *leader.Term) error {
		return writeLoop(ctx, pool, f, t, os.Getpid())
	}, leader.WithMembership(leader.ContenderMembership(sess.Inspector(), names...)),
		leader.WithBalanceEvery(200*time.Millisecond), leader.WithPause(300*time.Millisecond),
		leader.WithLogger(log), leader.WithName("shard worker"))
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// writeLoop records a write of the term's partition through its fence every 50 ms until ctx ends
// or the fence refuses one.
func writeLoop(ctx context.Context, pool *pgxpool.Pool, f *fence.Fence, t *leader.Term, pid int) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := f.Check(ctx, tx, leader.PartitionName(shardResource, t.Partition()), t.Token()); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `insert into writes (part, epoch, seq, pid) values ($1, $2, $3, $4)`,
				t.Partition(), t.Token().Epoch, t.Token().Seq, pid)
			return err
		})
		if errors.Is(err, lock.ErrFenced) {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// shardRun is a run of shard worker processes over parts partitions, recording their fenced
// writes in the table writes of db.
type shardRun struct {
	t     *testing.T
	db    *testenv.Schema
	parts int
	cfg   shardWorkerConfig
}

// newShardRun creates the fence and writes tables in a schema of the test's.
func newShardRun(t *testing.T, parts int, sessionTimeout time.Duration) *shardRun {
	db := testenv.PG(t)
	migratedFence(t, db) // the workers fence their writes in it
	if _, err := db.Pool.Exec(t.Context(), `create table writes (id bigserial primary key, part int not null,
		epoch bigint not null, seq bigint not null, pid int not null, at timestamptz not null default clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	return &shardRun{t: t, db: db, parts: parts, cfg: shardWorkerConfig{PG: db.URL, Election: testenv.ZKRoot(t) + "/shards",
		Parts: parts, SessionTimeout: sessionTimeout}}
}

func (r *shardRun) start() *testenv.Worker {
	return testenv.StartWorker(r.t, shardWorkerEnv, r.cfg, "shard worker: ")
}

// now returns PostgreSQL's clock, the clock of the writes.
func (r *shardRun) now() time.Time {
	var at time.Time
	if err := r.db.Pool.QueryRow(r.t.Context(), `select clock_timestamp()`).Scan(&at); err != nil {
		r.t.Fatal(err)
	}
	return at
}

// leaders returns, per partition written in the last 300 ms, the pid of its latest write.
func (r *shardRun) leaders() map[int]int {
	rows, err := r.db.Pool.Query(r.t.Context(), `select distinct on (part) part, pid from writes
		where at > clock_timestamp() - interval '300 milliseconds' order by part, id desc`)
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[int]int{}
	var part, pid int
	if _, err := pgx.ForEachRow(rows, []any{&part, &pid}, func() error { out[part] = pid; return nil }); err != nil {
		r.t.Fatal(err)
	}
	return out
}

// balanced waits until every partition is written by one of live, each leading its share, and
// returns who writes which.
func (r *shardRun) balanced(live ...*testenv.Worker) map[int]int {
	r.t.Helper()
	share := (r.parts + len(live) - 1) / len(live)
	var last map[int]int
	start := time.Now()
	testenv.Eventually(r.t, 60*time.Second, 100*time.Millisecond, func() bool {
		last = r.leaders()
		per := map[int]int{}
		for _, pid := range last {
			per[pid]++
		}
		if len(last) != r.parts {
			return false
		}
		for _, p := range live {
			if per[p.Pid] == 0 || per[p.Pid] > share {
				return false
			}
		}
		return len(per) == len(live)
	}, "partitions not balanced over %d workers: %v", len(live), &last)
	r.t.Logf("%d worker(s): balanced in %v: %v", len(live), time.Since(start).Round(time.Millisecond), last)
	return last
}

// TestIntegrationShardsBalanceTakeoverAndExclusion runs shard worker processes (P = 12, ZooKeeper
// session timeout 2 s) and checks, from the fenced writes they record:
//   - balance: one worker leads all 12; a second joins → 6 and 6; a third → 4, 4, 4;
//   - takeover: a SIGKILLed worker's partitions are written by the others within the session
//     timeout + 1 s of the kill (the times are logged), and the two left lead 6 and 6;
//   - a worker that leaves with SIGTERM hands its partitions over; the last one leads all 12;
//   - exclusion: in each partition's commit order the tokens never go back, and each token
//     belongs to one process — no partition was written by two leaders at once.
func TestIntegrationShardsBalanceTakeoverAndExclusion(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: not run under -short")
	}
	ctx := t.Context()
	const parts = 12
	const sessionTimeout = 2 * time.Second
	r := newShardRun(t, parts, sessionTimeout)
	db, leaders, balanced := r.db, r.leaders, r.balanced

	a := r.start()
	balanced(a)
	b := r.start()
	balanced(a, b)
	c := r.start()
	balanced(a, b, c)

	// SIGKILL b: its partitions must be written by a or c within the session timeout + 1 s.
	before := leaders()
	var killedParts []int
	for p, pid := range before {
		if pid == b.Pid {
			killedParts = append(killedParts, p)
		}
	}
	slices.Sort(killedParts)
	b.Kill()
	killedAt := r.now()
	balanced(a, c)
	var worst time.Duration
	for _, p := range killedParts {
		var first time.Time
		if err := db.Pool.QueryRow(ctx, `select min(at) from writes where part = $1 and pid <> $2 and at > $3`,
			p, b.Pid, killedAt).Scan(&first); err != nil {
			t.Fatal(err)
		}
		d := first.Sub(killedAt)
		worst = max(worst, d)
		t.Logf("partition %d: taken over %v after the SIGKILL", p, d.Round(time.Millisecond))
	}
	if worst > sessionTimeout+time.Second {
		t.Errorf("takeover after a SIGKILL took up to %v, more than the session timeout %v + 1 s", worst, sessionTimeout)
	}
	t.Logf("SIGKILL: %d partitions taken over within %v (session timeout %v)", len(killedParts), worst.Round(time.Millisecond), sessionTimeout)

	// c leaves in order (SIGTERM: it resigns), then a leads everything.
	if err := c.Stop(); err != nil {
		t.Fatalf("worker c: %v", err)
	}
	balanced(a)
	if err := a.Stop(); err != nil {
		t.Fatalf("worker a: %v", err)
	}

	// Exclusion: per partition, in commit order (the fence row lock orders a partition's writes,
	// and id is taken after it), tokens never go back and each token is one process's.
	rows, err := db.Pool.Query(ctx, `select part, epoch, seq, pid from writes order by part, id`)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		part int
		tok  lock.Token
	}
	owner := map[key]int{}
	last := map[int]lock.Token{}
	var n, terms int
	var part, pid int
	var tok lock.Token
	if _, err := pgx.ForEachRow(rows, []any{&part, &tok.Epoch, &tok.Seq, &pid}, func() error {
		n++
		if tok.Less(last[part]) {
			t.Errorf("partition %d: a write with token %s after one with %s", part, tok, last[part])
		}
		last[part] = tok
		k := key{part, tok}
		if o, ok := owner[k]; ok && o != pid {
			t.Errorf("partition %d: token %s used by processes %d and %d", part, tok, o, pid)
		} else if !ok {
			owner[k] = pid
			terms++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d fenced writes in %d terms over %d partitions: no token went back, none shared by two processes", n, terms, parts)
}

// TestIntegrationContenderMembershipStrangerCannotJoin: ContenderMembership counts every
// contender of the partitions' elections, so a stranger who could add a node there would inflate
// the member count (and hold partitions). The sessions' digest credentials make the election
// paths, and their parent, creator-only: a connection without them can add no contender, in an
// election that exists or one that does not yet, and the count stays at the one real member.
func TestIntegrationContenderMembershipStrangerCannotJoin(t *testing.T) {
	t.Parallel()
	servers := testenv.ZK(t)
	base := testenv.ZKRoot(t) + "/shards"
	names := []string{leader.PartitionName(base, 0), leader.PartitionName(base, 1)}
	sess := zkenv.Session(t) // the digest user of TXKIT_ZK_AUTH
	el, err := zklock.NewElector(sess, names[0], "member-a")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	lead, err := el.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lead.Resign(context.WithoutCancel(ctx)) }()
	m := leader.ContenderMembership(sess.Inspector(), names...)

	stranger, _, err := zk.Connect(servers, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	contender := "/_c_" + uuid.NewString() + "-lock-"
	for _, p := range []string{names[0] + contender, names[1]} {
		if _, err := stranger.Create(p, []byte("intruder"), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("stranger's create of %s = %v, want ErrNoAuth", p, err)
		}
	}
	open, err := zklock.NewSession(ctx, servers, zklock.WithInsecureWorldACL(), zklock.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	intruder, err := zklock.NewElector(open, names[0], "intruder")
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(ctx, 3*time.Second) // on an open path it would queue
	defer ccancel()
	if _, err := intruder.Campaign(cctx); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("Campaign without credentials = %v, want ErrNoAuth", err)
	}
	if n, err := m.Members(ctx); err != nil || n != 1 {
		t.Fatalf("Members = %d, %v; want 1 (the stranger is not counted)", n, err)
	}
}

// TestIntegrationShardsCrashStallsOnlyItsPartitions: three workers share 12 partitions; one is
// SIGKILLed and a replacement starts at once, before the dead one's ZooKeeper session expires.
// From the fenced writes (each led partition every 50 ms), from the kill until the three are
// balanced again: the partitions left unwritten for more than a second are the dead worker's
// only — nobody gave a partition up for the newcomer while the dead one still counted, so none
// went to the dead one's place in its election queue.
func TestIntegrationShardsCrashStallsOnlyItsPartitions(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: not run under -short")
	}
	const parts, stall = 12, time.Second
	r := newShardRun(t, parts, 2*time.Second)
	a := r.start()
	r.balanced(a)
	b := r.start()
	r.balanced(a, b)
	c := r.start()
	before := r.balanced(a, b, c)
	var dead []int
	for p, pid := range before {
		if pid == b.Pid {
			dead = append(dead, p)
		}
	}
	slices.Sort(dead)
	b.Kill()
	killedAt := r.now()
	d := r.start()
	r.balanced(a, c, d)

	// Every gap of more than a second between a partition's writes since the kill.
	rows, err := r.db.Pool.Query(t.Context(), `select part, prev, at from (
		select part, at, lag(at) over (partition by part order by at) as prev from writes where at > $1::timestamptz - interval '1 second') w
		where at - prev > make_interval(secs => $2) order by prev`, killedAt, stall.Seconds())
	if err != nil {
		t.Fatal(err)
	}
	var stalled []int
	var part int
	var from, to time.Time
	if _, err := pgx.ForEachRow(rows, []any{&part, &from, &to}, func() error {
		t.Logf("partition %d unwritten from %v to %v after the SIGKILL", part,
			from.Sub(killedAt).Round(time.Millisecond), to.Sub(killedAt).Round(time.Millisecond))
		if !slices.Contains(stalled, part) {
			stalled = append(stalled, part)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(stalled)
	if len(stalled) == 0 {
		t.Fatalf("no partition unwritten for %v after the SIGKILL of the worker leading %v", stall, dead)
	}
	for _, p := range stalled {
		if !slices.Contains(dead, p) {
			t.Errorf("partition %d, not the dead worker's, was unled for more than %v", p, stall)
		}
	}
	t.Logf("dead worker led %v; partitions unled for more than %v: %v", dead, stall, stalled)
}
