package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/testkit/mqtest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/outbox"
)

// The relay's integration tests publish through the real RocketMQ publisher (mqtest.Publisher,
// shared with the benchmarks), wrapped in a recorder that notes every call and fails the messages
// a test chooses. The recorder decides nothing else: a publish it lets through is the broker's to
// acknowledge or refuse.

// call is one Publish the relay made.
type call struct {
	msg outbox.Message
	err error
}

// recorder is a Publisher decorator: it records every call, in order, and fails the messages for
// which fail returns an error (without passing them on).
type recorder struct {
	next outbox.Publisher

	mu    sync.Mutex
	calls []call
	fail  func(context.Context, outbox.Message) error
}

func (r *recorder) Publish(ctx context.Context, msg outbox.Message) error {
	r.mu.Lock()
	fail := r.fail
	r.mu.Unlock()
	var err error
	if fail != nil {
		err = fail(ctx, msg)
	}
	if err == nil {
		err = r.next.Publish(ctx, msg)
	}
	r.mu.Lock()
	r.calls = append(r.calls, call{msg: msg, err: err})
	r.mu.Unlock()
	return err
}

func (r *recorder) setFail(f func(context.Context, outbox.Message) error) {
	r.mu.Lock()
	r.fail = f
	r.mu.Unlock()
}

func (r *recorder) snapshot() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// sent returns the bodies of the acknowledged publishes, in order.
func (r *recorder) sent() []string {
	var out []string
	for _, c := range r.snapshot() {
		if c.err == nil {
			out = append(out, string(c.msg.Body))
		}
	}
	return out
}

// attempts counts the calls for the message with body b, and how many of them failed.
func (r *recorder) attempts(b string) (calls, failed int) {
	for _, c := range r.snapshot() {
		if string(c.msg.Body) == b {
			calls++
			if c.err != nil {
				failed++
			}
		}
	}
	return calls, failed
}

var errInjected = errors.New("injected publish failure")

// relayEnv is what the relay tests share: an outbox in the test's schema, a topic, an election path.
type relayEnv struct {
	ob    *outbox.Outbox
	pool  *pgxpool.Pool
	topic string
	zk    []string
	path  string
}

func newRelayEnv(t *testing.T) *relayEnv {
	t.Helper()
	ob, pool := newOutbox(t)
	return &relayEnv{ob: ob, pool: pool, topic: testenv.Topic(t), zk: testenv.ZK(t), path: testenv.ZKRoot(t) + "/relay"}
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// relay builds a relay with its own ZooKeeper session and elector (as a separate process would
// have), publishing through pub.
func (e *relayEnv) relay(t *testing.T, id string, pub outbox.Publisher, opts ...outbox.RelayOption) *outbox.Relay {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	sess, err := zklock.NewSession(ctx, e.zk, zklock.WithSessionTimeout(4*time.Second), zkenv.Auth(t))
	if err != nil {
		t.Fatalf("zklock.NewSession: %v", err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	el, err := zklock.NewElector(sess, e.path, id)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]outbox.RelayOption{outbox.WithElector(el), outbox.WithLogger(testLogger(t).With("relay", id))}, opts...)
	r, err := outbox.NewRelay(e.ob, pub, opts...)
	if err != nil {
		t.Fatalf("NewRelay: %v", err)
	}
	return r
}

// run runs r until the returned stop is called (or the test ends); stop waits for Run to return
// and fails the test if it returned an error.
func run(t *testing.T, r *outbox.Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("Run did not return within 30s of its ctx ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func (e *relayEnv) enqueue(t *testing.T, key, body string) uuid.UUID {
	t.Helper()
	id, err := e.ob.Enqueue(context.Background(), e.pool, outbox.Message{Topic: e.topic, Key: key, Body: []byte(body),
		Headers: map[string]string{"test": t.Name()}})
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	return id
}

func (e *relayEnv) backlog(t *testing.T) (pending, dead int64) {
	t.Helper()
	p, d, err := e.ob.Backlog(context.Background(), e.pool)
	if err != nil {
		t.Fatal(err)
	}
	return p, d
}

// waitOneDead waits until nothing is pending and one message is dead.
func (e *relayEnv) waitOneDead(t *testing.T, what string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool {
		p, d := e.backlog(t)
		return p == 0 && d == 1
	}, "%s", what)
}

func (e *relayEnv) waitEmpty(t *testing.T, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, 20*time.Millisecond, func() bool {
		p, d := e.backlog(t)
		return p == 0 && d == 0
	}, "the outbox to be empty")
}

