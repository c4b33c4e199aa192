package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/testenv"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

// realPublisher returns the RocketMQ publisher on the test name servers, closed when the test ends.
func realPublisher(t testing.TB) outbox.Publisher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := rocketmq.NewPublisher(ctx, testenv.Namesrv(t))
	if err != nil {
		t.Fatalf("rocketmq.NewPublisher: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}
