package notify

import "sync"

// grouped shares one statement among the concurrent [Notifier.Deliver] calls of a process, as the
// coordinators' group commit does (internal/core/groupcommit.go): a call that finds no statement
// of its kind in flight sends its own at once, alone; calls that arrive while one is in flight
// queue, and when it ends the first of them sends everything queued (up to max) as one statement —
// one round trip, one commit — and hands its turn on. A lone call never waits for a partner; a
// queued one waits for the statement in flight and its own.
type grouped[T, R any] struct {
	max   int
	flush func(items []T) ([]R, error) // one result per item, in order; its own bounded context
	mu    sync.Mutex
	busy  bool
	queue []*groupCall[T, R]
}

type groupCall[T, R any] struct {
	item T
	res  R
	err  error
	wake chan bool // true: send the queue; false: res and err are set
}

// do sends item, with the items of the calls queued beside it, and returns its result.
func (g *grouped[T, R]) do(item T) (R, error) {
	c := &groupCall[T, R]{item: item, wake: make(chan bool, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, c)
	if g.busy {
		g.mu.Unlock()
		if !<-c.wake { // flushed by another call
			return c.res, c.err
		}
		g.mu.Lock() // our turn: c is first in the queue
	}
	g.busy = true
	n := min(len(g.queue), g.max)
	batch := g.queue[:n:n]
	g.queue = append([]*groupCall[T, R](nil), g.queue[n:]...)
	g.mu.Unlock()

	items := make([]T, len(batch))
	for i, b := range batch {
		items[i] = b.item
	}
	res, err := g.flush(items)
	for i, b := range batch {
		if err != nil {
			b.err = err
		} else {
			b.res = res[i]
		}
		if b != c {
			b.wake <- false
		}
	}

	g.mu.Lock()
	if len(g.queue) > 0 {
		g.queue[0].wake <- true // the next one sends what queued meanwhile
	} else {
		g.busy = false
	}
	g.mu.Unlock()
	return c.res, c.err
}
