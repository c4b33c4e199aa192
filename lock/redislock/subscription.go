package redislock

import (
	"context"
	"log/slog"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// subscription is one Redis instance's pub/sub subscription to the release channel, shared by
// every mutex of a [Client] or [Redlock]. The first waiter starts it; it hands each release
// message (whose payload is the lock's name) to notify. go-redis re-subscribes after a dropped
// connection; the messages published meanwhile are lost, so each re-subscription notifies every
// name (all).
type subscription struct {
	rdb     redis.UniversalClient
	channel string
	log     *slog.Logger
	wg      *sync.WaitGroup // the owner's: close waits for the dispatcher
	notify  func(name string, all bool)

	mu     sync.Mutex
	ps     *redis.PubSub
	ready  chan struct{} // closed when the server confirmed the first SUBSCRIBE
	closed bool
}

func newSubscription(rdb redis.UniversalClient, channel string, log *slog.Logger, wg *sync.WaitGroup, notify func(name string, all bool)) *subscription {
	return &subscription{rdb: rdb, channel: channel, log: log, wg: wg, notify: notify, ready: make(chan struct{})}
}

// start starts the subscription if nothing did yet, and returns a channel closed once it is
// active.
func (s *subscription) start() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ps == nil && !s.closed {
		s.ps = s.rdb.Subscribe(context.Background()) // no channel yet: no round trip under s.mu
		s.wg.Add(1)
		go s.dispatch(s.ps)
	}
	return s.ready
}

func (s *subscription) dispatch(ps *redis.PubSub) {
	defer s.wg.Done()
	// When Redis does not answer, SUBSCRIBE fails but go-redis keeps the channel and subscribes
	// again each time it reconnects; the confirmation then comes through msgs.
	if err := ps.Subscribe(context.Background(), s.channel); err != nil {
		s.log.Debug("subscribing to the release channel", "channel", s.channel, "err", err)
	}
	msgs := ps.ChannelWithSubscriptions()
	confirmed := false
	for m := range msgs {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			if !confirmed {
				confirmed = true
				close(s.ready)
				continue
			}
			s.log.Debug("release channel subscribed again; waking the waiters", "channel", s.channel)
			s.notify("", true)
		case *redis.Message:
			s.notify(m.Payload, false)
		}
	}
}

// close ends the subscription; the dispatcher returns when go-redis closes its channel.
func (s *subscription) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if s.ps != nil {
		if err := s.ps.Close(); err != nil {
			s.log.Debug("closing the release subscription", "channel", s.channel, "err", err)
		}
	}
}

// waiters are the mutexes of a [Client] or [Redlock] waiting for a lock, per name, in the order
// they began to wait. A release message wakes only the first of its name — the longest waiting,
// which stays first while it tries — so that a release sets off one attempt per Client, not one per
// waiting goroutine (Redlock's copies of one release, one per instance, reach the same waiter).
// The others wake by their own timers, or when they come first.
type waiters struct {
	mu     sync.Mutex
	byName map[string][]chan struct{}
}

// add queues c (give it a buffer of 1) for name.
func (w *waiters) add(name string, c chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byName == nil {
		w.byName = map[string][]chan struct{}{}
	}
	w.byName[name] = append(w.byName[name], c)
}

// remove takes c out of name's queue. A wake-up c received and did not use is handed to the
// next waiter.
func (w *waiters) remove(name string, c chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := slices.DeleteFunc(w.byName[name], func(x chan struct{}) bool { return x == c })
	if len(q) == 0 {
		delete(w.byName, name)
		return
	}
	w.byName[name] = q
	select {
	case <-c:
		signal(q[0])
	default:
	}
}

// wake signals the first waiter of name, or of every name when all is set.
func (w *waiters) wake(name string, all bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if all {
		for _, q := range w.byName {
			signal(q[0])
		}
		return
	}
	if q := w.byName[name]; len(q) > 0 {
		signal(q[0])
	}
}

// signal sends on c without blocking: a signal already pending is enough.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
