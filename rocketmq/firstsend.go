package rocketmq

import (
	"context"
	"fmt"
	"sync"
)

// firstSends makes the first send of each topic go alone. rocketmq-client-go v2.1.2 races when
// goroutines send the first messages of a topic at once: a second caller finds the topic's route
// already fetched from the name server by the first, skips storing the topic's publish
// information (the route did not change), finds none, and fails with "route info not found" —
// which a relay publishing several keys in parallel to a new topic met on its first batch. Sends
// that come while a topic's first send is in flight wait for it to return (or for their ctx);
// every later send, and every send after a failed first one, goes at once.
type firstSends struct {
	mu    sync.Mutex
	first map[string]chan struct{} // topic → closed once its first send returned
}

// do runs send for topic, after the topic's first send has returned when this is not it. It
// returns an error wrapping ctx's error when ctx ends while waiting.
func (f *firstSends) do(ctx context.Context, topic string, send func() error) error {
	f.mu.Lock()
	if f.first == nil {
		f.first = map[string]chan struct{}{}
	}
	done, seen := f.first[topic]
	if !seen {
		done = make(chan struct{})
		f.first[topic] = done
	}
	f.mu.Unlock()
	if !seen {
		defer close(done)
		return send()
	}
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("rocketmq: send to %s: waiting for the topic's first send: %w", topic, ctx.Err())
	}
	return send()
}
