package rocketmq_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

// Publish one message and apply it once in PostgreSQL. The servers come from TXKIT_ROCKETMQ_NAMESRV,
// TXKIT_ROCKETMQ_BROKER (default 127.0.0.1:20911) and TXKIT_PG_URL, as `make up` starts them.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The client's own log lines, through slog: a program's choice, made in main.
	rlog.SetLogger(rocketmq.NewRlogAdapter(slog.New(slog.NewTextHandler(os.Stderr, nil)), slog.LevelWarn))

	ns := strings.Split(os.Getenv("TXKIT_ROCKETMQ_NAMESRV"), ",")
	suffix := strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
	topic, cleanup, err := exampleTopic(ctx, ns, "txkit-example-"+suffix)
	if err != nil {
		log.Fatal(err)
	}
	defer cleanup()
	pool, err := pgxpool.New(ctx, os.Getenv("TXKIT_PG_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	table := "txkit_idempotency_example_" + suffix
	defer pool.Exec(context.WithoutCancel(ctx), "drop table if exists "+table) //nolint:errcheck // example cleanup
	store, err := idempotency.New(pool, idempotency.WithTable("", table))
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	applied := make(chan string, 1)
	c, err := rocketmq.NewConsumer(ns, "txkit-example-"+suffix, topic, pool, store,
		func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
			// Business writes go through tx; they commit with the message's claim.
			applied <- fmt.Sprintf("%s %s: %s", msg.Key, msg.Headers["event"], msg.Body)
			return nil
		})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() { stop(); <-done }()

	pub, err := rocketmq.NewPublisher(ctx, ns)
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	err = pub.Publish(ctx, outbox.Message{ID: uuid.New(), Topic: topic, Key: "user-42",
		Headers: map[string]string{"event": "registered"}, Body: []byte(`{"points":100}`)})
	if err != nil {
		log.Fatal(err)
	}
	select {
	case s := <-applied:
		fmt.Println(s)
	case <-ctx.Done():
		log.Fatal(ctx.Err())
	}
	// Output: user-42 registered: {"points":100}
}

// exampleTopic creates a topic through the admin API (consumers cannot start on a missing one)
// and returns a function that deletes it.
func exampleTopic(ctx context.Context, ns []string, topic string) (string, func(), error) {
	broker := os.Getenv("TXKIT_ROCKETMQ_BROKER")
	if broker == "" {
		broker = "127.0.0.1:20911"
	}
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(ns)))
	if err != nil {
		return "", nil, err
	}
	if err := adm.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(broker)); err != nil {
		_ = adm.Close()
		return "", nil, fmt.Errorf("create topic %s: %w", topic, err)
	}
	return topic, func() {
		_ = adm.DeleteTopic(context.WithoutCancel(ctx), admin.WithTopicDelete(topic), admin.WithBrokerAddrDelete(broker),
			admin.WithNameSrvAddr(ns))
		_ = adm.Close()
	}, nil
}
