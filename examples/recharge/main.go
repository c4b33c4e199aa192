// Command recharge is the best-effort notification example: an account service asks a recharge
// service to top accounts up; the recharge service records each top-up with its notification in
// one transaction and notifies the result (signed, on a schedule, under a ZooKeeper election);
// the account service credits each notification once, and reconciles through the recharge
// service's query API the one whose notifications never got through. Each service keeps its
// tables in its own schema. It prints what happened and exits 1 when a check fails.
//
//	make recharge   # or: go run ./examples/recharge
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
)

func main() {
	cfg := Config{Out: os.Stdout, Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	flag.StringVar(&cfg.PG, "pg", env("TXKIT_PG_URL", "postgres://postgres@127.0.0.1:55432/txkit_test?sslmode=disable"), "PostgreSQL URL")
	flag.StringVar(&cfg.ZK, "zk", env("TXKIT_ZK", "127.0.0.1:22181"), "ZooKeeper servers")
	flag.IntVar(&cfg.Recharges, "recharges", 20, "top-ups to ask for")
	flag.IntVar(&cfg.FailFirst, "fail-first", 3, "deliveries the account service answers 500 first")
	flag.IntVar(&cfg.Lost, "lost", 7, "the recharge whose notifications never get through")
	flag.BoolVar(&cfg.KeepSchema, "keep", false, "keep the run's schemas")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "recharge:", err)
		os.Exit(1)
	}
	if len(rep.Violations) > 0 {
		fmt.Println("FAIL:", len(rep.Violations), "checks broken")
		os.Exit(1)
	}
	fmt.Println("OK: every top-up credited exactly once, the lost notification through reconciliation")
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
