// Command ha is `make drill-ha`: register-points (outbox mode and transactional-message mode) on
// the DLedger broker group, and tcc-order with its recovery elections on the Redis Sentinel group,
// each a drill of its own (-drill: the relay leader, the points consumer and the order
// coordinator leader SIGKILLed under load), and in this process the workload "order" (several
// ordered messages per key through a relay on the DLedger group to an orderly, idempotent
// consumer: order violations and duplicates counted), while this command SIGKILLs a server of
// every kind in an order drawn from a printed seed: the DLedger group's leader broker, the
// ZooKeeper ensemble's leader node (one node: the ensemble stays up), the Redis primary under
// Sentinel, and with -pg-ha the HA PostgreSQL's primary (the workloads then run on the HA
// cluster's multi-host URL); and it cuts the relays off the DLedger leader broker (iptables, both
// ways) for -cut. Each killed node is started again (through deploy/local) before the next fault. A publish probe sends to the DLedger group every 50 ms and a commit probe watches the
// registrations commit; the report gives, per fault, the time to the next leader, the next
// publish and the next committed registration, then each workload's own report (every user
// exactly 100 points, nothing pending, stock and money conserved, every transaction finished,
// every key's messages once and in order, commit → effect p50/p99). It exits 1 when a workload
// breaks its invariants or a fault does not recover.
//
//	make drill-ha                                  # go run ./drills/ha
//	go run ./drills/ha -seed 42 -session-timeout 1s
//	go run ./drills/ha -pg-ha                      # on the HA PostgreSQL (TXKIT_PG_HA_URL), its primary killed too
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/txkit/txkit/drills/internal/drillkit"
	"github.com/txkit/txkit/examples/exapp"
	txrocketmq "github.com/txkit/txkit/rocketmq"
)

