package rocketmq_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/message"
	"github.com/txkit/txkit/rocketmq"
)

// A Consumer subscribed with a tag expression receives only the messages whose tag it names: the
// broker filters them out before delivery. All messages share a key, so they go to one queue,
// and the orderly consumer applies that queue in order: once the last message is applied, every
// earlier one has been either applied or filtered out.
func TestIntegrationTagExpressionFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := &recorder{}
	c := newConsumer(t, e, group(t, "tags"), rec.handler(nil), rocketmq.WithOrderly(time.Second),
		rocketmq.WithTagExpression("created || paid"))
	run(t, c)
	pub := newPublisher(t, e)

	sent := []struct {
		tags string
		want bool
	}{
		{"created", true}, {"cancelled", false}, {"", false}, {"paid", true}, {"created-later", false}, {"created", true},
	}
	var wantIDs []uuid.UUID
	for _, s := range sent {
		m := message.Message{ID: uuid.New(), Topic: e.topic, Key: "order-1", Tags: s.tags, Body: []byte(s.tags)}
		if err := pub.Publish(t.Context(), m); err != nil {
			t.Fatalf("publish tag %q: %v", s.tags, err)
		}
		if s.want {
			wantIDs = append(wantIDs, m.ID)
		}
	}
	last := wantIDs[len(wantIDs)-1]
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool {
		return rec.count(func(m message.Message) bool { return m.ID == last }) > 0
	}, "the last matching message applied (stats %+v)", c.Stats())

	rec.mu.Lock()
	calls := append([]message.Message(nil), rec.calls...)
	rec.mu.Unlock()
	if len(calls) != len(wantIDs) {
		t.Fatalf("%d messages applied, want the %d whose tag matches: %+v", len(calls), len(wantIDs), calls)
	}
	for i, m := range calls {
		if m.ID != wantIDs[i] || (m.Tags != "created" && m.Tags != "paid") {
			t.Fatalf("applied #%d: id %s tag %q, want id %s with a matching tag", i, m.ID, m.Tags, wantIDs[i])
		}
	}
}
