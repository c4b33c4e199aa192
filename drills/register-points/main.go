// Command demo runs the register-points example end to end on the servers from `make up`: it
// builds and starts the points service and two users services, registers users through the HTTP
// API, waits until every one has been awarded its points, and prints a report. With -drill it
// SIGKILLs the leading relay twice and the points service once during the load. It exits 1 when
// a registered user does not have exactly 100 points or a message is left pending.
//
//	make demo        # go run ./drills/register-points
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/txkit/txkit/drills/internal/drillkit"
	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/register-points/app"
)

func main() {
	cfg := Config{Log: os.Stdout}
	flag.IntVar(&cfg.Users, "users", 300, "registrations to make")
	flag.IntVar(&cfg.Instances, "instances", 2, "users-service instances")
	flag.IntVar(&cfg.Concurrency, "concurrency", 8, "registrations in flight")
	flag.IntVar(&cfg.Rate, "rate", 100, "registrations per second at most (0: as fast as they go; -drill lowers 100 to 80 so the faults land under load)")
	flag.StringVar(&cfg.Mode, "mode", "outbox", "outbox (table + relay) or txmsg (RocketMQ transactional messages)")
	flag.BoolVar(&cfg.Drill, "drill", false, "SIGKILL the relay leader twice and the points service once during the load")
	flag.IntVar(&cfg.Partitions, "partitions", 0, "split the outbox into this many partitions shared by the users instances (0: one relay election; with -drill, the instance leading the most partitions is killed and the takeover timed)")
	flag.StringVar(&cfg.PG, "pg", exapp.Env("TXKIT_PG_URL", "postgres://postgres@127.0.0.1:55432/txkit_test?sslmode=disable"), "PostgreSQL URL")
	flag.StringVar(&cfg.ZK, "zk", exapp.Env("TXKIT_ZK", "127.0.0.1:22181,127.0.0.1:22182,127.0.0.1:22183"), "ZooKeeper servers")
	flag.StringVar(&cfg.Namesrv, "namesrv", exapp.Env("TXKIT_ROCKETMQ_NAMESRV", "127.0.0.1:19876"), "RocketMQ name servers")
	flag.StringVar(&cfg.Broker, "broker", exapp.Env("TXKIT_ROCKETMQ_BROKER", "127.0.0.1:20911"), "RocketMQ brokers the topic is created on, comma-separated (every node of a DLedger group)")
	flag.StringVar(&cfg.Lock, "lock", "zk", "lock backend of the relay's elections: "+strings.Join(exapp.LockKinds(), ", "))
	flag.DurationVar(&cfg.SessionTimeout, "session-timeout", 4*time.Second, "the relay election's ZooKeeper session timeout or lease TTL")
	flag.StringVar(&cfg.Dir, "dir", filepath.Join(exapp.Env("TXKIT_HOME", ".txkit"), "demo"), "binaries and service logs")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the run's schemas and topic for inspection")
	flag.IntVar(&cfg.PGFailovers, "pg-failovers", 0, "SIGKILL the HA PostgreSQL's primary this many times during the load (-pg \"$TXKIT_PG_HA_URL\"; deploy/local/pg-ha)")
	flag.BoolVar(&cfg.PGCut, "pg-cut", false, "with -pg-failovers: the last one cuts the primary off the network instead of killing it (iptables: its ports both ways and everything its Patroni and PostgreSQL send, ZooKeeper included; healed once a new primary takes writes)")
	flag.BoolVar(&cfg.PGAsync, "pg-async", false, "with -pg-failovers: asynchronous replication (Patroni synchronous_mode off for the run): what a failover loses")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()

	app.Logger("demo") // routes the RocketMQ client's own log lines (topic admin) to slog at warn level
	if cfg.Drill && cfg.Rate == 100 {
		cfg.Rate = 80
	}
	if _, ok := drillkit.RunDemo(*timeout, "register-points report", Run, cfg, "its promise"); !ok {
		os.Exit(1)
	}
	fmt.Println("OK: every registered user has exactly 100 points")
}
