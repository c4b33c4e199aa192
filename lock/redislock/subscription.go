package redislock

import (
	"context"
	"log/slog"
	"sync"

	"github.com/redis/go-redis/v9"
)

// subscription is one Redis instance's pub/sub subscription to the release channel, shared by
// every mutex of a [Client] or [Redlock]. The first waiter starts it; it hands each release
// message (whose payload is the lock's name) to the waiters of that name. go-redis re-subscribes
// after a dropped connection; the messages published meanwhile are lost, so each re-subscription
// wakes every waiter to try again.
type subscription struct {
	rdb     redis.UniversalClient
	channel string
	log     *slog.Logger
	wg      *sync.WaitGroup // the owner's: Close waits for the dispatcher

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
	ps      *redis.PubSub
	ready   chan struct{} // closed when the server confirmed the first SUBSCRIBE
	closed  bool
}

func newSubscription(rdb redis.UniversalClient, channel string, log *slog.Logger, wg *sync.WaitGroup) *subscription {
	return &subscription{
		rdb: rdb, channel: channel, log: log, wg: wg,
		waiters: map[string]map[chan struct{}]struct{}{},
		ready:   make(chan struct{}),
	}
}

// watch makes c receive a signal (non-blocking; give c a buffer of 1) for every release of name,
// and returns a channel closed once the subscription is active. It starts the subscription if
// nothing did yet.
func (s *subscription) watch(name string, c chan struct{}) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.ready
	}
	set := s.waiters[name]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		s.waiters[name] = set
	}
	set[c] = struct{}{}
	if s.ps == nil {
		s.ps = s.rdb.Subscribe(context.Background()) // no channel yet: no round trip under s.mu
		s.wg.Add(1)
		go s.dispatch(s.ps)
	}
	return s.ready
}

// unwatch stops the signals to c.
func (s *subscription) unwatch(name string, c chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.waiters[name]
	delete(set, c)
	if len(set) == 0 {
		delete(s.waiters, name)
	}
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
			s.log.Debug("release channel subscribed again; waking every waiter", "channel", s.channel)
			s.wake(nil)
		case *redis.Message:
			name := m.Payload
			s.wake(&name)
		}
	}
}

// wake signals the waiters of *name, or every waiter when name is nil.
func (s *subscription) wake(name *string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	signal := func(set map[chan struct{}]struct{}) {
		for c := range set {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
	if name != nil {
		signal(s.waiters[*name])
		return
	}
	for _, set := range s.waiters {
		signal(set)
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
