package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/testkit/mqtest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/outbox"
)

// TestIntegrationPartitionedRelayFailover: an outbox split into 6 partitions, relayed by three
// relay processes that balance the partitions (two each), under a load of 24 keys × 40 messages
// in bursts; twice during the load the test SIGKILLs a relay that leads partitions, and starts a
// new one, so partitions move twice per kill (to the survivors when the killed one's session
// expires, then to the newcomer as the others give up their extra share). It checks:
//
//   - per-key order and once-only effects across the moves: the orderly consumer (claiming each
//     message's ID) applies every (key, seq) exactly once, each key in increasing order;
//   - no partition led by two processes at once, as their fenced writes show: triggers record
//     every write of the relays (the rows each transaction deletes or updates, with their
//     partition) and every fence row it passes, with its transaction id; every relay transaction
//     passes the fence of exactly the partition of the rows it writes, and each partition's fence
//     tokens only grow in the order of the writes;
//   - the takeover time after each kill: until every partition's election has a live leader
//     (logged; bounded by the session timeout + 3 s on this loaded machine).
func TestIntegrationPartitionedRelayFailover(t *testing.T) {
	const (
		parts, workers  = 6, 3
		keys, perKey    = 24, 40
		roundsPerBurst  = 5
		bursts          = perKey / roundsPerBurst
		total           = keys * perKey
		sessionTimeout  = 2 * time.Second
		burstInterval   = 300 * time.Millisecond
		electionTimeout = 30 * time.Second
		warmUp          = "warm-up"
	)
	killAfter := map[int]bool{2: true, 5: true}
	ctx := t.Context()
	pg := testenv.PG(t)
	ob := partitionedOutbox(t, pg, parts)
	recordWrites(t, pg.Pool, ob.Table())
	topic := testenv.Topic(t)
	election := testenv.ZKRoot(t) + "/relay"
	paths := partitionElections(election, parts)
	c := appliedConsumer(t, pg, topic)
	stopConsumer := background(t, "consumer", c.Run)

	procs := map[int]*relayProc{}
	start := func() {
		p := startRelayWorker(t, relayWorkerConfig{PG: pg.URL, Schema: pg.Name, Election: election, Batch: 16,
			SessionTimeout: sessionTimeout, Partitions: parts})
		procs[p.pid] = p
	}
	for range workers {
		start()
	}
	obsCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	sess, err := zklock.NewSession(obsCtx, testenv.ZK(t), zklock.WithSessionTimeout(sessionTimeout), zkenv.Auth(t))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	observers := make([]lock.Elector, parts) // never campaign
	for p := range observers {
		if observers[p], err = zklock.NewElector(sess, paths[p], "observer"); err != nil {
			t.Fatal(err)
		}
	}
	// leaders returns each partition's leader, 0 where none is a running worker.
	leaders := func() []int {
		out := make([]int, parts)
		for p, o := range observers {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			id, err := o.Leader(lctx)
			cancel()
			if err != nil {
				continue
			}
			pid, _ := strconv.Atoi(id)
			if w := procs[pid]; w != nil && !w.exited() {
				out[p] = pid
			}
		}
		return out
	}
	allLed := func() bool { return !slices.Contains(leaders(), 0) }
	testenv.Eventually(t, electionTimeout, 20*time.Millisecond, allLed, "every partition to be led")
	warmUpConsumer(t, pg.Pool, ob, topic, warmUp, c)

	var kills []string
	tick := time.NewTicker(burstInterval) // paces the load; orders nothing
	defer tick.Stop()
	for burst := range bursts {
		enqueueBurst(t, pg.Pool, ob, topic, keys, burst*roundsPerBurst, roundsPerBurst)
		if killAfter[burst] {
			led := leaders()
			victim := procs[slices.Max(led)]
			var its []int
			for p, pid := range led {
				if pid == victim.pid {
					its = append(its, p)
				}
			}
			victim.kill()
			killed := time.Now()
			testenv.Eventually(t, electionTimeout, 10*time.Millisecond, allLed, "every partition to be led again")
			took := time.Since(killed)
			kills = append(kills, fmt.Sprintf("pid %d leading %v after burst %d: all partitions led again in %v",
				victim.pid, its, burst, took.Round(time.Millisecond)))
			if took > sessionTimeout+3*time.Second {
				t.Errorf("takeover after killing %d took %v, want within the session timeout %v + 3s", victim.pid, took, sessionTimeout)
			}
			start() // and the partitions move again, to the newcomer
		}
		<-tick.C
	}
	t.Logf("SIGKILLed: %s; leaders at the end of the load: %v", strings.Join(kills, "; "), leaders())

	awaitApplied(t, pg.Pool, ob, c, total+1)
	stopConsumer()
	checkApplied(t, pg.Pool, keys, perKey, warmUp)
	checkFencedWrites(t, pg.Pool, ob.Table(), parts)
	t.Logf("%d messages applied exactly once in per-key order over %d partitions; consumer Stats %+v", total, parts, c.Stats())
}

