// Command demo runs the transfer example end to end on the servers from `make up`: it builds and
// starts bank instances (two-phase-commit coordinators sharing one log), makes a short script of
// transfers from txkit_east to txkit_west — some committed, one refused for insufficient funds,
// one to an account that does not exist — printing the balances before and after and the outcome
// of each, then any random transfers asked for; it waits until every global transaction has
// finished and no prepared transaction is left, and checks the invariants: money conserved, every
// transfer on both sides or on neither as the log says, no prepared transaction left, no global
// transaction unfinished. With -drill the leading bank instance is SIGKILLed (and restarted)
// during the load, preferably while it holds a transfer between the phases (the banks' pause
// hook); the report gives the time from each leader's death to the next leader's first recovery
// and to the end of the prepared transactions it left. It exits 1 when an invariant breaks.
//
//	go run ./examples/transfer/demo                                    # the script, 2 instances
//	go run ./examples/transfer/demo -drill -instances 3 -transfers 2000 # the failover drill
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/txkit/txkit/examples/internal/exapp"
	"github.com/txkit/txkit/examples/internal/exharness"
	"github.com/txkit/txkit/examples/transfer/internal/app"
)

func main() {
	cfg := Config{Log: os.Stdout}
	flag.IntVar(&cfg.Transfers, "transfers", -1, "random transfers after the script (default 0, 600 with -drill)")
	flag.IntVar(&cfg.Instances, "instances", 2, "bank instances")
	flag.IntVar(&cfg.Concurrency, "concurrency", 8, "transfers in flight")
	flag.IntVar(&cfg.Rate, "rate", -1, "transfers per second at most (0: as fast as they go; default 0, 40 with -drill so the kills land under load)")
	flag.BoolVar(&cfg.Drill, "drill", false, "SIGKILL the leading bank instance during the load, with some commits pausing between the phases")
	flag.IntVar(&cfg.Kills, "kills", 3, "leader kills of a drill")
	flag.DurationVar(&cfg.KillEvery, "kill-every", 2*time.Second, "pause before each kill (which then waits up to 5s for the leader to hold a transfer between the phases)")
	flag.Float64Var(&cfg.PauseRate, "pause-rate", 0.2, "with -drill: fraction of commits that sleep -pause between the phases")
	flag.DurationVar(&cfg.Pause, "pause", time.Second, "with -drill: the sleep of a paused commit")
	flag.StringVar(&cfg.PauseAt, "pause-at", "both", "with -drill: where a paused commit sleeps: prepared, decided or both")
	flag.DurationVar(&cfg.SessionTimeout, "session-timeout", 4*time.Second, "the banks' ZooKeeper session timeout")
	flag.StringVar(&cfg.PG, "pg", exapp.Env("TXKIT_PG_URL", app.DefaultPG), "PostgreSQL URL (databases "+app.East+" and "+app.West+" are created if missing)")
	flag.StringVar(&cfg.ZK, "zk", exapp.Env("TXKIT_ZK", app.DefaultZK), "ZooKeeper servers")
	flag.StringVar(&cfg.Dir, "dir", filepath.Join(exapp.Env("TXKIT_HOME", ".txkit"), "transfer"), "binary and service logs")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the run's schemas for inspection")
	flag.DurationVar(&cfg.SettleTimeout, "settle-timeout", 3*time.Minute, "how long to wait for every transaction to finish after the load")
	flag.StringVar(&cfg.Protocol, "protocol", "2pc", "the banks' protocol: 2pc or 3pc (then an agent runs beside each database)")
	flag.StringVar(&cfg.Termination, "termination", "consult-log", "3pc: the agents' termination mode, consult-log or textbook")
	flag.DurationVar(&cfg.ParticipantTimeout, "participant-timeout", 3*time.Second, "3pc: the agents' timeout (the banks' -participant-timeout)")
	flag.IntVar(&cfg.Partitions, "partitions", 0, "partition trials after the load: the banks' link to "+app.West+" partitioned right after a PREPARE reached it, healed after the participant timeout + 1s")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()
	if cfg.Transfers < 0 {
		cfg.Transfers = 0
		if cfg.Drill {
			cfg.Transfers = 600
		}
	}
	if cfg.Rate < 0 {
		cfg.Rate = 0
		if cfg.Drill {
			cfg.Rate = 40
		}
	}
	rep, ok := exharness.RunDemo(*timeout, "transfer report", Run, cfg, "an invariant")
	if !ok {
		os.Exit(1)
	}
	if rep.Anomalies > 0 {
		fmt.Printf("OK (%s): %d transfers committed on one side only — the textbook mode's anomaly, expected; everything else as the log says; no prepared transaction left; no global transaction unfinished\n", rep.mode(), rep.Anomalies)
		return
	}
	fmt.Println("OK: money conserved; every transfer on both sides or on neither, as the log says; no prepared transaction left; no global transaction unfinished")
}
