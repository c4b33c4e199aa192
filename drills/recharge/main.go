// Command demo runs the recharge example end to end on the servers from `make up`: it builds and
// starts the recharge service (a notify.Notifier delivering under a ZooKeeper election) and the
// account service (a inbox.Inbox), has the account service ask for top-ups, and lets the
// notifications go through a bad network: one order's deliveries are all lost on the way, the
// first deliveries are held back past the call timeout, and the account service answers 500 to
// the first ones it gets. It waits until every notification is delivered or has failed after its
// (compressed) schedule, shows the attempts of the retried and the lost ones, reconciles the
// pending orders through the recharge service's query API, prints the balances, and exits 1
// unless every top-up was credited exactly once.
//
//	go run ./drills/recharge
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
	"github.com/txkit/txkit/examples/recharge/app"
)

func main() {
	cfg := Config{Log: os.Stdout}
	lost := flag.String("lost", "order-007", "orders whose deliveries are all lost on the way, comma-separated")
	flag.IntVar(&cfg.Recharges, "recharges", 20, "top-ups to ask for")
	flag.IntVar(&cfg.FailFirst, "fail-first", 3, "deliveries the account service answers 500 first")
	flag.IntVar(&cfg.SlowFirst, "slow-first", 2, "deliveries the recharge service holds back by -slow first")
	flag.DurationVar(&cfg.Slow, "slow", 1500*time.Millisecond, "how long those are held back")
	flag.DurationVar(&cfg.CallTimeout, "call-timeout", time.Second, "bound of each delivery")
	schedule := flag.String("schedule", "1s,1s,2s", "delays between attempts (notify's default spans about a day; the leader looks for due ones every second)")
	flag.StringVar(&cfg.PG, "pg", exapp.Env("TXKIT_PG_URL", app.DefaultPG), "PostgreSQL URL (databases "+app.AccountDB+" and "+app.RechargeDB+" are created if missing)")
	flag.StringVar(&cfg.ZK, "zk", exapp.Env("TXKIT_ZK", app.DefaultZK), "ZooKeeper servers")
	flag.StringVar(&cfg.Dir, "dir", filepath.Join(exapp.Env("TXKIT_HOME", ".txkit"), "recharge"), "binaries and service logs")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the run's schemas for inspection")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	flag.Parse()
	for _, o := range strings.Split(*lost, ",") {
		if o = strings.TrimSpace(o); o != "" {
			cfg.Lost = append(cfg.Lost, o)
		}
	}
	for _, s := range strings.Split(*schedule, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(os.Stderr, "-schedule:", err)
			os.Exit(2)
		}
		cfg.Schedule = append(cfg.Schedule, d)
	}
	if _, ok := drillkit.RunDemo(*timeout, "recharge report", Run, cfg, "a check"); !ok {
		os.Exit(1)
	}
	lostOnes := "the lost one"
	if len(cfg.Lost) != 1 {
		lostOnes = "the lost ones"
	}
	fmt.Printf("OK: every top-up credited exactly once; the retried ones once, %s through the query API\n", lostOnes)
}
