package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/testkit/mqtest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
)

// do enqueues one message in its own Outbox.Do transaction on ob.
func (e *relayEnv) do(t *testing.T, ob *outbox.Outbox, key, body string) error {
	t.Helper()
	return ob.Do(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := ob.Enqueue(ctx, tx, outbox.Message{Topic: e.topic, Key: key, Body: []byte(body)})
		return err
	})
}

// otherProcess returns an outbox on e's table as another process would have it, and an env whose
// relays run on it.
func (e *relayEnv) otherProcess(t *testing.T, opts ...outbox.Option) (*outbox.Outbox, *relayEnv) {
	t.Helper()
	schema := e.ob.Table()[:len(e.ob.Table())-len(outbox.DefaultTable)-1]
	ob, err := outbox.New(e.pool, append([]outbox.Option{outbox.WithTable(schema, "")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	o := *e
	o.ob = ob
	return ob, &o
}

// leadingRelay runs a relay of e on schedule, publishing through a recorder, and waits until it
// leads.
func (e *relayEnv) leadingRelay(t *testing.T, schedule string, opts ...outbox.RelayOption) (*recorder, *outbox.Relay) {
	t.Helper()
	rec := &recorder{next: mqtest.Publisher(t)}
	r := e.relay(t, "relay-1", rec, append([]outbox.RelayOption{outbox.WithSchedule(schedule, 128)}, opts...)...)
	run(t, r)
	waitLeads(t, r)
	return rec, r
}

func waitLeads(t *testing.T, r *outbox.Relay) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool {
		return len(r.Led()) == 1 && r.Stats().Wakeups > 0
	}, "the relay to lead")
}

// TestIntegrationDoHandsOverWithoutReading: messages enqueued in Outbox.Do while this process's
// relay leads go to the publisher without the relay reading the table (no NOTIFY woke it, and the
// poll is an hour away).
func TestIntegrationDoHandsOverWithoutReading(t *testing.T) {
	e := newRelayEnv(t)
	rec, r := e.leadingRelay(t, "@every 1h")
	// A first message, published once the term's first read (which may take it) is over.
	if err := e.do(t, e.ob, "warm", "warm:0"); err != nil {
		t.Fatalf("Do: %v", err)
	}
	e.waitEmpty(t, 30*time.Second)
	before := r.Stats()
	want := []string{"warm:0"}
	for i := range 30 {
		key := fmt.Sprintf("k%d", i)
		if i%5 == 0 {
			key = "" // no order: always handed over
		}
		b := fmt.Sprintf("%s:%d", key, i)
		want = append(want, b)
		if err := e.do(t, e.ob, key, b); err != nil {
			t.Fatalf("Do: %v", err)
		}
	}
	e.waitEmpty(t, 30*time.Second)
	if got := rec.sent(); !sameSet(got, want) {
		t.Fatalf("published %q, want %q", got, want)
	}
	if st := r.Stats(); st.Batches != before.Batches || st.Handed != before.Handed+30 || st.Published != int64(len(want)) {
		t.Fatalf("Stats = %+v, %+v before: want every message handed over (no batch read), %d published", st, before, len(want))
	}
}

// TestIntegrationDoSavepointNotHanded: a message enqueued with Do's tx while a savepoint of it is
// open is not handed over: rolled back with the savepoint, it is never published; released, it
// is published from the table like any other. Before Do counted savepoints, the rolled-back one
// was handed over and published though its row never committed.
func TestIntegrationDoSavepointNotHanded(t *testing.T) {
	e := newRelayEnv(t)
	rec, _ := e.leadingRelay(t, "@every 200ms")
	enqueue := func(ctx context.Context, tx pgx.Tx, body string) error {
		_, err := e.ob.Enqueue(ctx, tx, outbox.Message{Topic: e.topic, Body: []byte(body)})
		return err
	}
	err := e.ob.Do(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if err := enqueue(ctx, tx, "rolled-back"); err != nil { // the outer tx, inside the savepoint
			return err
		}
		if err := sp.Rollback(ctx); err != nil {
			return err
		}
		if err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error { return enqueue(ctx, tx, "released") }); err != nil {
			return err
		}
		return enqueue(ctx, tx, "after")
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	e.waitEmpty(t, 30*time.Second)
	if got := rec.sent(); !sameSet(got, []string{"released", "after"}) {
		t.Fatalf("published %q, want released and after (the rolled-back message never committed)", got)
	}
}

// TestIntegrationDoWakesLeaderElsewhere: Do in a process whose relay does not lead (here: has
// none) wakes the leader with a NOTIFY after its commit; the leader's poll is an hour away.
func TestIntegrationDoWakesLeaderElsewhere(t *testing.T) {
	e := newRelayEnv(t)
	rec, r := e.leadingRelay(t, "@every 1h")
	other, _ := e.otherProcess(t)
	for i := range 3 {
		if err := e.do(t, other, "k", fmt.Sprintf("k:%d", i)); err != nil {
			t.Fatalf("Do: %v", err)
		}
	}
	e.waitEmpty(t, 30*time.Second)
	if got := rec.sent(); !slices.Equal(got, []string{"k:0", "k:1", "k:2"}) {
		t.Fatalf("published %q, want k:0, k:1, k:2", got)
	}
	if st := r.Stats(); st.Batches == 0 {
		t.Fatalf("Stats = %+v: want the messages read after a wake-up", st)
	}
}

// TestIntegrationRelayPerKeyOrderUnderFailures: keys enqueued one message after the other, some
// messages failing their first publishes, are published in order — enqueued in Outbox.Do (a
// message whose key has an earlier one pending waits for the relay's read, which holds it behind
// the earlier one) or with a plain Enqueue. Enqueue's case failed before the relay left out of a
// read the rows of a key whose failure was recorded while the read ran (its snapshot could
// predate the failure and return the key's later rows; "k1:3 published after a later message").
func TestIntegrationRelayPerKeyOrderUnderFailures(t *testing.T) {
	for _, mode := range []string{"Do", "Enqueue"} {
		t.Run(mode, func(t *testing.T) {
			e := newRelayEnv(t)
			enqueue := func(key, body string) error {
				if mode == "Do" {
					return e.do(t, e.ob, key, body)
				}
				_, err := e.ob.Enqueue(context.Background(), e.pool, outbox.Message{Topic: e.topic, Key: key, Body: []byte(body)})
				return err
			}
			perKeyOrderUnderFailures(t, e, enqueue)
		})
	}
}

func perKeyOrderUnderFailures(t *testing.T, e *relayEnv, enqueue func(key, body string) error) {
	rec, r := e.leadingRelay(t, "@every 100ms", outbox.WithRetry(16, 5*time.Millisecond, 20*time.Millisecond))
	var mu sync.Mutex
	failed := map[string]int{}
	rec.setFail(func(_ context.Context, m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		b := string(m.Body)
		var seq int
		_, _ = fmt.Sscanf(b[slices.Index([]byte(b), ':')+1:], "%d", &seq)
		if seq%7 == 3 && failed[b] < 2 {
			failed[b]++
			return errInjected
		}
		return nil
	})
	want := produce(t, 6, 30, func(k, _ int) string { return fmt.Sprintf("k%d", k) },
		func(_ int, key, body string) error { return enqueue(key, body) })
	e.waitEmpty(t, 60*time.Second)
	got := rec.sent()
	if !sameSet(dedupe(got), want) {
		t.Fatalf("published %d distinct of %d: %q", len(dedupe(got)), len(want), got)
	}
	checkKeyOrder(t, got, want)
	if st := r.Stats(); st.Failed == 0 {
		t.Fatalf("Stats = %+v: no publish failed, the test tested nothing", st)
	}
}

// TestIntegrationDoEnqueuerDiesAfterCommit: a process that commits in Do and dies before handing
// the message over (nor sending the NOTIFY for a relay elsewhere) loses nothing: the leader's poll
// publishes it.
func TestIntegrationDoEnqueuerDiesAfterCommit(t *testing.T) {
	e := newRelayEnv(t)
	rec, r := e.leadingRelay(t, "@every 1s")
	dying, _ := e.otherProcess(t, outbox.HandOffForTest(false))
	if err := e.do(t, dying, "k", "k:1"); err != nil {
		t.Fatalf("Do: %v", err)
	}
	e.waitEmpty(t, 30*time.Second)
	if got := rec.sent(); !slices.Equal(got, []string{"k:1"}) {
		t.Fatalf("published %q, want k:1", got)
	}
	if st := r.Stats(); st.Batches != 1 {
		t.Fatalf("Stats = %+v: want the message read by the poll (1 batch)", st)
	}
}

// TestIntegrationDoRaceOnce: two processes enqueue in Do at once, each with a relay, while the
// leader polls every 10 ms, so that its reads race the hand-overs: every message is published
// exactly once (the leader holds what it read or was handed; the other process, not leading,
// wakes it with a NOTIFY after its commit).
func TestIntegrationDoRaceOnce(t *testing.T) {
	e := newRelayEnv(t)
	obB, eB := e.otherProcess(t)
	rec := &recorder{next: mqtest.Publisher(t)}
	opts := []outbox.RelayOption{outbox.WithSchedule("@every 10ms", 128)}
	ra := e.relay(t, "relay-a", rec, opts...)
	rb := eB.relay(t, "relay-b", rec, opts...)
	run(t, ra)
	run(t, rb)
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool {
		return len(ra.Led())+len(rb.Led()) == 1
	}, "a relay to lead")
	key := func(w, i int) string {
		if i%3 == 0 {
			return fmt.Sprintf("w%d-%d", w, i) // a key of its own: handed over by its process's leader
		}
		return fmt.Sprintf("w%d", w)
	}
	want := produce(t, 8, 40, key, func(w int, key, body string) error {
		if w%2 == 1 {
			return e.do(t, obB, key, body)
		}
		return e.do(t, e.ob, key, body)
	})
	e.waitEmpty(t, 60*time.Second)
	got := rec.sent()
	if len(got) != len(want) || !sameSet(got, want) {
		t.Fatalf("published %d times for %d messages (each must be published once): %q", len(got), len(want), got)
	}
	checkKeyOrder(t, got, want)
}