// TestIntegrationRelayDelivers: messages enqueued before and after the relay starts are all
// published, each key's in order, and deleted.
func TestIntegrationRelayDelivers(t *testing.T) {
	e := newRelayEnv(t)
	rec := &recorder{next: mqtest.Publisher(t)}
	var want []string
	for i := range 30 {
		b := fmt.Sprintf("k%d:%d", i%3, i/3)
		e.enqueue(t, fmt.Sprintf("k%d", i%3), b)
		want = append(want, b)
	}
	for i := range 5 {
		b := fmt.Sprintf("-:%d", i)
		e.enqueue(t, "", b)
		want = append(want, b)
	}
	r := e.relay(t, "relay-1", rec, outbox.WithSchedule("@every 1s", 8))
	run(t, r)
	e.waitEmpty(t, 30*time.Second)
	// Enqueued while the relay runs: a notification wakes it (the poll would take up to 1 s).
	for i := range 5 {
		b := fmt.Sprintf("k0:late%d", i)
		e.enqueue(t, "k0", b)
		want = append(want, b)
	}
	e.waitEmpty(t, 30*time.Second)

	sent := rec.sent()
	if !sameSet(sent, want) {
		t.Fatalf("published %q, want each of %q once", sent, want)
	}
	checkKeyOrder(t, sent, want)
	st := r.Stats()
	if st.Published != int64(len(want)) || st.Failed != 0 || st.Dead != 0 || st.Batches < 5 || st.Wakeups < 1 {
		t.Fatalf("Stats = %+v, want %d published, none failed, at least 5 batches", st, len(want))
	}
	for _, c := range rec.snapshot() {
		if c.msg.Topic != e.topic || c.msg.Headers["test"] != t.Name() || c.msg.ID == uuid.Nil {
			t.Fatalf("published %+v: topic, headers or id lost on the way", c.msg)
		}
	}
}

// TestIntegrationRelayWakesOnNotify: with a poll far away, a committed Enqueue still reaches the
// publisher at once, through LISTEN/NOTIFY.
func TestIntegrationRelayWakesOnNotify(t *testing.T) {
	e := newRelayEnv(t)
	rec := &recorder{next: mqtest.Publisher(t)}
	r := e.relay(t, "relay-1", rec, outbox.WithSchedule("@every 1h", 128))
	run(t, r)
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool { return r.Stats().Wakeups >= 1 },
		"the relay to lead and drain once")
	for i := range 3 {
		body := fmt.Sprintf("n%d", i)
		start := time.Now()
		e.enqueue(t, "", body)
		testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool { return slices.Contains(rec.sent(), body) },
			"message %s to be published without a poll", body)
		t.Logf("enqueue → published: %v", time.Since(start))
	}
	e.waitEmpty(t, 10*time.Second)
}

