package rocketmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

// The ACL broker: deploy/local/rocketmq starts a second broker with aclEnable=true (make up, or
// deploy/local/rocketmq start-acl-broker) on the same name server, with topic aclTopic and an
// account that may publish to and subscribe to that topic only. These constants repeat its
// plain_acl.yml; they are test accounts of that local broker and nothing else.
const (
	aclTopic      = "txkit-acl"
	aclUserKey    = "txkit-acl-user"
	aclUserSecret = "txkit-acl-user-secret"
)

// aclCredentials is the option under test: the ACL account's credentials.
func aclCredentials() rocketmq.Option { return rocketmq.WithCredentials(aclUserKey, aclUserSecret) }

// WithCredentials reaches the broker: on a broker with ACL on, a Publisher and a TxProducer with
// the account's credentials send, a Consumer with them receives and applies, and a Publisher with
// no credentials or a wrong secret key is refused.
func TestIntegrationCredentials(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.topic = aclTopic
	ctx := t.Context()

	pub := newPublisher(t, e, aclCredentials())
	signed := outbox.Message{ID: uuid.New(), Topic: aclTopic, Key: "acl", Body: []byte("signed")}
	if err := pub.Publish(ctx, signed); err != nil {
		t.Fatalf("publish to %s with the ACL account's credentials: %v (is the ACL broker up? make up, or deploy/local/rocketmq start-acl-broker)", aclTopic, err)
	}

	createUsers(t, e)
	tp := newTxProducer(t, e, "txkit-acl-tx-"+testenv.Name(t), aclCredentials())
	txMsg := outbox.Message{ID: uuid.New(), Topic: aclTopic, Key: "acl", Body: []byte("transactional")}
	if err := tp.Send(ctx, txMsg, insertUser(txMsg.ID)); err != nil {
		t.Fatalf("transactional send to %s with the ACL account's credentials: %v", aclTopic, err)
	}

	// The topic is shared by every run of this test: wait for this run's two messages only.
	rec := &recorder{}
	c := newConsumer(t, e, "txkit-acl-con-"+testenv.Name(t), rec.handler(nil), aclCredentials())
	run(t, c)
	ours := func(m outbox.Message) bool { return m.ID == signed.ID || m.ID == txMsg.ID }
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool { return rec.count(ours) >= 2 },
		"the consumer with credentials did not apply both messages")

	for _, tc := range []struct {
		name string
		opts []rocketmq.PublisherOption
	}{
		{"no credentials", nil},
		{"wrong secret key", []rocketmq.PublisherOption{rocketmq.WithCredentials(aclUserKey, "not-the-secret-key")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPublisher(t, e, append(tc.opts, rocketmq.WithRetries(0, 10*time.Second))...)
			sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			err := p.Publish(sctx, outbox.Message{ID: uuid.New(), Topic: aclTopic, Body: []byte("unsigned")})
			if err == nil {
				t.Fatalf("published to the ACL broker with %s", tc.name)
			}
			if !contains(err.Error(), "AclException") {
				t.Fatalf("refused, but not by the broker's ACL check: %v", err)
			}
		})
	}
}