// produce runs workers goroutines at once, each enqueuing per messages one after the other with
// enqueue: message i of worker w has the key key(w, i) and the body "key:i". It returns the bodies
// and fails the test if an enqueue failed.
func produce(t *testing.T, workers, per int, key func(w, i int) string, enqueue func(w int, key, body string) error) []string {
	t.Helper()
	var (
		wg   sync.WaitGroup
		errc = make(chan error, workers)
		want []string
	)
	for w := range workers {
		for i := range per {
			want = append(want, fmt.Sprintf("%s:%d", key(w, i), i))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				if err := enqueue(w, key(w, i), fmt.Sprintf("%s:%d", key(w, i), i)); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("enqueue: %v", err)
	}
	return want
}

// TestIntegrationDoRoundTrips: a Do of one business insert and one Enqueue sends the begin with
// the insert, then the Enqueue with the commit — two round trips, as a bare transaction's begin
// (with its insert) and commit — and, with no relay of this process leading, the NOTIFY after the
// commit. Before the Enqueue rode with the commit: 2 statements and 2 batches.
func TestIntegrationDoRoundTrips(t *testing.T) {
	pg := testenv.PG(t)
	pool, rt := testenv.CountingPool(t, pg)
	ob, err := outbox.New(pool, outbox.WithTable(pg.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `create table orders (id int primary key)`); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		q, b := rt.During(func() {
			err = ob.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `insert into orders values ($1)`, i); err != nil {
					return err
				}
				_, err := ob.Enqueue(ctx, tx, outbox.Message{Topic: "orders", Key: fmt.Sprint(i), Body: []byte("o")})
				return err
			})
		})
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		if q != 0 || b != 3 {
			t.Fatalf("Do sent %d statements and %d batches; want 0 and 3 (begin with the insert; the Enqueue with the commit; the NOTIFY after the commit)", q, b)
		}
	}
	if n := count(t, pool, ob, ""); n != 3 {
		t.Fatalf("%d messages in the outbox; want 3", n)
	}
}