// TestIntegrationRelayPerKeyOrder: while k1:1 fails, k1:2 is not published (not even tried), and
// k2:1 goes; once k1:1 is published, k1:2 follows.
func TestIntegrationRelayPerKeyOrder(t *testing.T) {
	e := newRelayEnv(t)
	rec := &recorder{next: mqtest.Publisher(t)}
	rec.setFail(func(_ context.Context, m outbox.Message) error {
		if string(m.Body) == "k1:1" {
			return errInjected
		}
		return nil
	})
	e.enqueue(t, "k1", "k1:1")
	e.enqueue(t, "k1", "k1:2")
	e.enqueue(t, "k2", "k2:1")
	r := e.relay(t, "relay-1", rec, outbox.WithRetry(16, time.Millisecond, 5*time.Millisecond))
	run(t, r)

	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool {
		_, failed := rec.attempts("k1:1")
		return failed >= 3 && slices.Contains(rec.sent(), "k2:1")
	}, "k1:1 to fail three times and k2:1 to be published")
	if calls, _ := rec.attempts("k1:2"); calls != 0 {
		t.Fatalf("k1:2 was handed to the publisher %d times while k1:1 was failing", calls)
	}
	if p, _ := e.backlog(t); p != 2 {
		t.Fatalf("%d pending, want 2 (k1:1, k1:2)", p)
	}

	rec.setFail(nil)
	e.waitEmpty(t, 30*time.Second)
	sent := rec.sent()
	if !slices.Equal(sent, []string{"k2:1", "k1:1", "k1:2"}) {
		t.Fatalf("published %q, want k2:1, k1:1, k1:2", sent)
	}
	st := r.Stats()
	if st.Failed < 3 || st.Published != 3 {
		t.Fatalf("Stats = %+v", st)
	}
}

// TestIntegrationRelayDeadAndRequeue: a message that always fails is dead after MaxAttempts
// publishes, without holding back its key's later messages; ListDead shows it; once the broker
// takes it, Requeue delivers it.
func TestIntegrationRelayDeadAndRequeue(t *testing.T) {
	e := newRelayEnv(t)
	rec := &recorder{next: mqtest.Publisher(t)}
	rec.setFail(func(_ context.Context, m outbox.Message) error {
		if string(m.Body) == "poison" {
			return fmt.Errorf("broker refused: %w", errInjected)
		}
		return nil
	})
	poison := e.enqueue(t, "k", "poison")
	e.enqueue(t, "k", "after")
	e.enqueue(t, "other", "other")
	const maxAttempts = 3
	r := e.relay(t, "relay-1", rec, outbox.WithRetry(maxAttempts, time.Millisecond, 5*time.Millisecond))
	run(t, r)

	e.waitOneDead(t, "the poison message to be dead and the others sent")
	if calls, failed := rec.attempts("poison"); calls != maxAttempts || failed != maxAttempts {
		t.Fatalf("poison: %d calls, %d failed; want %d of each", calls, failed, maxAttempts)
	}
	if sent := rec.sent(); !sameSet(sent, []string{"after", "other"}) {
		t.Fatalf("published %q, want after and other", sent)
	}
	dead, err := e.ob.ListDead(t.Context(), e.pool, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].ID != poison || dead[0].Attempts != maxAttempts ||
		dead[0].LastError != "broker refused: injected publish failure" || string(dead[0].Body) != "poison" {
		t.Fatalf("ListDead = %+v", dead)
	}
	if st := r.Stats(); st.Dead != 1 || st.Failed != maxAttempts {
		t.Fatalf("Stats = %+v, want 1 dead, %d failed", st, maxAttempts)
	}

	rec.setFail(nil)
	if n, err := e.ob.Requeue(t.Context(), e.pool, poison); err != nil || n != 1 {
		t.Fatalf("Requeue = %d, %v", n, err)
	}
	e.waitEmpty(t, 30*time.Second)
	if calls, failed := rec.attempts("poison"); calls != maxAttempts+1 || failed != maxAttempts {
		t.Fatalf("poison after requeue: %d calls, %d failed", calls, failed)
	}
}

