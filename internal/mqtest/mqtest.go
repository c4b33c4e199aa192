// Package mqtest is what the tests and benchmarks that use the real RocketMQ share: a publisher on
// the test name servers and a consumer group of a test's own, cleaned up when the test ends. It
// links the RocketMQ client, so only packages that already test against RocketMQ import it (the
// Makefile runs those without -race).
package mqtest

import (
	"context"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txkit/txkit/internal/testenv"
	"github.com/txkit/txkit/rocketmq"
)

// Publisher returns a RocketMQ publisher on the test name servers, closed when tb ends. It blocks
// for nothing: the route is fetched on first use.
func Publisher(tb testing.TB) *rocketmq.Publisher {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := rocketmq.NewPublisher(ctx, testenv.Namesrv(tb))
	if err != nil {
		tb.Fatalf("rocketmq.NewPublisher: %v", err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

// ConsumerGroup returns a RocketMQ consumer group name of tb's own and deletes the group's retry
// and dead-letter topics, which the broker creates, when tb ends.
func ConsumerGroup(tb testing.TB) string {
	tb.Helper()
	g := "txkit-" + testenv.Name(tb)
	ns, broker := testenv.Namesrv(tb), testenv.Broker(tb)
	tb.Cleanup(func() {
		adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(ns)))
		if err != nil {
			return
		}
		defer adm.Close() //nolint:errcheck // cleanup
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, topic := range []string{"%RETRY%" + g, "%DLQ%" + g} {
			_ = adm.DeleteTopic(ctx, admin.WithTopicDelete(topic), admin.WithBrokerAddrDelete(broker), admin.WithNameSrvAddr(ns))
		}
	})
	return g
}