func main() {
	cfg := Config{Log: os.Stdout}
	flag.Uint64Var(&cfg.Seed, "seed", 0, "seed of the faults' order (0: a random one, printed)")
	faults := flag.String("faults", strings.Join(Faults(), ","), "server faults, comma-separated: "+strings.Join(Faults(), ", "))
	flag.DurationVar(&cfg.Gap, "gap", 8*time.Second, "load before the first fault and between a fault's recovery and the next")
	flag.DurationVar(&cfg.Cut, "cut", 10*time.Second, "how long the "+FaultRelayCut+" fault cuts the relays off the DLedger leader")
	users := flag.Int("users", 5000, "registrations of each register-points workload")
	orders := flag.Int("orders", 2000, "orders of the tcc-order workload")
	st := flag.Duration("session-timeout", 4*time.Second, "the workloads' ZooKeeper session timeout or lease TTL (relay and coordinator elections)")
	lock := flag.String("rp-lock", "zk", "lock backend of the register-points relay elections")
	workloads := flag.String("workloads", "rp-outbox,rp-txmsg,tcc,order", "workloads to run beside the faults")
	flag.BoolVar(&cfg.PGHA, "pg-ha", false, "run the workloads on the HA PostgreSQL (TXKIT_PG_HA_URL, deploy/local/pg-ha) and SIGKILL its primary as one more fault ("+FaultPGPrimary+")")
	flag.StringVar(&cfg.Dir, "dir", filepath.Join(exapp.Env("TXKIT_HOME", ".txkit"), "drill-ha"), "binaries and logs")
	timeout := flag.Duration("timeout", 20*time.Minute, "give up after this long")
	flag.Parse()
	if *faults != "" {
		cfg.Faults = strings.Split(*faults, ",")
	} else {
		cfg.Faults = []string{}
	}
	cfg.DLedgerNamesrv = os.Getenv("TXKIT_ROCKETMQ_DLEDGER_NAMESRV")
	cfg.DLedgerBrokers = os.Getenv("TXKIT_ROCKETMQ_DLEDGER_BROKERS")
	cfg.Sentinels = strings.Split(os.Getenv("TXKIT_REDIS_SENTINELS"), ",")
	cfg.SentinelMaster = os.Getenv("TXKIT_REDIS_SENTINEL_MASTER")
	cfg.PG = exapp.Env("TXKIT_PG_URL", "postgres://postgres@127.0.0.1:55432/txkit_test?sslmode=disable")
	if cfg.PGHA {
		if cfg.PG = os.Getenv("TXKIT_PG_HA_URL"); cfg.PG == "" {
			fmt.Fprintln(os.Stderr, "-pg-ha needs TXKIT_PG_HA_URL (make up; deploy/local/env)")
			os.Exit(2)
		}
	}
	if cfg.DLedgerNamesrv == "" || cfg.DLedgerBrokers == "" || cfg.SentinelMaster == "" {
		fmt.Fprintln(os.Stderr, "drill-ha needs TXKIT_ROCKETMQ_DLEDGER_NAMESRV, TXKIT_ROCKETMQ_DLEDGER_BROKERS, TXKIT_REDIS_SENTINELS and TXKIT_REDIS_SENTINEL_MASTER (make up; deploy/local/env)")
		os.Exit(2)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// The RocketMQ client's own lines (a cut broker's timeouts, route changes) go to a file of the
	// run, not between the progress lines (the file stays open until the process exits).
	clientLog, err := os.Create(filepath.Join(cfg.Dir, "rocketmq-client.log"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	txrocketmq.SetClientLogger(slog.New(slog.NewTextHandler(clientLog, nil)), slog.LevelWarn)
	cfg.Workloads = StandardWorkloads(strings.Split(*workloads, ","), Load{
		Namesrv: cfg.DLedgerNamesrv, Brokers: cfg.DLedgerBrokers, Lock: *lock, Users: *users, Orders: *orders,
		SessionTimeout: *st, PG: pgFlag(cfg), Dir: cfg.Dir})
	if _, ok := drillkit.RunDemo(*timeout, "drill-ha report", Run, cfg, "an invariant"); !ok {
		os.Exit(1)
	}
	fmt.Println("OK: every workload kept its invariants and every server fault recovered")
}

// pgFlag is the PostgreSQL URL the workloads are given: the HA cluster's with -pg-ha, else
// none (theirs, TXKIT_PG_URL).
func pgFlag(cfg Config) string {
	if cfg.PGHA {
		return cfg.PG
	}
	return ""
}

// Load is what the standard workloads run on and how much.
type Load struct {
	Namesrv, Brokers string        // the DLedger group
	Lock             string        // lock backend of the relays' elections (register-points, order)
	Users, Orders    int           // registrations of each register-points workload, tcc-order's orders
	SessionTimeout   time.Duration // the elections' session timeout or lease TTL
	PG               string        // the workloads' PostgreSQL URL; empty: TXKIT_PG_URL
	Dir              string        // the in-process workloads' logs
}

// StandardWorkloads returns the named workloads of make drill-ha: rp-outbox and rp-txmsg
// (register-points -drill on the DLedger group, the relay electing on l.Lock), tcc (tcc-order
// -drill with its elections on the Redis Sentinel group), order (OrderLoad: 8 keys, a message of
// each every 200 ms, in this process).
func StandardWorkloads(names []string, l Load) []Workload {
	var pg []string
	if l.PG != "" {
		pg = []string{"-pg", l.PG}
	}
	var ws []Workload
	for _, n := range names {
		switch n {
		case "rp-outbox", "rp-txmsg":
			ws = append(ws, Workload{Name: n, Cmd: "register-points", Args: append([]string{
				"-mode", strings.TrimPrefix(n, "rp-"), "-drill", "-users", fmt.Sprint(l.Users), "-rate", "40",
				"-namesrv", l.Namesrv, "-broker", l.Brokers, "-lock", l.Lock, "-session-timeout", l.SessionTimeout.String()}, pg...)})
		case "tcc":
			ws = append(ws, Workload{Name: n, Cmd: "tcc-order", Started: "leads; placing the orders", Args: append([]string{
				"-drill", "-lock", "redis-sentinel", "-orders", fmt.Sprint(l.Orders), "-rate", "15",
				"-session-timeout", l.SessionTimeout.String()}, pg...)})
		case "order":
			pgURL := l.PG
			if pgURL == "" {
				pgURL = exapp.Env("TXKIT_PG_URL", "postgres://postgres@127.0.0.1:55432/txkit_test?sslmode=disable")
			}
			o := OrderLoad{Namesrv: l.Namesrv, Brokers: l.Brokers, PG: pgURL, Lock: l.Lock,
				SessionTimeout: l.SessionTimeout, Dir: filepath.Join(l.Dir, "order")}
			ws = append(ws, Workload{Name: n, Run: o.Run})
		}
	}
	return ws
}
