package rocketmq_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/testkit/mqtest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

// The relay, consumers and transactional messages on the clusters of deploy/local/rocketmq-cluster:
// a 3-node DLedger group whose leader is SIGKILLed, and two masters one of which is SIGKILLed.
// What txkit promises on each, and the figures: docs/production.md ("Brokers").

// clusterEnv is newEnv on cluster c: a topic on every broker of c (with the retry topics of
// groups), a schema of the test's own with the idempotency store, and the applied table with the
// order in which the messages were applied (n).
func clusterEnv(t *testing.T, c *mqtest.Cluster, groups ...string) *env {
	t.Helper()
	e := &env{ns: c.Namesrv, topic: c.Topic(t, groups...), schema: testenv.PG(t)}
	e.pool = e.schema.Pool
	e.log, e.logs = testLogger(t)
	st, err := idempotency.New(e.pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.store = st
	if _, err := e.pool.Exec(t.Context(), `create table applied (n bigserial, id uuid not null, key text, seq int, body text)`); err != nil {
		t.Fatal(err)
	}
	return e
}

// clusterRelay runs an outbox relay on e's schema publishing through the name servers ns (e's
// cluster), retrying a failed publish after 100 ms to 1 s, until the test ends.
func clusterRelay(t *testing.T, e *env, ns []string) (*outbox.Outbox, *outbox.Relay) {
	t.Helper()
	ob, err := outbox.New(e.pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	pub, err := rocketmq.NewPublisher(t.Context(), ns, rocketmq.WithLogger(e.log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	relay, err := outbox.NewRelay(ob, pub,
		outbox.WithElector(zkenv.Elector(t, testenv.ZKRoot(t)+"/relay", "r1")),
		outbox.WithSchedule("@every 100ms", 128), outbox.WithRetry(100000, 100*time.Millisecond, time.Second),
		outbox.WithLogger(e.log))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, relay.Run)
	return ob, relay
}

// enqueue writes messages seq from..to-1 of each of keys keys into the outbox, one transaction
// per seq (so each key's messages are enqueued in seq order).
func enqueue(t *testing.T, e *env, ob *outbox.Outbox, keys, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		err := pgx.BeginFunc(t.Context(), e.pool, func(tx pgx.Tx) error {
			for k := range keys {
				key := fmt.Sprintf("key-%d", k)
				if _, err := ob.Enqueue(t.Context(), tx, outbox.Message{Topic: e.topic, Key: key,
					Body: []byte(key + "/" + strconv.Itoa(i)), Headers: map[string]string{"seq": strconv.Itoa(i)}}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("enqueue seq %d: %v", i, err)
		}
	}
}

// orderReport reads the rows of table (applied, or another with its columns) in the order the
// messages were applied and returns how many were applied, how many (key, seq) were applied more
// than once, and the order violations: a message applied after a later message of its key.
func orderReport(t *testing.T, e *env, table string) (applied, twice, violations int) {
	t.Helper()
	rows, err := e.pool.Query(t.Context(), `select key, seq from `+table+` where seq is not null order by n`)
	if err != nil {
		t.Fatal(err)
	}
	type ks struct {
		key string
		seq int
	}
	seen, top := map[ks]bool{}, map[string]int{}
	for rows.Next() {
		var r ks
		if err := rows.Scan(&r.key, &r.seq); err != nil {
			t.Fatal(err)
		}
		applied++
		if seen[r] {
			twice++
			continue
		}
		seen[r] = true
		if last, ok := top[r.key]; ok && r.seq < last {
			violations++
			t.Logf("%s: order violation: %s seq %d applied after seq %d", table, r.key, r.seq, last)
		}
		top[r.key] = max(top[r.key], r.seq)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return applied, twice, violations
}

// TestIntegrationClusterDLedgerLeaderKill: the relay publishes 8 keys × 40 messages to the DLedger
// group, and an orderly, idempotent consumer applies them; halfway, the group's leader is
// SIGKILLed. A new leader is elected and serves the same queues: every message is applied exactly
// once, each key's in order (0 violations). Just before the kill, a TxProducer leaves two half
// messages and dies (it is closed) — one whose local transaction committed, its second phase
// withheld, and one whose producer never ran its local transaction — so that only the new leader
// can check them back (the old one dies before they are old enough to be checked): a second
// TxProducer of the group resolves both, the first delivered once, the second rolled back.
func TestIntegrationClusterDLedgerLeaderKill(t *testing.T) {
	t.Parallel()
	c := mqtest.DLedger(t)
	g, gb, txg := "txkit-c-"+testenv.Name(t), "txkit-b-"+testenv.Name(t), "txkit-tx-"+testenv.Name(t)
	e := clusterEnv(t, c, g, gb)
	createUsers(t, e)
	const keys, perKey = 8, 40
	cons := newConsumer(t, e, g, (&recorder{}).handler(nil), rocketmq.WithOrderly(time.Second))
	run(t, cons)
	ob, _ := clusterRelay(t, e, e.ns)

	enqueue(t, e, ob, keys, 0, perKey/2)
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool { return cons.Stats().Applied >= keys*perKey/4 },
		"messages flowing through the DLedger group before the kill (stats %+v)", cons.Stats())

	leader, addr := c.Leader(t)
	dying := newWithheldTxProducer(t, e, txg)
	committed := outbox.Message{ID: uuid.New(), Topic: e.topic, Body: []byte("committed, second phase lost")}
	if err := dying.Send(t.Context(), committed, insertUser(uuid.New())); err != nil {
		t.Fatalf("Send: %v", err)
	}
	orphan := outbox.Message{ID: uuid.New(), Topic: e.topic, Body: []byte("never ran its local transaction")}
	m, err := rocketmq.Encode(orphan)
	if err != nil {
		t.Fatal(err)
	}
	m.WithProperty(rocketmq.PropertyTxID, orphan.ID.String())
	leaveHalfMessages(t, e, txg, m)
	born := time.Now()
	_ = dying.Close()
	c.Kill(t, leader)
	killed := time.Now()
	if d := killed.Sub(born); d >= 2*time.Second {
		t.Fatalf("the leader died %v after the half messages: the broker may have checked them back before (transactionTimeOut 2 s)", d)
	}
	t.Logf("SIGKILLed the leader %s (%s) %v after the half messages were stored", leader, addr, killed.Sub(born).Round(time.Millisecond))
	newTxProducer(t, e, txg, rocketmq.CheckGraceForTest(3*time.Second)) // the group's producer after a restart

	enqueue(t, e, ob, keys, perKey/2, perKey)
	testenv.Eventually(t, 2*waitFor, 100*time.Millisecond, func() bool {
		return rows(t, e.pool, `select count(*) from txkit_outbox`) == 0
	}, "the relay to publish every message after the leader's death")
	t.Logf("the relay published everything %v after the leader's SIGKILL; new leader %s",
		time.Since(killed).Round(time.Millisecond), func() string { n, _ := c.Leader(t); return n }())
	// A consumer group started now reads the queues as the new leader serves them.
	if _, err := e.pool.Exec(t.Context(), `create table applied_b (n bigserial, id uuid not null, key text, seq int)`); err != nil {
		t.Fatal(err)
	}
	consB := newConsumer(t, e, gb, func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
		_, err := tx.Exec(ctx, `insert into applied_b (id, key, seq) values ($1, $2, nullif($3, '')::int)`, msg.ID, msg.Key, msg.Headers["seq"])
		return err
	}, rocketmq.WithOrderly(time.Second))
	run(t, consB)
	testenv.Eventually(t, waitFor, 100*time.Millisecond, func() bool { return consB.Stats().Applied >= keys*perKey },
		"a new consumer group to apply every message (stats %+v)", consB.Stats())
	testenv.Eventually(t, 2*waitFor, 100*time.Millisecond, func() bool {
		return txState(t, e, orphan.ID) == "rolled back" && rows(t, e.pool, `select count(*) from applied_b where id = $1`, committed.ID) == 1
	}, "the new leader's check-backs to roll the orphan back and deliver the committed half message")
	t.Logf("both half messages resolved by check-backs %v after the leader's SIGKILL", time.Since(killed).Round(time.Millisecond))
	n, twice, violations := orderReport(t, e, "applied_b")
	t.Logf("new group: %d applied, %d twice, %d order violations", n, twice, violations)
	if n != keys*perKey || twice != 0 || violations != 0 {
		t.Errorf("new group: applied %d (want %d), twice %d, order violations %d: want every message once, in order", n, keys*perKey, twice, violations)
	}
	for _, tbl := range []string{"applied", "applied_b"} {
		if k := rows(t, e.pool, `select count(*) from `+tbl+` where id = $1`, orphan.ID); k != 0 {
			t.Errorf("%s: the orphan half message was delivered %d times", tbl, k)
		}
	}
	if k := rows(t, e.pool, `select count(*) from applied_b where id = $1`, committed.ID); k != 1 {
		t.Errorf("the committed half message was applied %d times by the new group, want 1", k)
	}

	// The consumer that ran across the failover.
	var done bool
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if done = cons.Stats().Applied >= keys*perKey+1; done {
			break
		}
	}
	n, twice, violations = orderReport(t, e, "applied")
	t.Logf("the consumer across the failover: %d applied, %d twice, %d order violations; stats %+v", n, twice, violations, cons.Stats())
	var per []string
	prs, _ := e.pool.Query(t.Context(), `select key, count(*), max(seq) from applied where seq is not null group by key order by key`)
	for prs.Next() {
		var k string
		var cnt, mx int
		_ = prs.Scan(&k, &cnt, &mx)
		per = append(per, fmt.Sprintf("%s:%d/%d", k, cnt, mx))
	}
	prs.Close()
	t.Logf("per key (applied/max seq): %v", per)
	if twice != 0 || violations != 0 || !done {
		t.Errorf("the consumer across the failover: %d applied (want %d), %d twice, %d order violations", n, keys*perKey, twice, violations)
	}
}

// TestIntegrationClusterTwoMastersKeyWaitsForItsBroker: the rule on a two-master cluster is that
// a key waits for its broker. The relay publishes 8 keys × 40 messages over the 8 queues of both
// masters to an orderly, idempotent consumer; halfway, master-b is SIGKILLed. The
// keys whose queue is on master-a go on to their last message; the keys of master-b stay where
// they were (their publishes fail and are retried, nothing of them moves to master-a, also after
// the publisher's own route poll dropped master-b) until master-b is back, and then finish: every message applied exactly once across the rebalances
// the broker's death and return cause (master-b's queues leave the consumer and come back, with
// offsets the dead broker may not have persisted), each key's in order.
func TestIntegrationClusterTwoMastersKeyWaitsForItsBroker(t *testing.T) {
	t.Parallel()
	c := mqtest.TwoMasters(t)
	g := "txkit-c-" + testenv.Name(t)
	e := clusterEnv(t, c, g)
	const keys, perKey = 8, 40
	c1 := newConsumer(t, e, g, (&recorder{}).handler(nil), rocketmq.WithOrderly(time.Second))
	run(t, c1)
	ns, routes := mqtest.WatchRoutes(t, e.ns) // the relay's publisher's route polls
	ob, relay := clusterRelay(t, e, ns)
	applied := func() int64 { return c1.Stats().Applied }

	// Which keys live on master-b: the Publisher's own selector over the topic's 8 queues.
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(c.Namesrv)))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close() //nolint:errcheck // test
	mqs, err := adm.FetchPublishMessageQueues(t.Context(), e.topic)
	if err != nil || len(mqs) != 8 {
		t.Fatalf("queues of %s: %v (%v), want 8", e.topic, mqs, err)
	}
	sel := rocketmq.NewKeySelector()
	onB := map[string]bool{}
	for k := range keys {
		key := fmt.Sprintf("key-%d", k)
		pm := primitive.NewMessage(e.topic, nil)
		pm.WithProperty(rocketmq.PropertyKey, key)
		onB[key] = sel.Select(pm, mqs, "").BrokerName == "master-b"
	}
	nb := 0
	for _, b := range onB {
		if b {
			nb++
		}
	}
	if nb == 0 || nb == keys {
		t.Fatalf("%d of %d keys on master-b: the test needs keys on both masters", nb, keys)
	}

	enqueue(t, e, ob, keys, 0, perKey/2)
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool { return applied() == keys*perKey/2 },
		"the first half applied before the kill (applied %d)", applied())

	polls := routes.Len()
	c.Kill(t, "master-b")
	killed := time.Now()
	enqueue(t, e, ob, keys, perKey/2, perKey)
	perKeyApplied := func() map[string]int {
		got := map[string]int{}
		rs, err := e.pool.Query(t.Context(), `select key, count(*) from applied group by key`)
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		for rs.Next() {
			var k string
			var n int
			if err := rs.Scan(&k, &n); err != nil {
				t.Fatal(err)
			}
			got[k] = n
		}
		return got
	}
	want := (keys - nb) * perKey
	testenv.Eventually(t, 2*waitFor, 100*time.Millisecond, func() bool {
		got, sum := perKeyApplied(), 0
		for k, n := range got {
			if !onB[k] {
				sum += n
			}
		}
		return sum == want
	}, "the keys of master-a to finish while master-b is down (applied %v)", perKeyApplied())
	t.Logf("master-a's %d keys finished %v after master-b's SIGKILL", keys-nb, time.Since(killed).Round(time.Millisecond))
	// The publisher's own route poll (every 30 s) drops master-b's queues; then each key of
	// master-b is retried again (more failures than keys): none may have moved to master-a.
	testenv.Eventually(t, 2*waitFor, 100*time.Millisecond, func() bool {
		return routes.Since(polls, func(b []byte) bool { return !bytes.Contains(b, []byte("master-b")) })
	}, "the publisher's route poll to drop master-b")
	failed := relay.Stats().Failed
	testenv.Eventually(t, waitFor, 100*time.Millisecond, func() bool {
		if relay.Stats().Failed >= failed+int64(2*nb) {
			return true
		}
		for k, n := range perKeyApplied() {
			if onB[k] && n > perKey/2 {
				return true // moved: reported below
			}
		}
		return false
	}, "the relay to retry master-b's keys after the route poll (stats %+v)", relay.Stats())
	t.Logf("the publisher's route lost master-b %v after its SIGKILL; its keys retried since", time.Since(killed).Round(time.Millisecond))
	for k, n := range perKeyApplied() {
		if onB[k] && n != perKey/2 {
			t.Errorf("key %s of master-b: %d messages applied while master-b is down, want %d (none moved)", k, n, perKey/2)
		}
	}
	if n := rows(t, e.pool, `select count(*) from txkit_outbox`); n != nb*perKey/2 {
		t.Errorf("%d messages wait in the outbox while master-b is down, want %d (its keys' second halves)", n, nb*perKey/2)
	}

	c.Restart(t, "master-b")
	back := time.Now()
	testenv.Eventually(t, 2*waitFor, 100*time.Millisecond, func() bool {
		return rows(t, e.pool, `select count(distinct id) from applied`) == keys*perKey
	}, "every message applied after master-b is back (applied %v)", perKeyApplied())
	t.Logf("master-b's keys finished %v after it was back (%v after its SIGKILL)", time.Since(back).Round(time.Millisecond),
		time.Since(killed).Round(time.Millisecond))
	n, twice, violations := orderReport(t, e, "applied")
	t.Logf("%d applied, %d twice, %d order violations; consumer %+v", n, twice, violations, c1.Stats())
	if n != keys*perKey || twice != 0 || violations != 0 {
		t.Errorf("applied %d (want %d), twice %d, order violations %d: want every message once, in order", n, keys*perKey, twice, violations)
	}
}
