package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/testkit/mqtest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

// Relay worker processes: the test binary runs itself with relayWorkerEnv set to a JSON
// relayWorkerConfig, and TestMain (main_test.go) runs runRelayWorker instead of the tests. A worker
// is a relay as a deployment runs it: its own ZooKeeper session and elector (its id is its pid),
// its own RocketMQ publisher and pool. It relays until SIGTERM (then it resigns and exits 0) or
// SIGKILL.
const relayWorkerEnv = "TXKIT_OUTBOX_RELAY_WORKER"

// relayWorkerConfig is what a relay worker needs besides the servers' addresses, which it reads
// from the TXKIT_* variables it inherits.
type relayWorkerConfig struct {
	PG             string        // connection URL; its search_path is the test's schema
	Schema         string        // the outbox's schema (outbox.WithTable)
	Election       string        // the ZooKeeper election path
	Batch          int           // outbox.WithSchedule's batch
	SessionTimeout time.Duration // the ZooKeeper session timeout
	Partitions     int           // > 0: outbox.WithPartitions, elections Election/p<i>, balanced
}

func runRelayWorker(cfg string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var c relayWorkerConfig
	err := json.Unmarshal([]byte(cfg), &c)
	if err == nil {
		err = relayWorker(ctx, c)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "relay worker %d: %v\n", os.Getpid(), err)
		return 1
	}
	return 0
}

func relayWorker(ctx context.Context, c relayWorkerConfig) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("pid", os.Getpid())
	pool, err := pgxpool.New(ctx, c.PG)
	if err != nil {
		return err
	}
	defer pool.Close()
	sess, err := zklock.NewSession(ctx, strings.Split(os.Getenv(testenv.EnvZK), ","),
		zklock.WithSessionTimeout(c.SessionTimeout), zklock.WithLogger(log), zklock.WithDigestAuth(zkenv.Digest()))
	if err != nil {
		return err
	}
	defer sess.Close()
	pub, err := rocketmq.NewPublisher(ctx, strings.Split(os.Getenv(testenv.EnvNamesrv), ","), rocketmq.WithLogger(log))
	if err != nil {
		return err
	}
	defer pub.Close()
	id := strconv.Itoa(os.Getpid())
	opts := []outbox.RelayOption{outbox.WithSchedule("@every 1s", c.Batch), outbox.WithLogger(log)}
	obOpts := []outbox.Option{outbox.WithTable(c.Schema, "")}
	if c.Partitions > 0 {
		obOpts = append(obOpts, outbox.WithPartitions(c.Partitions))
		paths := partitionElections(c.Election, c.Partitions)
		opts = append(opts, outbox.WithElectors(func(p int) (lock.Elector, error) { return zklock.NewElector(sess, paths[p], id) },
			outbox.ContenderCount(sess.Inspector(), paths...)))
	} else {
		el, err := zklock.NewElector(sess, c.Election, id)
		if err != nil {
			return err
		}
		opts = append(opts, outbox.WithElector(el))
	}
	ob, err := outbox.New(pool, obOpts...)
	if err != nil {
		return err
	}
	// The relay fences its writes with the txkit_fence table of Schema (its default fence).
	r, err := outbox.NewRelay(ob, pub, opts...)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// partitionElections returns the election paths of parts partitions under base.
func partitionElections(base string, parts int) []string {
	paths := make([]string, parts)
	for p := range paths {
		paths[p] = base + "/p" + strconv.Itoa(p)
	}
	return paths
}

// relayProc is a running relay worker process.
type relayProc struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // cmd.Wait's result; read it after done is closed
}

