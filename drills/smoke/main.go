// Command smoke proves from Go that the servers started by `make up` work: a ZooKeeper ephemeral
// znode is created, read and deleted; PostgreSQL commits a prepared transaction; RocketMQ carries a
// message from a producer to a push consumer.
//
//	make up && go run ./drills/smoke
//
// Addresses come from flags or from TXKIT_PG_URL, TXKIT_ZK and TXKIT_ROCKETMQ_NAMESRV.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/txkit/txkit/internal/testkit/smoke"
)

func main() {
	pgURL := flag.String("pg", env("TXKIT_PG_URL", "postgres://postgres@127.0.0.1:55432/txkit_test?sslmode=disable"), "PostgreSQL URL")
	zkServers := flag.String("zk", env("TXKIT_ZK", "127.0.0.1:22181,127.0.0.1:22182,127.0.0.1:22183"), "ZooKeeper servers, comma-separated")
	namesrv := flag.String("namesrv", env("TXKIT_ROCKETMQ_NAMESRV", "127.0.0.1:19876"), "RocketMQ name servers, comma-separated")
	topic := flag.String("topic", "txkit-smoke", "RocketMQ topic (must exist; deploy/local/up creates it)")
	timeout := flag.Duration("timeout", time.Minute, "give up after this long")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stdout, nil))
	rlog.SetLogLevel("error")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	checks := []struct {
		name string
		run  func() error
	}{
		{"zookeeper", func() error {
			return smoke.ZooKeeper(ctx, strings.Split(*zkServers, ","), "/txkit-smoke", log)
		}},
		{"postgres", func() error { return smoke.Postgres(ctx, *pgURL, log) }},
		{"rocketmq", func() error { return smoke.RocketMQ(ctx, strings.Split(*namesrv, ","), *topic, log) }},
	}
	for _, c := range checks {
		if err := c.run(); err != nil {
			log.Error("smoke check failed", "server", c.name, "err", err)
			os.Exit(1)
		}
	}
	fmt.Println("smoke: all servers work from Go")
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
