package rocketmq_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/notify"
	"github.com/txkit/txkit/notify/rocketmq"
	"github.com/txkit/txkit/outbox"
	obrocketmq "github.com/txkit/txkit/rocketmq"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

const (
	secret         = "receiver-secret-0123456789"
	producerSecret = "producer-secret-0123456789"
)

// intake is one test's notifier (receivers "shop" and "admin"), migrated, with a consumer of a
// topic of its own feeding it through handler h(n), and a publisher to that topic.
type intake struct {
	n     *notify.Notifier
	c     *obrocketmq.Consumer
	pub   *obrocketmq.Publisher
	topic string
}

// notifierAndStore returns a migrated Notifier with the receivers shop and admin and a migrated
// idempotency store, both in pg's schema.
func notifierAndStore(t *testing.T, pg *testenv.Schema) (*notify.Notifier, *idempotency.Store) {
	t.Helper()
	n, err := notify.New(pg.Pool, []notify.Receiver{
		{Name: "shop", URL: "https://shop.invalid/notify", Secrets: []string{secret}},
		{Name: "admin", URL: "https://admin.invalid/notify", Secrets: []string{secret}},
	}, notify.WithTable(pg.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.New(pg.Pool, idempotency.WithTable(pg.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return n, store
}

func newIntake(t *testing.T, h func(*notify.Notifier) obrocketmq.Handler) *intake {
	ctx := t.Context()
	pg := testenv.PG(t)
	ns, topic := testenv.Namesrv(t), testenv.Topic(t)
	n, store := notifierAndStore(t, pg)
	c, err := obrocketmq.NewConsumer(ns, "txkit-notify-"+testenv.Name(t), topic, pg.Pool, store, h(n),
		obrocketmq.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, c.Run)
	pub, err := obrocketmq.NewPublisher(ctx, ns, obrocketmq.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return &intake{n: n, c: c, pub: pub, topic: topic}
}

func (in *intake) publish(t *testing.T, msg outbox.Message) {
	t.Helper()
	if err := in.pub.Publish(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
}

// result is a message's body naming receiver and key.
func (in *intake) result(receiver, key string) outbox.Message {
	return outbox.Message{ID: uuid.New(), Topic: in.topic,
		Body: fmt.Appendf(nil, `{"receiver":%q,"key":%q,"payload":{"amount":1}}`, receiver, key)}
}

// enqueued reports whether receiver has a notification for key.
func (in *intake) enqueued(t *testing.T, receiver, key string) bool {
	t.Helper()
	_, err := in.n.ByKey(t.Context(), receiver, key)
	if err != nil && !errors.Is(err, notify.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// Results published to a topic become notifications, once each however often a message is
// published; a message for an unknown receiver is poison, acknowledged and dropped.
func TestIntegrationTopicToNotifications(t *testing.T) {
	in := newIntake(t, func(n *notify.Notifier) obrocketmq.Handler {
		h, err := rocketmq.NewHandler(n, rocketmq.JSON, rocketmq.WithReceivers("*"))
		if err != nil {
			t.Fatal(err)
		}
		return h
	})
	ids := make([]uuid.UUID, 3)
	for i := range ids {
		msg := in.result("shop", fmt.Sprint("order-", i))
		ids[i] = msg.ID
		for range 2 { // published twice: a relay that lost its delete
			in.publish(t, msg)
		}
	}
	in.publish(t, in.result("nobody", "x"))
	testenv.Eventually(t, 60*time.Second, 50*time.Millisecond, func() bool {
		st := in.c.Stats()
		return st.Applied == 3 && st.Duplicates == 3 && st.Poison == 1
	}, "3 applied, 3 duplicates, 1 poison (stats %+v)", in.c.Stats())
	for i, id := range ids {
		rec, err := in.n.Get(t.Context(), id)
		if err != nil || rec.Key != fmt.Sprint("order-", i) || rec.Status != notify.StatusPending {
			t.Fatalf("notification of message %d: %+v, %v", i, rec, err)
		}
	}
}

// An intake allowed to feed "shop" only refuses a message naming "admin" — a receiver the
// notifier knows, and would sign a delivery to — as poison: it is never enqueued, so never
// delivered; the message for "shop" is enqueued.
func TestIntegrationIntakeAllowList(t *testing.T) {
	in := newIntake(t, shopOnly(t))
	in.publish(t, in.result("admin", "grant-1"))
	in.publish(t, in.result("shop", "order-1"))
	testenv.Eventually(t, 60*time.Second, 50*time.Millisecond, func() bool {
		st := in.c.Stats()
		return st.Applied+st.Poison == 2
	}, "both messages consumed (stats %+v)", in.c.Stats())
	if st := in.c.Stats(); st.Applied != 1 || st.Poison != 1 {
		t.Errorf("stats %+v, want 1 applied (shop) and 1 poison (admin)", st)
	}
	if in.enqueued(t, "admin", "grant-1") {
		t.Error("a message naming a receiver not on the allow-list was enqueued")
	}
	if !in.enqueued(t, "shop", "order-1") {
		t.Error("the message naming the allowed receiver was not enqueued")
	}
}

// An intake that requires the producer's signature enqueues a signed message and refuses, as
// poison, an unsigned one and one signed with another key.
func TestIntegrationIntakeProducerSignature(t *testing.T) {
	in := newIntake(t, func(n *notify.Notifier) obrocketmq.Handler {
		h, err := rocketmq.NewHandler(n, rocketmq.JSON, rocketmq.WithReceivers("shop"), rocketmq.WithProducerSecrets(producerSecret))
		if err != nil {
			t.Fatal(err)
		}
		return h
	})
	in.publish(t, in.result("shop", "unsigned"))
	in.publish(t, rocketmq.SignMessage("another-secret-0123456789", in.result("shop", "forged")))
	in.publish(t, rocketmq.SignMessage(producerSecret, in.result("shop", "signed")))
	testenv.Eventually(t, 60*time.Second, 50*time.Millisecond, func() bool {
		st := in.c.Stats()
		return st.Applied+st.Poison == 3
	}, "all three messages consumed (stats %+v)", in.c.Stats())
	if st := in.c.Stats(); st.Applied != 1 || st.Poison != 2 {
		t.Errorf("stats %+v, want 1 applied and 2 poison", st)
	}
	for key, want := range map[string]bool{"unsigned": false, "forged": false, "signed": true} {
		if got := in.enqueued(t, "shop", key); got != want {
			t.Errorf("message %s enqueued: %v, want %v", key, got, want)
		}
	}
}

// The ACL broker: deploy/local/rocketmq starts a broker with aclEnable=true on the same name
// server, with this topic and an account that may publish to it and subscribe to it (the test
// account of that local broker, as in rocketmq's acl_test.go).
const (
	aclTopic      = "txkit-acl"
	aclUserKey    = "txkit-acl-user"
	aclUserSecret = "txkit-acl-user-secret"
)

// An intake on a broker with ACL on: the consumer and the producer get the account's credentials
// as their own obrocketmq options, and the message is enqueued. The topic is shared by every run:
// messages of other runs and tests are consumed too (poison, or enqueued under their own keys);
// the test waits for its own.
func TestIntegrationIntakeWithCredentials(t *testing.T) {
	ctx := t.Context()
	pg := testenv.PG(t)
	ns := testenv.Namesrv(t)
	n, store := notifierAndStore(t, pg)
	h, err := rocketmq.NewHandler(n, rocketmq.JSON, rocketmq.WithReceivers("shop"))
	if err != nil {
		t.Fatal(err)
	}
	creds := obrocketmq.WithCredentials(aclUserKey, aclUserSecret)
	c, err := obrocketmq.NewConsumer(ns, "txkit-notify-acl-"+testenv.Name(t), aclTopic, pg.Pool, store, h,
		creds, obrocketmq.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, c.Run)
	pub, err := obrocketmq.NewPublisher(ctx, ns, creds, obrocketmq.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	key := "acl-" + uuid.NewString()
	in := &intake{n: n, c: c, pub: pub, topic: aclTopic}
	in.publish(t, in.result("shop", key))
	testenv.Eventually(t, 60*time.Second, 50*time.Millisecond, func() bool { return in.enqueued(t, "shop", key) },
		"the message published with credentials was not enqueued (is the ACL broker up? make up)")
}

// NewHandler must be told which receivers messages may name.
func TestNewHandlerOptions(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), "postgres://unused@127.0.0.1:1/unused") // never connects
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	n, err := notify.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts []rocketmq.Option
		ok   bool
	}{
		{"no allow-list", nil, false},
		{"allow-list", []rocketmq.Option{rocketmq.WithReceivers("shop")}, true},
		{"any receiver, explicitly", []rocketmq.Option{rocketmq.WithReceivers("*")}, true},
		{"both", []rocketmq.Option{rocketmq.WithReceivers("shop", "*")}, false},
		{"empty name", []rocketmq.Option{rocketmq.WithReceivers("")}, false},
		{"short producer secret", []rocketmq.Option{rocketmq.WithReceivers("shop"), rocketmq.WithProducerSecrets("short")}, false},
		{"producer secret", []rocketmq.Option{rocketmq.WithReceivers("shop"), rocketmq.WithProducerSecrets(producerSecret)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rocketmq.NewHandler(n, rocketmq.JSON, tc.opts...)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, rocketmq.ErrInvalidOption)) {
				t.Fatalf("NewHandler = %v, want ok %v", err, tc.ok)
			}
		})
	}
}