// startRelayWorker starts a relay worker. When the test ends, a worker still running gets SIGTERM
// and must exit cleanly.
func startRelayWorker(tb testing.TB, c relayWorkerConfig) *relayProc {
	tb.Helper()
	cfg, err := json.Marshal(c)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), relayWorkerEnv+"="+string(cfg))
	if os.Getenv("ROCKETMQ_GO_LOG_LEVEL") == "" {
		// rocketmq-client-go's process-wide logger reads this at start; its default is info.
		cmd.Env = append(cmd.Env, "ROCKETMQ_GO_LOG_LEVEL=error")
	}
	out := testenv.LogWriter(tb, "relay worker: ")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start relay worker: %v", err)
	}
	p := &relayProc{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait() // also waits for the output to be copied
		close(p.done)
	}()
	tb.Cleanup(func() {
		if err := p.stop(); err != nil {
			tb.Errorf("relay worker %d: %v", p.pid, err)
		}
	})
	return p
}

// exited reports whether the process has exited.
func (p *relayProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the process and returns once it is reaped.
func (p *relayProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop SIGTERMs the process, which resigns and exits, and returns once it is reaped; after 30 s it
// SIGKILLs it. It returns an error when the process did not exit with status 0. A process that
// had already exited (killed, say) is left as it is.
func (p *relayProc) stop() error {
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(30 * time.Second):
		p.kill()
		return errors.New("did not exit within 30s of SIGTERM")
	}
}

// peakRSS returns the process's peak resident set size in bytes. The process must have exited.
func (p *relayProc) peakRSS() int64 {
	ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0
	}
	return ru.Maxrss * 1024 // KiB on Linux
}

// consumerPool returns a pool on url roomy enough for a consumer's transactions, closed when the
// test ends.
func consumerPool(tb testing.TB, url string) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// background runs fn (a Run method) in a goroutine until the returned stop is called or the test
// ends; stop cancels fn's ctx, waits for fn to return and fails the test if it returned an error.
func background(tb testing.TB, what string, fn func(context.Context) error) (stop func()) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					tb.Errorf("%s: Run: %v", what, err)
				}
			case <-time.After(90 * time.Second):
				tb.Errorf("%s: Run did not return within 90s of its ctx ending", what)
			}
		})
	}
	tb.Cleanup(stop)
	return stop
}