// TestIntegrationRelayRefusedForGoodDeadAtOnce: a message the broker can never carry — a topic
// name RocketMQ does not allow, which the real publisher refuses with an error wrapping
// ErrInvalidMessage — is dead after its first failed publish instead of being retried
// WithRetry attempts times while its key's later messages wait.
func TestIntegrationRelayRefusedForGoodDeadAtOnce(t *testing.T) {
	e := newRelayEnv(t)
	rec := &recorder{next: mqtest.Publisher(t)}
	bad, err := e.ob.Enqueue(t.Context(), e.pool, outbox.Message{Topic: "txkit.dotted.topic", Key: "k", Body: []byte("bad-topic")})
	if err != nil {
		t.Fatal(err)
	}
	e.enqueue(t, "k", "after")
	const maxAttempts = 5
	r := e.relay(t, "relay-1", rec, outbox.WithRetry(maxAttempts, time.Millisecond, 5*time.Millisecond))
	run(t, r)

	e.waitOneDead(t, "the bad-topic message to be dead and the next one sent")
	if calls, failed := rec.attempts("bad-topic"); calls != 1 || failed != 1 {
		t.Fatalf("bad-topic: %d calls, %d failed; want 1 of each (dead at once, not %d attempts)", calls, failed, maxAttempts)
	}
	dead, err := e.ob.ListDead(t.Context(), e.pool, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].ID != bad || dead[0].Attempts != 1 || !strings.Contains(dead[0].LastError, "invalid message") {
		t.Fatalf("ListDead = %+v", dead)
	}
	if sent := rec.sent(); !sameSet(sent, []string{"after"}) {
		t.Fatalf("published %q, want after", sent)
	}
}

