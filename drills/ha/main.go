// Command ha is `make drill-ha`: register-points (outbox mode and transactional-message mode) on
// the DLedger broker group, and tcc-order with its recovery elections on the Redis Sentinel group,
// each a drill of its own (-drill: the relay leader, the points consumer and the order
// coordinator leader SIGKILLed under load), while this command SIGKILLs a server of every kind in
// an order drawn from a printed seed: the DLedger group's leader broker, the ZooKeeper ensemble's
// leader node (one node: the ensemble stays up), the Redis primary under Sentinel. Each killed
// node is started again (through deploy/local) before the next fault. A publish probe sends to the
// DLedger group every 50 ms and a commit probe watches the registrations commit; the report gives,
// per fault, the time to the next leader, the next publish and the next committed registration,
// then each workload's own report (every user exactly 100 points, nothing pending, stock and
// money conserved, every transaction finished, commit → effect p50/p99). It exits 1 when a
// workload breaks its invariants or a fault does not recover.
//
//	make drill-ha                                  # go run ./drills/ha
//	go run ./drills/ha -seed 42 -session-timeout 1s
//	go run ./drills/ha -pg-ha 'deploy/local/pg-ha kill-primary'   # the HA PostgreSQL fault too (its own issue)
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
)

func main() {
	cfg := Config{Log: os.Stdout}
	flag.Uint64Var(&cfg.Seed, "seed", 0, "seed of the faults' order (0: a random one, printed)")
	faults := flag.String("faults", strings.Join(Faults(), ","), "server faults, comma-separated: "+strings.Join(Faults(), ", "))
	flag.DurationVar(&cfg.Gap, "gap", 8*time.Second, "load before the first fault and between a fault's recovery and the next")
	users := flag.Int("users", 5000, "registrations of each register-points workload")
	orders := flag.Int("orders", 2000, "orders of the tcc-order workload")
	st := flag.Duration("session-timeout", 4*time.Second, "the workloads' ZooKeeper session timeout or lease TTL (relay and coordinator elections)")
	lock := flag.String("rp-lock", "zk", "lock backend of the register-points relay elections")
	workloads := flag.String("workloads", "rp-outbox,rp-txmsg,tcc", "workloads to run beside the faults")
	flag.StringVar(&cfg.PGHA, "pg-ha", "", "command that kills the HA PostgreSQL primary and returns once a new one serves (a fault pg-primary; empty: none)")
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
	if cfg.DLedgerNamesrv == "" || cfg.DLedgerBrokers == "" || cfg.SentinelMaster == "" {
		fmt.Fprintln(os.Stderr, "drill-ha needs TXKIT_ROCKETMQ_DLEDGER_NAMESRV, TXKIT_ROCKETMQ_DLEDGER_BROKERS, TXKIT_REDIS_SENTINELS and TXKIT_REDIS_SENTINEL_MASTER (make up; deploy/local/env)")
		os.Exit(2)
	}
	cfg.Workloads = StandardWorkloads(strings.Split(*workloads, ","), cfg.DLedgerNamesrv, cfg.DLedgerBrokers, *lock, *users, *orders, *st)
	if _, ok := drillkit.RunDemo(*timeout, "drill-ha report", Run, cfg, "an invariant"); !ok {
		os.Exit(1)
	}
	fmt.Println("OK: every workload kept its invariants and every server fault recovered")
}

// StandardWorkloads returns the named workloads of make drill-ha: rp-outbox and rp-txmsg
// (register-points -drill on the DLedger group, the relay electing on lock), tcc (tcc-order
// -drill with its elections on the Redis Sentinel group).
func StandardWorkloads(names []string, namesrv, brokers, lock string, users, orders int, st time.Duration) []Workload {
	var ws []Workload
	for _, n := range names {
		switch n {
		case "rp-outbox", "rp-txmsg":
			ws = append(ws, Workload{Name: n, Cmd: "register-points", Args: []string{
				"-mode", strings.TrimPrefix(n, "rp-"), "-drill", "-users", fmt.Sprint(users), "-rate", "40",
				"-namesrv", namesrv, "-broker", brokers, "-lock", lock, "-session-timeout", st.String()}})
		case "tcc":
			ws = append(ws, Workload{Name: n, Cmd: "tcc-order", Args: []string{
				"-drill", "-lock", "redis-sentinel", "-orders", fmt.Sprint(orders), "-rate", "15",
				"-session-timeout", st.String()}})
		}
	}
	return ws
}