// TestIntegrationKeyOrderAcrossRelayFailover: three relay processes share one outbox and one
// election; the test enqueues 20 keys × 50 messages, each carrying its per-key sequence number, in
// bursts, and SIGKILLs the leading relay twice while it is draining. An orderly consumer applies
// each message in a transaction that claims its ID (idempotency.Store) and records (key, seq) with
// an apply-order number. Every (key, seq) is applied exactly once, each key's sequence numbers are
// applied in increasing order, and the outbox ends empty. The killed leaders' unacknowledged
// batches are published again by their successors: those duplicates reach the consumer and are
// suppressed by the claim, never applied out of order.
func TestIntegrationKeyOrderAcrossRelayFailover(t *testing.T) {
	const (
		keys, perKey    = 20, 50
		roundsPerBurst  = 5 // a burst: one transaction, seq s..s+4 for every key
		bursts          = perKey / roundsPerBurst
		total           = keys * perKey
		sessionTimeout  = 2 * time.Second
		workers         = 3
		burstInterval   = 300 * time.Millisecond
		electionTimeout = 30 * time.Second // a kill is noticed within the session timeout
	)
	const warmUp = "warm-up"                    // the key of a message sent before the load
	killAfter := map[int]bool{2: true, 6: true} // bursts after which the leader is killed
	ctx := t.Context()
	pg := testenv.PG(t)
	ob, err := outbox.New(pg.Pool, outbox.WithTable(pg.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil { // also the relays' fence table
		t.Fatal(err)
	}
	topic := testenv.Topic(t)
	zkServers := testenv.ZK(t)
	election := testenv.ZKRoot(t) + "/relay"
	c := appliedConsumer(t, pg, topic)
	stopConsumer := background(t, "consumer", c.Run)

	// The relays, and an observer of their election.
	procs := map[int]*relayProc{}
	for range workers {
		p := startRelayWorker(t, relayWorkerConfig{PG: pg.URL, Schema: pg.Name, Election: election, Batch: 16,
			SessionTimeout: sessionTimeout})
		procs[p.pid] = p
	}
	obsCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	sess, err := zklock.NewSession(obsCtx, zkServers, zklock.WithSessionTimeout(sessionTimeout), zkenv.Auth(t))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	observer, err := zklock.NewElector(sess, election, "observer") // never campaigns
	if err != nil {
		t.Fatal(err)
	}
	// liveLeader waits until the election's leader is a worker that is still running.
	liveLeader := func() *relayProc {
		t.Helper()
		var p *relayProc
		testenv.Eventually(t, electionTimeout, 10*time.Millisecond, func() bool {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			id, err := observer.Leader(lctx)
			if err != nil {
				return false
			}
			pid, _ := strconv.Atoi(id)
			p = procs[pid]
			return p != nil && !p.exited()
		}, "a running relay worker to lead")
		return p
	}
	pending := func() int64 {
		t.Helper()
		p, _, err := ob.Backlog(ctx, pg.Pool)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	// A warm-up message, applied once a relay leads and the consumer has its queues, so that the
	// consumer applies the load while it is relayed.
	warmUpConsumer(t, pg.Pool, ob, topic, warmUp, c)

	// The load, with the two kills.
	var kills []string
	tick := time.NewTicker(burstInterval) // paces the load; orders nothing
	defer tick.Stop()
	for burst := range bursts {
		enqueueBurst(t, pg.Pool, ob, topic, keys, burst*roundsPerBurst, roundsPerBurst)
		if killAfter[burst] {
			leader := liveLeader()
			// Kill it while it drains: once the backlog has started to shrink under it.
			p0 := pending()
			testenv.Eventually(t, electionTimeout, time.Millisecond, func() bool { return pending() < p0 || p0 == 0 },
				"leader %d to drain", leader.pid)
			p1 := pending()
			leader.kill()
			kills = append(kills, fmt.Sprintf("pid %d after burst %d (pending %d→%d, applied %d)",
				leader.pid, burst, p0, p1, c.Stats().Applied))
		}
		<-tick.C
	}
	t.Logf("SIGKILLed the leading relay: %s", strings.Join(kills, "; "))
	if len(kills) != 2 {
		t.Fatalf("%d kills, want 2", len(kills))
	}
	last := liveLeader()
	t.Logf("relay %d leads at the end of the load", last.pid)

	awaitApplied(t, pg.Pool, ob, c, total+1)
	// Let redelivered duplicates still in the queues reach the consumer before the Stats report: wait
	// until its counters have not moved for 2 s (bounded). The assertions below do not depend on it.
	handled := func() int64 { st := c.Stats(); return st.Applied + st.Duplicates + st.Failed + st.Poison }
	prev, since := handled(), time.Now()
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() bool {
		if n := handled(); n != prev {
			prev, since = n, time.Now()
		}
		return time.Since(since) >= 2*time.Second
	}, "the consumer to go quiet")
	stopConsumer()

	checkApplied(t, pg.Pool, keys, perKey, warmUp)
	if p, d, err := ob.Backlog(ctx, pg.Pool); err != nil || p != 0 || d != 0 {
		t.Errorf("outbox backlog: %d pending, %d dead (%v); want empty", p, d, err)
	}
	st := c.Stats()
	if st.Applied != total+1 || st.Poison != 0 {
		t.Errorf("consumer Stats %+v: want %d applied (the load and the warm-up), no poison", st, total+1)
	}
	var alive []int
	for pid, p := range procs {
		if !p.exited() {
			alive = append(alive, pid)
		}
	}
	slices.Sort(alive)
	t.Logf("%d messages applied exactly once in per-key order; the idempotency claim suppressed %d duplicates "+
		"(consumer Stats %+v); relays still running: %v", total, st.Duplicates, st, alive)
}

// appliedConsumer returns an orderly RocketMQ consumer of topic that applies each message — its
// key and, in its body, its per-key sequence number — in a transaction that claims its ID
// (idempotency.Store) and records it in the table "applied" with an apply-order number.
func appliedConsumer(t *testing.T, pg *testenv.Schema, topic string) *rocketmq.Consumer {
	t.Helper()
	ctx := t.Context()
	store, err := idempotency.New(pg.Pool, idempotency.WithTable(pg.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Pool.Exec(ctx, `create table applied (
		n      bigserial primary key, -- apply order
		key    text not null,
		seq    int  not null,
		msg_id uuid not null)`); err != nil {
		t.Fatal(err)
	}
	handler := func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
		seq, err := strconv.Atoi(string(msg.Body))
		if err != nil {
			return fmt.Errorf("body %q: %w: %w", msg.Body, err, rocketmq.ErrPoison)
		}
		_, err = tx.Exec(ctx, `insert into applied (key, seq, msg_id) values ($1, $2, $3)`, msg.Key, seq, msg.ID)
		return err
	}
	c, err := rocketmq.NewConsumer(testenv.Namesrv(t), mqtest.ConsumerGroup(t), topic, consumerPool(t, pg.URL), store, handler,
		rocketmq.WithOrderly(100*time.Millisecond), rocketmq.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkApplied checks the table "applied" (see appliedConsumer): every (key, seq) of keys k00...
// × perKey applied exactly once, each key's in increasing order of application, and nothing
// else but messages of the key skip.
func checkApplied(t *testing.T, pool *pgxpool.Pool, keys, perKey int, skip string) {
	t.Helper()
	rows, err := pool.Query(t.Context(), `select key, seq from applied order by n`)
	if err != nil {
		t.Fatal(err)
	}
	type applied struct {
		key string
		seq int
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (applied, error) {
		var a applied
		return a, r.Scan(&a.key, &a.seq)
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[applied]int{}
	lastSeq := map[string]int{}
	got = slices.DeleteFunc(got, func(a applied) bool { return a.key == skip })
	for _, a := range got {
		seen[a]++
		if l, ok := lastSeq[a.key]; ok && a.seq <= l {
			t.Errorf("key %s: seq %d applied after seq %d", a.key, a.seq, l)
		}
		lastSeq[a.key] = a.seq
	}
	for k := range keys {
		for s := range perKey {
			a := applied{fmt.Sprintf("k%02d", k), s}
			if n := seen[a]; n != 1 {
				t.Errorf("%s seq %d applied %d times, want once", a.key, a.seq, n)
			}
		}
	}
	if len(got) != keys*perKey {
		t.Errorf("%d rows applied, want %d", len(got), keys*perKey)
	}
}

// enqueueBurst enqueues, in one transaction, the sequence numbers first..first+n-1 for each of
// keys k00, k01, ... (the body is the number), as appliedConsumer expects them.
func enqueueBurst(t *testing.T, pool *pgxpool.Pool, ob *outbox.Outbox, topic string, keys, first, n int) {
	t.Helper()
	ctx := t.Context()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for seq := first; seq < first+n; seq++ {
			for k := range keys {
				msg := outbox.Message{Topic: topic, Key: fmt.Sprintf("k%02d", k), Body: []byte(strconv.Itoa(seq))}
				if _, err := ob.Enqueue(ctx, tx, msg); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("enqueue seq %d..%d: %v", first, first+n-1, err)
	}
}

// warmUpConsumer enqueues a message of key warmUp and waits until c applied it: a relay leads and
// the consumer has its queues, so that the consumer applies the load while it is relayed.
func warmUpConsumer(t *testing.T, pool *pgxpool.Pool, ob *outbox.Outbox, topic, warmUp string, c *rocketmq.Consumer) {
	t.Helper()
	if _, err := ob.Enqueue(t.Context(), pool, outbox.Message{Topic: topic, Key: warmUp, Body: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, 10*time.Millisecond, func() bool { return c.Stats().Applied == 1 },
		"the warm-up message to be applied")
}

// awaitApplied waits until c applied n messages and the outbox is empty.
func awaitApplied(t *testing.T, pool *pgxpool.Pool, ob *outbox.Outbox, c *rocketmq.Consumer, n int64) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, 20*time.Millisecond, func() bool { return c.Stats().Applied >= n },
		"all %d messages to be applied", n)
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool {
		p, d, err := ob.Backlog(t.Context(), pool)
		return err == nil && p == 0 && d == 0
	}, "the outbox to be empty")
}
