package rocketmq_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/testenv"
	"github.com/txkit/txkit/notify"
	"github.com/txkit/txkit/notify/rocketmq"
	"github.com/txkit/txkit/outbox"
	obrocketmq "github.com/txkit/txkit/outbox/rocketmq"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// Results published to a topic become notifications, once each however often a message is
// published; a message for an unknown receiver is poison, acknowledged and dropped.
func TestIntegrationTopicToNotifications(t *testing.T) {
	ctx := t.Context()
	pg := testenv.PG(t)
	ns, topic := testenv.Namesrv(t), testenv.Topic(t)
	n, err := notify.New(pg.Pool, []notify.Receiver{{Name: "shop", URL: "http://127.0.0.1:1/notify", Secrets: []string{"k"}}},
		notify.WithSchema(pg.Name))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.New(idempotency.WithSchema(pg.Name))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx, pg.Pool); err != nil {
		t.Fatal(err)
	}
	c, err := obrocketmq.NewConsumer(ns, "txkit-notify-"+testenv.Name(t), topic, pg.Pool, store, rocketmq.Handler(n, rocketmq.JSON),
		obrocketmq.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, c.Run)
	pub, err := obrocketmq.NewPublisher(ctx, ns, obrocketmq.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ids := make([]uuid.UUID, 3)
	for i := range ids {
		ids[i] = uuid.New()
		msg := outbox.Message{ID: ids[i], Topic: topic, Body: fmt.Appendf(nil, `{"receiver":"shop","key":"order-%d","payload":{"amount":%d}}`, i, i)}
		for range 2 { // published twice: a relay that lost its delete
			if err := pub.Publish(ctx, msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := pub.Publish(ctx, outbox.Message{ID: uuid.New(), Topic: topic, Body: []byte(`{"receiver":"nobody","key":"x","payload":{}}`)}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, 50*time.Millisecond, func() bool {
		st := c.Stats()
		return st.Applied == 3 && st.Duplicates == 3 && st.Poison == 1
	}, "3 applied, 3 duplicates, 1 poison (stats %+v)", c.Stats())
	for i, id := range ids {
		rec, err := n.Get(ctx, id)
		if err != nil || rec.Key != fmt.Sprint("order-", i) || rec.Status != notify.StatusPending {
			t.Fatalf("notification of message %d: %+v, %v", i, rec, err)
		}
	}
}
