// Command demo runs the transfer example end to end on the servers from `make up`: it builds and
// starts bank instances (two-phase-commit coordinators sharing one log, or with -protocol 3pc
// three-phase-commit ones with an agent beside each database), makes a short script of transfers
// from txkit_east to txkit_west — some committed, one refused for insufficient funds, one to an
// account that does not exist — printing the balances before and after and the outcome of each,
// then any random transfers asked for; it waits until every global transaction has finished and
// no prepared transaction is left, and checks the invariants: money conserved, every transfer on
// both sides or on neither as the log says, no prepared transaction left, no global transaction
// unfinished. With -drill the leading bank instance is SIGKILLed (and restarted) during the load,
// preferably while it holds a transfer between the phases (the banks' pause hook); the report
// gives the time from each leader's death to the next leader's first recovery and, per transfer
// it left prepared, until its row locks were released (blocking, p50/p99). With -partitions N,
// N partition trials follow the load: the banks' link to txkit_west is partitioned right after a
// PREPARE TRANSACTION reached it, and the report counts transfers that ended committed on one
// side and aborted on the other (3pc textbook mode: expected; anywhere else: a violation).
// -compare runs the drill three times — 2pc, 3pc consult-log, 3pc textbook (partitions only) —
// and prints their figures side by side. It exits 1 when an invariant breaks.
//
//	go run ./drills/transfer                                    # the script, 2 instances
//	go run ./drills/transfer -drill -instances 3 -transfers 2000 # the failover drill
//	go run ./drills/transfer -protocol 3pc -partitions 3        # 3PC, partition trials
//	go run ./drills/transfer -compare -drill -partitions 5       # make drill-3pc
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/txkit/txkit/drills/internal/drillkit"
	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/transfer/app"
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
	flag.BoolVar(&cfg.Votes, "votes", true, "2pc: the banks commit with vote markers (twopc.WithVoteMarkers, the default): a transfer is recorded while its branches prepare; -votes=false writes the decision between the phases")
	flag.StringVar(&cfg.Termination, "termination", "consult-log", "3pc: the agents' termination mode, consult-log or textbook")
	flag.DurationVar(&cfg.ParticipantTimeout, "participant-timeout", 3*time.Second, "3pc: the agents' timeout (the banks' -participant-timeout)")
	flag.IntVar(&cfg.Partitions, "partitions", 0, "partition trials after the load: the banks' link to "+app.West+" partitioned right after a PREPARE reached it, healed after the participant timeout + 1s")
	flag.IntVar(&cfg.PGFailovers, "pg-failovers", 0, "SIGKILL the HA PostgreSQL's primary this many times during the load (-pg \"$TXKIT_PG_HA_URL\"; deploy/local/pg-ha)")
	flag.BoolVar(&cfg.PGCut, "pg-cut", false, "with -pg-failovers: the last one cuts the primary off the network instead of killing it (iptables: its ports both ways and everything its Patroni and PostgreSQL send, ZooKeeper included; healed once a new primary takes writes)")
	flag.BoolVar(&cfg.PGAsync, "pg-async", false, "with -pg-failovers: asynchronous replication (Patroni synchronous_mode off for the run): what a failover loses")
	compare := flag.Bool("compare", false, "run three times — -protocol 2pc, 3pc consult-log, 3pc textbook (the script and the partition trials only) — and print their blocking and anomaly figures side by side")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long (each run, with -compare)")
	flag.Parse()
	votesSet := false
	flag.Visit(func(f *flag.Flag) { votesSet = votesSet || f.Name == "votes" })
	if !votesSet && cfg.Protocol != "2pc" {
		cfg.Votes = false // the default is 2pc's; 3pc has no vote markers
	}
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
	if *compare {
		if !runCompare(*timeout, cfg) {
			os.Exit(1)
		}
		return
	}
	rep, ok := drillkit.RunDemo(*timeout, "transfer report", Run, cfg, "an invariant")
	if !ok {
		os.Exit(1)
	}
	if rep.Anomalies > 0 {
		fmt.Printf("OK (%s): %d transfers committed on one side only — the textbook mode's anomaly, expected; everything else as the log says; no prepared transaction left; no global transaction unfinished\n", rep.mode(), rep.Anomalies)
		return
	}
	fmt.Println("OK: money conserved; every transfer on both sides or on neither, as the log says; no prepared transaction left; no global transaction unfinished")
}

// runCompare runs cfg as a 2pc drill, as a 3pc consult-log drill and as 3pc textbook partition
// trials (no random load, no kills: only the partitions, where textbook mode differs), printing
// each report, then a table of their figures. It reports whether every run held its checks.
func runCompare(timeout time.Duration, cfg Config) bool {
	textbook := cfg
	textbook.Protocol, textbook.Termination, textbook.Transfers, textbook.Drill = "3pc", "textbook", 0, false
	textbook.Votes = false
	consult := cfg
	consult.Protocol, consult.Termination, consult.Votes = "3pc", "consult-log", false
	two := cfg
	two.Protocol = "2pc"
	runs := []struct {
		name string
		cfg  Config
	}{{"2pc", two}, {"3pc consult-log", consult}, {"3pc textbook", textbook}}
	reps := make([]Report, len(runs))
	all := true
	for i, r := range runs {
		fmt.Printf("\n== %s\n", r.name)
		rep, ok := drillkit.RunDemo(timeout, "transfer report ("+r.name+")", Run, r.cfg, "an invariant")
		reps[i], all = rep, all && ok
	}
	fmt.Printf("\n%-16s | %5s | %8s | %12s | %12s | %10s | %9s | %s\n", "protocol", "kills", "stranded", "blocking p50", "blocking p99", "partitions", "one-sided", "checks")
	for i, r := range runs {
		rep := reps[i]
		stranded := 0
		for _, n := range rep.InDoubt {
			stranded += n
		}
		kills, p50, p99 := "-", "-", "-"
		if r.cfg.Drill {
			kills, p50, p99 = fmt.Sprint(rep.LeaderKills), rep.BlockingP(50).Round(10*time.Millisecond).String(), rep.BlockingP(99).Round(10*time.Millisecond).String()
		}
		checks := "ok"
		if err := rep.OK(); err != nil {
			checks = "FAILED: " + err.Error()
		} else if rep.Anomalies > 0 {
			checks = "ok (one-sided transfers expected in textbook mode)"
		}
		fmt.Printf("%-16s | %5s | %8d | %12s | %12s | %10d | %9d | %s\n", r.name, kills, stranded, p50, p99, rep.Partitioned, rep.Anomalies, checks)
	}
	if all {
		fmt.Println("OK: every run held its checks; no prepared transaction left; one-sided transfers only in textbook mode, where they were expected and counted")
	}
	return all
}
