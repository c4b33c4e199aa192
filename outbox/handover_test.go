package outbox_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/testkit/mqtest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/outbox"
)

// countingPublisher counts the acknowledged publishes of each message ID on the way to the real
// publisher.
type countingPublisher struct {
	next outbox.Publisher
	mu   sync.Mutex
	n    map[uuid.UUID]int
}

func (p *countingPublisher) Publish(ctx context.Context, m outbox.Message) error {
	if err := p.next.Publish(ctx, m); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n[m.ID]++
	return nil
}

// A relay that gives partitions up to balance the load records the publishes it has in flight
// before it resigns them, so the relay that takes them over publishes none of them again: two
// relays in one process (each with a ZooKeeper session of its own), 6 partitions, messages
// enqueued without pause while the second relay joins and the first hands 3 partitions over.
// Every message is published exactly once. (Before the hand-over waited for the records, the
// in-flight publishes of the partitions given up were published again by the next leader:
// duplicates, never a loss.) The load enqueues with a plain Enqueue, then in Outbox.Do, whose
// hand-overs go to whichever relay leads the partition at the commit.
func TestIntegrationRelayHandOverRecordsFirst(t *testing.T) {
	for _, mode := range []string{"Enqueue", "Do"} {
		t.Run(mode, func(t *testing.T) { handOverRecordsFirst(t, mode == "Do") })
	}
}

func handOverRecordsFirst(t *testing.T, do bool) {
	const (
		parts = 6
		keys  = 24
	)
	ctx := t.Context()
	pg := testenv.PG(t)
	ob := partitionedOutbox(t, pg, parts)
	topic := testenv.Topic(t)
	paths := partitionElections(testenv.ZKRoot(t)+"/relay", parts)
	pub := &countingPublisher{next: mqtest.Publisher(t), n: map[uuid.UUID]int{}}
	relay := func(id string) *outbox.Relay {
		sess := zkenv.Session(t)
		r, err := outbox.NewRelay(ob, pub, outbox.WithSchedule("@every 1s", 16), outbox.WithLogger(testenv.Logger(t).With("relay", id)),
			outbox.WithElectors(func(p int) (lock.Elector, error) { return zklock.NewElector(sess, paths[p], id) },
				outbox.ContenderCount(sess.Inspector(), paths...)))
		if err != nil {
			t.Fatal(err)
		}
		testenv.Run(t, r.Run)
		return r
	}

	a := relay("a")
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool { return len(a.Led()) == parts },
		"relay a to lead all %d partitions", parts)

	// The load: one message per key per transaction, without pause, until stopped between two
	// transactions (so that every transaction's outcome is known).
	var (
		enqueued int
		stop     atomic.Bool
	)
	loaded := make(chan error, 1)
	go func() {
		for round := 0; !stop.Load(); round++ {
			load := func(ctx context.Context, tx pgx.Tx) error {
				for k := range keys {
					if _, err := ob.Enqueue(ctx, tx, outbox.Message{Topic: topic, Key: fmt.Sprintf("k%02d", k), Body: []byte(fmt.Sprint(round))}); err != nil {
						return err
					}
				}
				return nil
			}
			var err error
			if do {
				err = ob.Do(ctx, load)
			} else {
				err = pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error { return load(ctx, tx) })
			}
			if err != nil {
				loaded <- err
				return
			}
			enqueued += keys
		}
		loaded <- nil
	}()
	stopLoad := func() error {
		stop.Store(true)
		return <-loaded
	}

	published := func() int {
		pub.mu.Lock()
		defer pub.mu.Unlock()
		return len(pub.n)
	}
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool { return published() >= 200 },
		"relay a to publish under load")
	b := relay("b")
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool { return len(a.Led()) == parts/2 && len(b.Led()) == parts/2 },
		"the relays to lead %d partitions each", parts/2)
	mark := published()
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool { return published() >= mark+200 },
		"both relays to publish under load")
	if err := stopLoad(); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	testenv.Eventually(t, 60*time.Second, 50*time.Millisecond, func() bool {
		var n int
		if err := pg.Pool.QueryRow(ctx, `select count(*) from `+ob.Table()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	}, "the outbox to be drained")

	pub.mu.Lock()
	defer pub.mu.Unlock()
	var twice int
	for _, n := range pub.n {
		if n > 1 {
			twice++
		}
	}
	t.Logf("%d messages enqueued, %d published, %d of them more than once; a leads %v, b leads %v",
		enqueued, len(pub.n), twice, a.Led(), b.Led())
	if len(pub.n) != enqueued {
		t.Fatalf("%d messages published, want the %d enqueued", len(pub.n), enqueued)
	}
	if twice > 0 {
		t.Fatalf("%d messages published more than once across the hand-over", twice)
	}
}