// TestIntegrationDoDuplicate: in Do, Enqueue of an ID already in the outbox returns nil (its insert
// goes out with the commit) and Do returns the error, wrapping ErrDuplicate, committing nothing
// of the transaction; when a statement follows the Enqueue, that statement returns it.
func TestIntegrationDoDuplicate(t *testing.T) {
	ob, pool := newOutbox(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `create table orders (id int primary key)`); err != nil {
		t.Fatal(err)
	}
	taken, err := ob.Enqueue(ctx, pool, outbox.Message{Topic: "orders", Body: []byte("first")})
	if err != nil {
		t.Fatal(err)
	}
	var enqueueErr error
	err = ob.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `insert into orders values ($1)`, 1); err != nil {
			return err
		}
		if _, err := ob.Enqueue(ctx, tx, outbox.Message{Topic: "orders", Key: "k"}); err != nil {
			return err
		}
		_, enqueueErr = ob.Enqueue(ctx, tx, outbox.Message{ID: taken, Topic: "orders"})
		return enqueueErr
	})
	if enqueueErr != nil || !errors.Is(err, outbox.ErrDuplicate) {
		t.Fatalf("Do with a duplicate id: Enqueue %v, Do %v; want nil from Enqueue and ErrDuplicate from Do", enqueueErr, err)
	}
	var stmtErr error
	err = ob.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := ob.Enqueue(ctx, tx, outbox.Message{ID: taken, Topic: "orders"}); err != nil {
			return err
		}
		_, stmtErr = tx.Exec(ctx, `insert into orders values ($1)`, 2)
		return stmtErr
	})
	if !errors.Is(stmtErr, outbox.ErrDuplicate) || !errors.Is(err, outbox.ErrDuplicate) {
		t.Fatalf("a statement after the Enqueue of a duplicate id: %v, Do %v; want ErrDuplicate from both", stmtErr, err)
	}
	if n, orders := count(t, pool, ob, ""), countOrders(t, pool); n != 1 || orders != 0 {
		t.Fatalf("%d messages and %d orders after the failed Do's; want 1 and 0", n, orders)
	}
}

