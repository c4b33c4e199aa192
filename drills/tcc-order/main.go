// Command demo runs the tcc-order example end to end on the servers from `make up`: it builds and
// starts the stock and account services and two order-service instances (coordinators), places
// orders through the HTTP API — some asking more stock or money than there is, so they are
// refused — waits until every order has finished, and checks the invariants. With -mode tcc (the
// default) each order is a TCC global transaction: every transaction confirmed or cancelled, no
// branch op applied twice, no branch both confirmed and cancelled. With -mode saga each order is
// a saga (deduct stock, then debit money): every saga succeeded or compensated, no op applied
// twice, every action of a compensated saga compensated and of a succeeded one kept. With -mode
// workflow each order is a workflow (package workflow: record the order row, deduct stock, debit
// money, as a Go function the leader replays when its instance dies): the saga's checks, and every
// succeeded workflow has its order row. Either way stock and money are conserved. With -drill the stock and account services inject refusals,
// 500s, lost replies and slow calls, the mode's leading order instance is SIGKILLed (and
// restarted) during the load, and so are stock and account; the report gives the time from each
// leader's death to the next leader's first recovery. It exits 1 when an invariant breaks.
//
//	go run ./drills/tcc-order                    # 300 orders as TCC transactions, no faults
//	go run ./drills/tcc-order -mode saga         # the same orders as sagas
//	go run ./drills/tcc-order -drill             # 600 orders, faults, 3 leader kills
//	go run ./drills/tcc-order -drill -mode saga  # the drill with sagas
//	go run ./drills/tcc-order -drill -mode workflow  # the drill with workflows (make drill-workflow)
//	go run ./drills/tcc-order -drill -lock pg    # the drill with the recovery elections on PostgreSQL (or redis, redlock)
//	go run ./drills/tcc-order -drill -transport grpc  # the drill with stock, account and the orders over gRPC
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/txkit/txkit/drills/internal/drillkit"
	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/tcc-order/app"
)

func main() {
	cfg := Config{Log: os.Stdout, Mode: app.ModeTCC, Transport: app.TransportHTTP}
	flag.Var(&cfg.Mode, "mode", "how orders are placed: tcc (TCC global transactions), saga or workflow")
	flag.Var(&cfg.Transport, "transport", "how the order service calls stock and account, and how orders are placed: http or grpc")
	flag.IntVar(&cfg.Orders, "orders", 0, "orders to place (default 300, 600 with -drill)")
	flag.IntVar(&cfg.Instances, "instances", 2, "order-service instances")
	flag.IntVar(&cfg.Concurrency, "concurrency", 8, "orders in flight")
	flag.IntVar(&cfg.Rate, "rate", -1, "orders per second at most (0: as fast as they go; default 0, 20 with -drill so the kills land under load)")
	flag.BoolVar(&cfg.Drill, "drill", false, "inject faults in stock and account and SIGKILL the mode's leading order instance during the load")
	flag.IntVar(&cfg.Kills, "kills", 3, "leader kills of a drill")
	flag.IntVar(&cfg.ParticipantKills, "participant-kills", 2, "participant kills of a drill (stock, account, stock, ...; each restarted on its address)")
	flag.DurationVar(&cfg.KillEvery, "kill-every", 3*time.Second, "pause before each leader kill (each also waits for the previous failover)")
	flag.StringVar(&cfg.PG, "pg", exapp.Env("TXKIT_PG_URL", app.DefaultPG), "PostgreSQL URL (databases txkit_order, txkit_stock, txkit_account are created if missing)")
	flag.StringVar(&cfg.ZK, "zk", exapp.Env("TXKIT_ZK", app.DefaultZK), "ZooKeeper servers")
	flag.StringVar(&cfg.Lock, "lock", "zk", "lock backend of the recovery elections: zk, pg, redis, redlock or redis-sentinel (servers from TXKIT_ZK, TXKIT_PG_URL, TXKIT_REDIS, TXKIT_REDLOCK, TXKIT_REDIS_SENTINELS)")
	flag.DurationVar(&cfg.SessionTimeout, "session-timeout", 0, "the order instances' ZooKeeper session timeout or lease TTL (0: their default, 4s)")
	flag.StringVar(&cfg.Dir, "dir", filepath.Join(exapp.Env("TXKIT_HOME", ".txkit"), "tcc-order"), "binaries and service logs")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the run's schemas for inspection")
	flag.BoolVar(&cfg.NoBarrier, "no-barrier", false, "run stock and account WITHOUT the participant barrier, to watch the checks fail (use with -drill)")
	flag.DurationVar(&cfg.SettleTimeout, "settle-timeout", 3*time.Minute, "how long to wait for every transaction to finish after the load")
	flag.IntVar(&cfg.PGFailovers, "pg-failovers", 0, "SIGKILL the HA PostgreSQL's primary this many times during the load (-pg \"$TXKIT_PG_HA_URL\"; deploy/local/pg-ha)")
	flag.BoolVar(&cfg.PGCut, "pg-cut", false, "with -pg-failovers: the last one cuts the primary off the network instead of killing it (iptables: its ports both ways and everything its Patroni and PostgreSQL send, ZooKeeper included; healed once a new primary takes writes)")
	flag.BoolVar(&cfg.PGAsync, "pg-async", false, "with -pg-failovers: asynchronous replication (Patroni synchronous_mode off for the run): what a failover loses")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()
	if cfg.Orders == 0 {
		cfg.Orders = 300
		if cfg.Drill {
			cfg.Orders = 600
		}
	}
	if cfg.Rate < 0 {
		cfg.Rate = 0
		if cfg.Drill {
			cfg.Rate = 20
		}
	}
	title := fmt.Sprintf("tcc-order report (%s)", cfg.Mode)
	if cfg.Transport == app.TransportGRPC {
		title = fmt.Sprintf("tcc-order report (%s over gRPC)", cfg.Mode)
	}
	if _, ok := drillkit.RunDemo(*timeout, title, Run, cfg, "an invariant"); !ok {
		os.Exit(1)
	}
	p := protocolOf(cfg.Mode)
	fmt.Printf("OK: every %s %s or %s; stock and money conserved; no op applied twice\n", p.unit, p.done, p.undone)
}