// recordWrites installs triggers in the outbox's schema that record, with the transaction id,
// every row the relays delete or update in the outbox (write_log: its partition) and every fence
// row they pass (fence_log: resource and token).
func recordWrites(t *testing.T, pool *pgxpool.Pool, table string) {
	t.Helper()
	schema, _, _ := strings.Cut(table, ".")
	_, err := pool.Exec(t.Context(), `
create table `+schema+`.write_log (txid bigint not null default txid_current(), part smallint not null);
create table `+schema+`.fence_log (n bigserial primary key, txid bigint not null default txid_current(),
    resource text not null, epoch bigint not null, seq bigint not null);
create function `+schema+`.log_write() returns trigger language plpgsql as $$
begin insert into `+schema+`.write_log (part) values (old.partition); return null; end $$;
create function `+schema+`.log_fence() returns trigger language plpgsql as $$
begin insert into `+schema+`.fence_log (resource, epoch, seq) values (new.resource, new.epoch, new.seq); return null; end $$;
create trigger log_write after delete or update on `+table+` for each row execute function `+schema+`.log_write();
create trigger log_fence after insert or update on `+schema+`.txkit_fence for each row execute function `+schema+`.log_fence();`)
	if err != nil {
		t.Fatal(err)
	}
}

// checkFencedWrites checks the records of recordWrites: every transaction that wrote outbox
// rows passed the fence of exactly one partition, the one of all the rows it wrote, and each
// partition's tokens, in the order the fence saw them (the fence row's lock orders its writers),
// never go down — a deposed leader never wrote after its successor, so no partition was led by two
// relays at once as far as the table can tell.
func checkFencedWrites(t *testing.T, pool *pgxpool.Pool, table string, parts int) {
	t.Helper()
	ctx := t.Context()
	schema, name, _ := strings.Cut(table, ".")
	resource := func(p int) string { return "outbox:" + schema + "." + name + "/p" + strconv.Itoa(p) }
	// Every writing transaction: the fence resources it passed and the partitions it wrote.
	rows, err := pool.Query(ctx, `
select w.txid, array_agg(distinct w.part order by w.part),
       coalesce((select array_agg(distinct f.resource) from `+schema+`.fence_log f where f.txid = w.txid), '{}')
from `+schema+`.write_log w group by w.txid`)
	if err != nil {
		t.Fatal(err)
	}
	writes := 0
	for rows.Next() {
		var txid int64
		var ps []int16
		var res []string
		if err := rows.Scan(&txid, &ps, &res); err != nil {
			t.Fatal(err)
		}
		writes++
		if len(ps) != 1 || len(res) != 1 || res[0] != resource(int(ps[0])) {
			t.Errorf("transaction %d wrote rows of partitions %v passing the fences %v, want one partition and its fence", txid, ps, res)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if writes == 0 {
		t.Fatal("no relay write recorded")
	}
	// Each partition's tokens in the fence's order.
	terms := make([]int, parts)
	for p := range parts {
		rows, err := pool.Query(ctx, `select epoch, seq from `+schema+`.fence_log where resource = $1 order by n`, resource(p))
		if err != nil {
			t.Fatal(err)
		}
		var prev lock.Token
		for rows.Next() {
			var tok lock.Token
			if err := rows.Scan(&tok.Epoch, &tok.Seq); err != nil {
				t.Fatal(err)
			}
			switch {
			case tok.Less(prev):
				t.Errorf("partition %d: token %s passed the fence after %s", p, tok, prev)
			case tok != prev:
				terms[p]++
			}
			prev = tok
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d relay write transactions, each fenced by its partition; terms per partition %v", writes, terms)
}

// TestIntegrationPartitionCount: Enqueue puts a message in the partition of its key's hash (of its
// ID without a key); the count is stored by the first Migrate, and an outbox with another count is
// refused by Migrate, Enqueue (which writes nothing) and the relay's Run; a table that held
// pending messages before partitions keeps 1.
func TestIntegrationPartitionCount(t *testing.T) {
	ctx := t.Context()
	pg := testenv.PG(t)
	ob := partitionedOutbox(t, pg, 12)
	partOf := func(id uuid.UUID) int {
		var p int
		if err := pg.Pool.QueryRow(ctx, `select partition from txkit_outbox where msg_id = $1`, id).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	seen := map[int]bool{}
	for i := range 40 {
		msg := outbox.Message{ID: uuid.New(), Topic: "t", Key: fmt.Sprintf("user-%d", i)}
		if i%4 == 0 {
			msg.Key = "" // by its ID
		}
		if _, err := ob.Enqueue(ctx, pg.Pool, msg); err != nil {
			t.Fatal(err)
		}
		want := ob.Partition(msg)
		if got := partOf(msg.ID); got != want || want < 0 || want >= 12 {
			t.Fatalf("message %d (key %q) in partition %d, want %d", i, msg.Key, got, want)
		}
		seen[want] = true
	}
	if len(seen) < 6 {
		t.Fatalf("40 messages in %d partitions of 12: the hash does not spread", len(seen))
	}

	other, err := outbox.New(pg.Pool, outbox.WithTable(pg.Name, ""), outbox.WithPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Migrate(ctx); !errors.Is(err, outbox.ErrInvalidOption) || !strings.Contains(err.Error(), "12 partitions") {
		t.Fatalf("Migrate with 4 partitions of a table split in 12: %v, want ErrInvalidOption naming 12", err)
	}
	before, _, err := ob.Backlog(ctx, pg.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Enqueue(ctx, pg.Pool, outbox.Message{Topic: "t", Key: "k"}); !errors.Is(err, outbox.ErrInvalidOption) {
		t.Fatalf("Enqueue with 4 partitions: %v, want ErrInvalidOption", err)
	}
	if after, _, _ := ob.Backlog(ctx, pg.Pool); after != before {
		t.Fatalf("refused Enqueue wrote: %d pending, want %d", after, before)
	}
	sess, err := zklock.NewSession(ctx, testenv.ZK(t), zkenv.Auth(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	paths := partitionElections(testenv.ZKRoot(t)+"/relay", 4)
	r, err := outbox.NewRelay(other, mqtest.Publisher(t), outbox.WithElectors(func(p int) (lock.Elector, error) {
		return zklock.NewElector(sess, paths[p], "r")
	}, nil))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := r.Run(rctx); !errors.Is(err, outbox.ErrInvalidOption) {
		t.Fatalf("Run of a relay with 4 partitions: %v, want ErrInvalidOption", err)
	}

	// A table from before partitions, with a pending message: its count is 1.
	old, err := outbox.New(pg.Pool, outbox.WithTable(pg.Name, "old"))
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Enqueue(ctx, pg.Pool, outbox.Message{Topic: "t", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Pool.Exec(ctx, `drop table old_parts`); err != nil { // as before partitions
		t.Fatal(err)
	}
	split, err := outbox.New(pg.Pool, outbox.WithTable(pg.Name, "old"), outbox.WithPartitions(12))
	if err != nil {
		t.Fatal(err)
	}
	if err := split.Migrate(ctx); !errors.Is(err, outbox.ErrInvalidOption) || !strings.Contains(err.Error(), "into 1 partitions") {
		t.Fatalf("Migrate with 12 partitions of a table with a backlog from before partitions: %v, want ErrInvalidOption", err)
	}
	if err := old.Migrate(ctx); err != nil {
		t.Fatalf("Migrate with 1 partition: %v", err)
	}
}

// partitionedOutbox returns an outbox of parts partitions in pg's schema, migrated.
func partitionedOutbox(t *testing.T, pg *testenv.Schema, parts int) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.New(pg.Pool, outbox.WithTable(pg.Name, ""), outbox.WithPartitions(parts))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return ob
}
