package smoke_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/testkit/smoke"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

func logger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func TestIntegrationZooKeeperEphemeralZnode(t *testing.T) {
	t.Parallel()
	servers := testenv.ZK(t)
	root := testenv.ZKRoot(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := smoke.ZooKeeper(ctx, servers, root, logger(t)); err != nil {
		t.Fatal(err)
	}
}

func TestIntegrationPostgresPreparedTransaction(t *testing.T) {
	t.Parallel()
	s := testenv.PG(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := smoke.Postgres(ctx, s.URL, logger(t)); err != nil {
		t.Fatal(err)
	}
}

func TestIntegrationRocketMQSendReceive(t *testing.T) {
	t.Parallel()
	ns := testenv.Namesrv(t)
	topic := testenv.Topic(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if err := smoke.RocketMQ(ctx, ns, topic, logger(t)); err != nil {
		t.Fatal(err)
	}
}

func TestIntegrationRocketMQMissingTopicFails(t *testing.T) {
	t.Parallel()
	ns := testenv.Namesrv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := smoke.RocketMQ(ctx, ns, "txkit-test-no-such-topic-"+testenv.Name(t), logger(t))
	if err == nil {
		t.Fatal("a push consumer started on a topic that does not exist; want an error")
	}
	t.Logf("got the expected error: %v", err)
}
