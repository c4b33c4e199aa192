package rocketmq_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/google/uuid"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/message"
	"github.com/txkit/txkit/rocketmq"
)

func TestEnsureTopicRefusesBadInput(t *testing.T) {
	ns := []string{"127.0.0.1:1"} // never reached: the arguments are checked first
	for name, call := range map[string]func() error{
		"no name server": func() error { return rocketmq.EnsureTopic(t.Context(), nil, "127.0.0.1:1", "t") },
		"bad broker":     func() error { return rocketmq.EnsureTopic(t.Context(), ns, "broker", "t") },
		"bad topic":      func() error { return rocketmq.EnsureTopic(t.Context(), ns, "127.0.0.1:1", "a.b") },
		"no queues": func() error {
			return rocketmq.EnsureTopic(t.Context(), ns, "127.0.0.1:1", "t", rocketmq.QueuesForTest(0))
		},
		"bad group": func() error {
			return rocketmq.EnsureTopic(t.Context(), ns, "127.0.0.1:1", "t", rocketmq.WithRetryTopicsFor("a b"))
		},
	} {
		if err := call(); !errors.Is(err, rocketmq.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
}

// EnsureTopic creates a missing topic and the group's retry topic on the real broker, leaves an
// existing one as it is, and a Consumer of the group then runs on the topic.
func TestIntegrationEnsureTopic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	broker := testenv.Broker(t)
	topic := "txkit-ensure-" + testenv.Name(t)
	g := "txkit-ensure-" + testenv.Name(t)
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(e.ns)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer adm.Close() //nolint:errcheck // test cleanup
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, tp := range []string{topic, "%RETRY%" + g, "%DLQ%" + g} {
			_ = adm.DeleteTopic(ctx, admin.WithTopicDelete(tp), admin.WithBrokerAddrDelete(broker), admin.WithNameSrvAddr(e.ns))
		}
	})
	listed := func() []string {
		l, err := adm.FetchAllTopicList(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return l.TopicList
	}
	if slices.Contains(listed(), topic) {
		t.Fatalf("topic %s exists before the test", topic)
	}

	if err := rocketmq.EnsureTopic(t.Context(), e.ns, broker, topic, rocketmq.QueuesForTest(2), rocketmq.WithRetryTopicsFor(g)); err != nil {
		t.Fatal(err)
	}
	for _, tp := range []string{topic, "%RETRY%" + g} {
		if !slices.Contains(listed(), tp) {
			t.Fatalf("topic %s not listed after EnsureTopic", tp)
		}
	}
	// Again, asking for more queues: the topic exists, so it keeps its 2.
	if err := rocketmq.EnsureTopic(t.Context(), e.ns, broker, topic, rocketmq.QueuesForTest(8), rocketmq.WithRetryTopicsFor(g)); err != nil {
		t.Fatal(err)
	}
	mqs, err := adm.FetchPublishMessageQueues(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(mqs) != 2 {
		t.Fatalf("topic %s has %d queues after a second EnsureTopic, want the 2 it was created with", topic, len(mqs))
	}

	e.topic = topic // the consumer's topic: the one EnsureTopic created
	rec := &recorder{}
	c := newConsumer(t, e, g, rec.handler(nil))
	run(t, c)
	pub := newPublisher(t, e)
	id := uuid.New()
	if err := pub.Publish(t.Context(), message.Message{ID: id, Topic: topic, Body: []byte("on an ensured topic")}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool {
		return rec.count(func(m message.Message) bool { return m.ID == id }) == 1
	}, "the message on the ensured topic applied")
}