// countOrders counts the rows of the tests' business table "orders".
func countOrders(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `select count(*) from orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestIntegrationDoEnqueueOrder: Do's Enqueue calls store their rows in call order — sent with the
// next statement, before it, also when a savepoint's Enqueue (sent at once) comes between — a later
// statement sees the row, and the stored body is the one given, though the caller reuses its buffer
// before the insert goes out.
func TestIntegrationDoEnqueueOrder(t *testing.T) {
	ob, pool := newOutbox(t)
	ctx := t.Context()
	buf := []byte("a")
	err := ob.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		enqueue := func(tx pgx.Tx) error {
			_, err := ob.Enqueue(ctx, tx, outbox.Message{Topic: "t", Key: "k", Body: buf})
			return err
		}
		if err := enqueue(tx); err != nil {
			return err
		}
		buf[0] = 'b'
		if err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error { return enqueue(sp) }); err != nil {
			return err
		}
		buf[0] = 'c'
		if err := enqueue(tx); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `select count(*) from `+pgx.Identifier(strings.Split(ob.Table(), ".")).Sanitize()+
			` where key = $1`, "k").Scan(&n); err != nil {
			return err
		}
		if n != 3 {
			return fmt.Errorf("a statement after the Enqueue calls saw %d rows; want 3", n)
		}
		buf[0] = 'd'
		return enqueue(tx)
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	buf[0] = 'e'
	rows, err := pool.Query(ctx, `select convert_from(body, 'UTF8') from `+pgx.Identifier(strings.Split(ob.Table(), ".")).Sanitize()+` order by id`)
	if err != nil {
		t.Fatal(err)
	}
	bodies, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(bodies, []string{"a", "b", "c", "d"}) {
		t.Fatalf("stored bodies in id order %q; want a, b, c, d", bodies)
	}
}

// TestIntegrationEnqueuePartitionMismatch: an outbox whose partition count is not the one stored
// with the table enqueues nothing: Enqueue refuses with ErrInvalidOption in a transaction of the
// caller's, and in Do, where the insert goes out with the commit, Do does and commits nothing.
func TestIntegrationEnqueuePartitionMismatch(t *testing.T) {
	ob, pool := newOutbox(t, outbox.WithPartitions(12))
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `create table orders (id int primary key)`); err != nil {
		t.Fatal(err)
	}
	schema := strings.Split(ob.Table(), ".")[0]
	other, err := outbox.New(pool, outbox.WithTable(schema, ""), outbox.WithPartitions(16)) // not migrated
	if err != nil {
		t.Fatal(err)
	}
	msg := outbox.Message{Topic: "t", Key: "k"}
	if _, err := other.Enqueue(ctx, pool, msg); !errors.Is(err, outbox.ErrInvalidOption) {
		t.Fatalf("Enqueue with 16 partitions into a table of 12: %v; want ErrInvalidOption", err)
	}
	err = other.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `insert into orders values ($1)`, 1); err != nil {
			return err
		}
		_, err := other.Enqueue(ctx, tx, msg)
		return err
	})
	if !errors.Is(err, outbox.ErrInvalidOption) || !strings.Contains(err.Error(), "split into 12 partitions") {
		t.Fatalf("Do with 16 partitions into a table of 12: %v; want ErrInvalidOption naming the 12", err)
	}
	if n, orders := count(t, pool, ob, ""), countOrders(t, pool); n != 0 || orders != 0 {
		t.Fatalf("%d messages and %d orders after the refused Do; want none", n, orders)
	}
}

// TestIntegrationDoAllocs bounds the allocations of a Do of one business insert and one Enqueue
// (no relay: nothing handed over): 83 before the message id was sent as a pgtype.UUID (a
// uuid.UUID goes through its driver.Valuer, whose string pgx fails to encode as a uuid and parses
// back: 18 allocations), 79 after, with the insert deferred to the commit (its batch costs pgx
// more allocations than a commit sent alone).
func TestIntegrationDoAllocs(t *testing.T) {
	ob, pool := newOutbox(t, outbox.HandOffForTest(false))
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `create table orders (id bigint primary key)`); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 256)
	var n int64
	do := func() {
		n++
		if err := ob.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `insert into orders values ($1)`, n); err != nil {
				return err
			}
			_, err := ob.Enqueue(ctx, tx, outbox.Message{Topic: "t", Key: "k", Body: body})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		do()
	}
	if a := testing.AllocsPerRun(200, do); a > 81 {
		t.Fatalf("%.0f allocations per Do; want at most 81", a)
	}
}
