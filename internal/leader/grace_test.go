package leader_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
)

// termEvent is what the test's works saw of a term.
type termEvent struct {
	who, what string // what: "start", "yield", "end" (the work returned)
	part      int
	at        time.Time
	ctxDone   bool // at "end": the term's ctx had ended
}

type termLog struct {
	mu sync.Mutex
	ev []termEvent
}

func (l *termLog) add(who, what string, part int, ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ev = append(l.ev, termEvent{who: who, what: what, part: part, at: time.Now(), ctxDone: ctx.Err() != nil})
}

func (l *termLog) events() []termEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]termEvent(nil), l.ev...)
}

// With WithGrace, an instance giving a partition up to balance the load closes the term's Yield
// and resigns only once the work has returned; a work that ignores Yield has its ctx ended at the
// grace's end. Two instances in one process (a ZooKeeper session each), 2 partitions: a leads
// both, b joins, a gives one up.
func TestIntegrationShardsGrace(t *testing.T) {
	const (
		parts = 2
		grace = 1500 * time.Millisecond
		busy  = 300 * time.Millisecond // what a yielding work still has in hand
	)
	for _, honour := range []bool{true, false} {
		name := map[bool]string{true: "work returns on yield", false: "work ignores yield"}[honour]
		t.Run(name, func(t *testing.T) {
			db := testenv.PG(t)
			f := migratedFence(t, db)
			base := testenv.ZKRoot(t) + "/grace"
			var names []string
			for p := range parts {
				names = append(names, leader.PartitionName(base, p))
			}
			log := &termLog{}
			instance := func(who string) *leader.Shards {
				sess := zkenv.Session(t)
				s, err := leader.NewShards(parts, func(p int) (lock.Elector, error) {
					return zklock.NewElector(sess, leader.PartitionName(base, p), who)
				}, db.Pool, f, "grace-test", func(ctx context.Context, term *leader.Term) error {
					p := term.Partition()
					log.add(who, "start", p, ctx)
					defer func() { log.add(who, "end", p, ctx) }()
					if !honour {
						<-ctx.Done()
						return nil
					}
					select {
					case <-ctx.Done():
						return nil
					case <-term.Yield():
					}
					log.add(who, "yield", p, ctx)
					in := time.NewTimer(busy) // the work in hand, finished before returning
					defer in.Stop()
					select {
					case <-ctx.Done():
					case <-in.C:
					}
					return nil
				}, leader.WithMembership(leader.ContenderMembership(sess.Inspector(), names...)),
					leader.WithBalanceEvery(100*time.Millisecond), leader.WithPause(300*time.Millisecond),
					leader.WithGrace(grace), leader.WithLogger(testenv.Logger(t)), leader.WithName(who))
				if err != nil {
					t.Fatal(err)
				}
				testenv.Run(t, s.Run)
				return s
			}
			a := instance("a")
			testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool { return len(a.Led()) == parts },
				"a to lead both partitions")
			joined := time.Now()
			b := instance("b")
			// The partition b took (Led lists it from before its fence check, so wait for b's work too).
			p := -1
			testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
				led := b.Led()
				if len(a.Led()) != 1 || len(led) != 1 {
					return false
				}
				for _, e := range log.events() {
					if e.who == "b" && e.what == "start" && e.part == led[0] {
						p = led[0]
						return true
					}
				}
				return false
			}, "a and b to lead one partition each, b working in it")

			// a's term of it, then b's.
			var aYield, aEnd, bStart *termEvent
			for _, e := range log.events() {
				switch {
				case e.part != p:
				case e.who == "a" && e.what == "yield":
					aYield = &e
				case e.who == "a" && e.what == "end":
					aEnd = &e
				case e.who == "b" && e.what == "start" && bStart == nil:
					bStart = &e
				}
			}
			if aEnd == nil || bStart == nil {
				t.Fatalf("partition %d: a's end %v, b's start %v", p, aEnd, bStart)
			}
			if bStart.at.Before(aEnd.at) {
				t.Fatalf("partition %d: b started at %v, before a's work returned at %v", p, bStart.at, aEnd.at)
			}
			if honour {
				if aYield == nil {
					t.Fatalf("partition %d: a's work never saw Yield", p)
				}
				if aEnd.ctxDone {
					t.Fatalf("partition %d: a's term ctx ended before its work returned from yielding", p)
				}
				if d := aEnd.at.Sub(aYield.at); d < busy || d > grace {
					t.Fatalf("partition %d: a's work returned %v after Yield, want its %v of work, under the %v grace", p, d, busy, grace)
				}
				return
			}
			// Ignored, Yield left the term running until the grace ended its ctx.
			if !aEnd.ctxDone {
				t.Fatalf("partition %d: a's work returned without its ctx ending", p)
			}
			if d := bStart.at.Sub(joined); d < grace {
				t.Fatalf("partition %d: b took over %v after it joined, before a's %v grace could end", p, d, grace)
			}
		})
	}
}