// noteWrites creates the table name (columns cols) in the outbox's schema and a trigger that, after
// each event on the outbox table, for each row or statement (level), inserts values into it; it
// returns the table's quoted name.
func (e *relayEnv) noteWrites(t *testing.T, name, cols, event, level, values string) string {
	t.Helper()
	schema := strings.Split(e.ob.Table(), ".")[0]
	table, fn := pgx.Identifier{schema, name}.Sanitize(), pgx.Identifier{schema, name + "_note"}.Sanitize()
	for _, q := range []string{
		`create table ` + table + ` (` + cols + `)`,
		`create function ` + fn + `() returns trigger language plpgsql as $$
begin
    insert into ` + table + ` values (` + values + `);
    return null;
end $$`,
		`create trigger ` + name + ` after ` + event + ` on ` + pgx.Identifier(strings.Split(e.ob.Table(), ".")).Sanitize() +
			` for each ` + level + ` execute function ` + fn + `()`,
	} {
		if _, err := e.pool.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return table
}

// TestIntegrationRecordCommitsAsync: the relay's record — the delete of a sent row, the update of
// a failed one — commits without waiting for its WAL flush (synchronous_commit off in its
// transaction only; a record lost to a crash means a publish again, which at-least-once allows),
// while Enqueue's transaction keeps the server's setting. Triggers on the outbox table note the
// setting each write ran with.
func TestIntegrationRecordCommitsAsync(t *testing.T) {
	e := newRelayEnv(t)
	seen := e.noteWrites(t, "sync_seen", "op text not null, setting text not null",
		"insert or update or delete", "row", "tg_op, current_setting('synchronous_commit')")
	rec := &recorder{next: mqtest.Publisher(t)}
	rec.setFail(func(_ context.Context, m outbox.Message) error {
		if string(m.Body) == "refused" {
			return fmt.Errorf("refused for good: %w", outbox.ErrInvalidMessage)
		}
		return nil
	})
	e.enqueue(t, "k", "refused")
	if err := e.do(t, e.ob, "k", "sent"); err != nil {
		t.Fatalf("Do: %v", err)
	}
	run(t, e.relay(t, "relay-1", rec, outbox.WithSchedule("@every 1s", 8)))
	e.waitOneDead(t, "the refused message to be dead and the other one sent")
	rows, err := e.pool.Query(t.Context(), `select op || ' ' || setting from `+seen+` order by 1`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"DELETE off", "INSERT on", "INSERT on", "UPDATE off"}; !slices.Equal(got, want) {
		t.Fatalf("writes ran with synchronous_commit %q, want %q", got, want)
	}
}

// TestIntegrationRecordTakesPublishesUnderWay: a record waits (up to the relay's record linger,
// a minute here) for the publishes under way, so that a busy relay writes fewer, larger records;
// a lone publish is recorded at once. A statement trigger counts the deletes: the two messages of
// one Do, one of them held in its publish until the other's is done, go in one delete. (Without
// the wait the first was recorded on its own: 2 deletes.)
func TestIntegrationRecordTakesPublishesUnderWay(t *testing.T) {
	e := newRelayEnv(t)
	deletes := e.noteWrites(t, "deletes", "at timestamptz not null", "delete", "statement", "clock_timestamp()")
	countDeletes := func() int {
		var n int
		if err := e.pool.QueryRow(t.Context(), `select count(*) from `+deletes).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	gate := make(chan struct{})
	rec, _ := e.leadingRelay(t, "@every 1h", outbox.RecordLingerForTest(time.Minute))
	rec.setFail(func(ctx context.Context, m outbox.Message) error {
		if string(m.Body) == "b" {
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	// Alone: recorded at once, not after the minute.
	if err := e.do(t, e.ob, "k0", "lone"); err != nil {
		t.Fatalf("Do: %v", err)
	}
	e.waitEmpty(t, 30*time.Second)
	before := countDeletes()

	err := e.ob.Do(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		for _, k := range []string{"a", "b"} {
			if _, err := e.ob.Enqueue(ctx, tx, outbox.Message{Topic: e.topic, Key: k, Body: []byte(k)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool { return slices.Contains(rec.sent(), "a") },
		"a to be published")
	close(gate)
	e.waitEmpty(t, 30*time.Second)
	if n := countDeletes() - before; n != 1 {
		t.Fatalf("a and b recorded in %d deletes; want 1 (a's record waits for b's publish)", n)
	}
}

// TestIntegrationRelayLeadershipHandoff: two relays, one election. The leader's Run is cancelled
// while messages keep arriving; the other takes over, and every message is published (some
// perhaps twice: those whose delete the first leader did not get to).
func TestIntegrationRelayLeadershipHandoff(t *testing.T) {
	e := newRelayEnv(t)
	fence, err := fence.New(e.pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	recs := map[string]*recorder{"relay-a": {next: mqtest.Publisher(t)}, "relay-b": {next: mqtest.Publisher(t)}}
	relays := map[string]*outbox.Relay{}
	stops := map[string]func(){}
	for id, rec := range recs {
		relays[id] = e.relay(t, id, rec, outbox.FenceForTest(fence), outbox.WithSchedule("@every 1s", 16))
		stops[id] = run(t, relays[id])
	}

	// A producer enqueues steadily, 6 keys, until told to stop.
	const total = 600
	produced := make(chan []string, 1)
	errc := make(chan error, 1)
	go func() {
		var bodies []string
		for i := range total {
			b := fmt.Sprintf("k%d:%03d", i%6, i/6)
			_, err := e.ob.Enqueue(context.Background(), e.pool, outbox.Message{Topic: e.topic, Key: fmt.Sprintf("k%d", i%6), Body: []byte(b)})
			if err != nil {
				errc <- err
				return
			}
			bodies = append(bodies, b)
			if i%20 == 19 {
				time.Sleep(5 * time.Millisecond) // pace the stream (not ordering anything)
			}
		}
		produced <- bodies
	}()

	// Find the leader once it has published a good part of the stream, and cancel its Run.
	var leader, follower string
	testenv.Eventually(t, 30*time.Second, 5*time.Millisecond, func() bool {
		for id, r := range relays {
			if r.Stats().Published >= total/4 {
				leader = id
				return true
			}
		}
		return false
	}, "a leader to publish a quarter of the stream")
	for id := range relays {
		if id != leader {
			follower = id
		}
	}
	if relays[follower].Stats().Published != 0 {
		t.Fatalf("both relays published: %+v, %+v", relays[leader].Stats(), relays[follower].Stats())
	}
	stops[leader]()
	leaderPublished := relays[leader].Stats().Published
	t.Logf("stopped %s after %d publishes", leader, leaderPublished)

	var want []string
	select {
	case want = <-produced:
	case err := <-errc:
		t.Fatalf("producer: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("producer did not finish")
	}
	e.waitEmpty(t, 60*time.Second)
	if relays[follower].Stats().Published == 0 {
		t.Fatal("the follower published nothing")
	}
	if relays[leader].Stats().Published != leaderPublished {
		t.Fatal("the stopped leader published after its Run returned")
	}

	var all []string
	for _, id := range []string{leader, follower} {
		all = append(all, recs[id].sent()...)
	}
	seen := map[string]int{}
	for _, b := range all {
		seen[b]++
	}
	dups := 0
	for _, b := range want {
		switch seen[b] {
		case 0:
			t.Errorf("message %s was never published", b)
		case 1:
		default:
			dups += seen[b] - 1
		}
	}
	if len(seen) != len(want) {
		t.Errorf("%d distinct messages published, %d enqueued", len(seen), len(want))
	}
	t.Logf("%d messages, %d by %s, %d by %s, %d duplicates", len(want), len(recs[leader].sent()), leader,
		len(recs[follower].sent()), follower, dups)
	// Within each relay, each key's messages went out in order; across the handoff a key may
	// restart from its first unacknowledged message.
	for _, id := range []string{leader, follower} {
		checkKeyOrder(t, dedupe(recs[id].sent()), want)
	}
}

// TestIntegrationRelayLeadershipLostMidBatch: when the leader's Run ends while it is publishing a
// batch, the publish in flight is cancelled and nothing more happens to the batch: no further
// publish, no failure recorded, no delete beyond the rows already acknowledged (the pipelined
// relay deletes those as they come). The next leader sends every row still pending, in order.
func TestIntegrationRelayLeadershipLostMidBatch(t *testing.T) {
	e := newRelayEnv(t)
	for i := 1; i <= 5; i++ {
		e.enqueue(t, "k", fmt.Sprintf("k:%d", i))
	}
	e.enqueue(t, "", "-:1")
	first := &recorder{next: mqtest.Publisher(t)}
	blocked := make(chan struct{})
	first.setFail(func(ctx context.Context, m outbox.Message) error {
		if string(m.Body) != "k:2" {
			return nil
		}
		close(blocked)
		<-ctx.Done() // stuck until the relay gives up
		return ctx.Err()
	})
	a := e.relay(t, "relay-a", first, outbox.ConcurrencyForTest(1))
	stopA := run(t, a)
	select {
	case <-blocked:
	case <-time.After(30 * time.Second):
		t.Fatal("the leader never reached k:2")
	}
	stopA()

	if got := first.sent(); !sameSet(got, []string{"k:1", "-:1"}) && !slices.Equal(got, []string{"k:1"}) {
		t.Fatalf("the first leader published %q, want k:1 (and perhaps -:1) before k:2 blocked", got)
	}
	if calls, _ := first.attempts("k:3"); calls != 0 {
		t.Fatal("the first leader went on to k:3 after losing the lead")
	}
	if n := count(t, e.pool, e.ob, "attempts > 0"); n != 0 {
		t.Fatalf("%d rows with a failure recorded: the lost leader wrote one", n)
	}
	pending := count(t, e.pool, e.ob, "attempts = 0 and status = 'pending'")
	if pending < 6-len(first.sent()) || pending > 6 {
		t.Fatalf("%d of 6 rows pending after %q were acknowledged: the lost leader deleted a row it had not sent", pending, first.sent())
	}

	second := &recorder{next: mqtest.Publisher(t)}
	run(t, e.relay(t, "relay-b", second))
	e.waitEmpty(t, 30*time.Second)
	got := second.sent()
	either := append(slices.Clone(first.sent()), got...)
	for _, b := range []string{"k:1", "k:2", "k:3", "k:4", "k:5", "-:1"} {
		if !slices.Contains(either, b) || (b == "k:2" && !slices.Contains(got, b)) {
			t.Fatalf("the second leader published %q after the first had %q: %s missing", got, first.sent(), b)
		}
	}
	if len(got) != pending {
		t.Fatalf("the second leader published %q, want the %d rows still pending", got, pending)
	}
	checkKeyOrder(t, got, []string{"k:1", "k:2", "k:3", "k:4", "k:5"})
}

// TestIntegrationRelayFenced: a relay whose fence was passed by a higher token (a newer leader it
// does not know about) deletes nothing: its delete is refused, and so is every later term of its
// own, which then never starts draining. The relay fences by default, with the txkit_fence table
// of the outbox's schema that Outbox.Migrate created.
func TestIntegrationRelayFenced(t *testing.T) {
	e := newRelayEnv(t)
	schema, _, _ := strings.Cut(e.ob.Table(), ".")
	fence, err := fence.New(e.pool, fence.WithTable(schema, ""))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{next: mqtest.Publisher(t)}
	// Hold the publish until the fence has moved on, so the relay's delete comes after it.
	gate := make(chan struct{})
	rec.setFail(func(context.Context, outbox.Message) error { <-gate; return nil })
	e.enqueue(t, "", "m1")
	r := e.relay(t, "relay-1", rec)
	run(t, r)
	testenv.Eventually(t, 20*time.Second, 5*time.Millisecond, func() bool { return r.Stats().Batches >= 1 },
		"the relay to read the message")
	// A newer leader: an election epoch far above any real one.
	newer := lock.Token{Epoch: 1 << 62, Seq: 1}
	err = pgx.BeginFunc(t.Context(), e.pool, func(tx pgx.Tx) error {
		return fence.Check(t.Context(), tx, "outbox:"+e.ob.Table(), newer)
	})
	if err != nil {
		t.Fatal(err)
	}
	close(gate)
	testenv.Eventually(t, 20*time.Second, 5*time.Millisecond, func() bool { return r.Stats().Fenced >= 2 },
		"the relay's delete and its next term to be refused")
	st := r.Stats()
	if p, _ := e.backlog(t); p != 1 || st.Published != 1 || st.Batches != 1 {
		t.Fatalf("%d pending, Stats %+v: want the row kept, one publish, one batch", p, st)
	}
}

// sameSet reports whether got holds each of want exactly once, in any order.
func sameSet(got, want []string) bool {
	return len(got) == len(want) && slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want)))
}

// checkKeyOrder checks that each key's messages appear in got in the order they have in want.
// Bodies are "key:seq"; key "-" has no order.
func checkKeyOrder(t *testing.T, got, want []string) {
	t.Helper()
	pos := map[string]int{}
	for i, b := range want {
		pos[b] = i
	}
	last := map[string]int{}
	for _, b := range got {
		key := b[:slices.Index([]byte(b), ':')]
		if key == "-" {
			continue
		}
		if p, ok := last[key]; ok && pos[b] < p {
			t.Errorf("key %s: %s published after a later message", key, b)
		}
		last[key] = pos[b]
	}
}

// dedupe drops repeats, keeping first occurrences.
func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, b := range s {
		if !seen[b] {
			seen[b] = true
			out = append(out, b)
		}
	}
	return out
}

// TestIntegrationRelayFenceNotMigrated: a relay whose fence table is missing returns an error from
// Run instead of publishing batches whose rows it could never delete.
func TestIntegrationRelayFenceNotMigrated(t *testing.T) {
	e := newRelayEnv(t)
	fence, err := fence.New(e.pool, fence.WithTable("", "not_migrated"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{next: mqtest.Publisher(t)}
	e.enqueue(t, "", "m1")
	r := e.relay(t, "relay-1", rec, outbox.FenceForTest(fence))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = r.Run(ctx)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "Fence.Migrate") {
		t.Fatalf("Run = %v, want an error naming Fence.Migrate before the deadline", err)
	}
	if calls := rec.snapshot(); len(calls) != 0 {
		t.Fatalf("published %d messages without a usable fence", len(calls))
	}
}

// TestIntegrationRelayListenerReconnects: when the server ends the relay's listening connection,
// the relay opens a new one, and notifications wake it again (the poll is an hour away).
func TestIntegrationRelayListenerReconnects(t *testing.T) {
	e := newRelayEnv(t)
	rec := &recorder{next: mqtest.Publisher(t)}
	r := e.relay(t, "relay-1", rec, outbox.WithSchedule("@every 1h", 128))
	run(t, r)
	listener := func() (pid int32) {
		err := e.pool.QueryRow(context.Background(), `select coalesce(max(pid), 0) from pg_stat_activity
			where datname = current_database() and query = $1`, "listen "+pgx.Identifier{e.ob.Channel()}.Sanitize()).Scan(&pid)
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	var old int32
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool { old = listener(); return old != 0 },
		"the relay to listen")
	w0 := r.Stats().Wakeups
	if _, err := e.pool.Exec(t.Context(), "select pg_terminate_backend($1)", old); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool { p := listener(); return p != 0 && p != old },
		"the relay to listen on a new connection")
	// The relay drains once after reconnecting (notifications may have been missed meanwhile);
	// wait for that, so that only a notification can publish the next message.
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool { return r.Stats().Wakeups > w0 },
		"the relay to drain after reconnecting")
	e.enqueue(t, "", "after-reconnect")
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool { return slices.Contains(rec.sent(), "after-reconnect") },
		"the message to be published without a poll")
}

// TestIntegrationRelayOutageOver: while every publish fails (the broker is away), the messages of
// several keys gather a long backoff; the first publish acknowledged after that makes them due at
// once, so they go out without waiting their backoff out. A message that fails on its own while
// others go through keeps its backoff.
func TestIntegrationRelayOutageOver(t *testing.T) {
	e := newRelayEnv(t)
	rec := &recorder{next: mqtest.Publisher(t)}
	var down sync.Mutex // guards isDown: while it is true, the broker is away
	isDown := true
	rec.setFail(func(_ context.Context, m outbox.Message) error {
		down.Lock()
		defer down.Unlock()
		if isDown || string(m.Body) == "poison" {
			return errInjected
		}
		return nil
	})
	for _, k := range []string{"a", "b", "c"} {
		e.enqueue(t, k, k+":1")
	}
	// A backoff far longer than the test: only the end of the outage can make them due again.
	r := e.relay(t, "relay-1", rec, outbox.WithRetry(16, time.Hour, time.Hour), outbox.WithSchedule("@every 100ms", 128))
	run(t, r)
	testenv.Eventually(t, 20*time.Second, 5*time.Millisecond, func() bool { return r.Stats().Failed >= 3 },
		"the three messages to fail")
	down.Lock()
	isDown = false
	down.Unlock()
	e.enqueue(t, "d", "d:1")
	e.waitEmpty(t, 20*time.Second)
	if st := r.Stats(); st.Rescued != 3 {
		t.Fatalf("Stats = %+v, want 3 rescued", st)
	}
	if sent := rec.sent(); !sameSet(sent, []string{"a:1", "b:1", "c:1", "d:1"}) || sent[0] != "d:1" {
		t.Fatalf("published %q, want d:1 first, then a:1, b:1, c:1", sent)
	}

	// One message failing while others go through is not an outage: it waits its backoff.
	e.enqueue(t, "p", "poison")
	testenv.Eventually(t, 20*time.Second, 5*time.Millisecond, func() bool { _, f := rec.attempts("poison"); return f == 1 },
		"the poison message to fail once")
	e.enqueue(t, "e", "e:1")
	testenv.Eventually(t, 20*time.Second, 5*time.Millisecond, func() bool { return slices.Contains(rec.sent(), "e:1") },
		"e:1 to be published")
	e.enqueue(t, "f", "f:1")
	testenv.Eventually(t, 20*time.Second, 5*time.Millisecond, func() bool { return slices.Contains(rec.sent(), "f:1") },
		"f:1 to be published")
	if calls, _ := rec.attempts("poison"); calls != 1 {
		t.Fatalf("the poison message was tried %d times within its hour of backoff", calls)
	}
	if st := r.Stats(); st.Rescued != 3 {
		t.Fatalf("Stats = %+v, want still 3 rescued", st)
	}
}
