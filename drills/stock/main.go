// Command demo runs the stock example — the documents' flash-sale stock deduction on a
// distributed lock — end to end on the servers from `make up`. It builds and starts the stock
// service (several instances) and the order service, then:
//
//  1. the documents' scenario: one SKU with 4 in stock, buyer A asks 3 and buyer B asks 2 at
//     once — exactly one may succeed;
//  2. the load: -orders orders of 1 to 3 items from -buyers concurrent buyers on -skus SKUs of
//     -stock items each, the order service retrying failed calls with the same operation id; it
//     prints orders/s and the latency's p50 and p99;
//  3. the crash phase: orders on fresh SKUs while, -kills times, a stock instance is SIGKILLed
//     while it holds a SKU's lock mid-deduction, and restarted; it prints how long the deduction
//     it held took to be answered after the kill (its retry waits for the dead holder's lock).
//
// Then it checks the stock: never oversold, each operation applied at most once (and every order
// answered deducted has its stock_flow row), stock + sold = initial for every SKU, exactly one
// of the scenario's buyers served. It exits 1 when a check fails. -lock none takes no lock, so the
// checks must fail; with -expect-fail the demo exits 0 only when one does.
//
//	go run ./drills/stock -lock zk                    # zk, zk-unfair, pg, redis, redlock
//	go run ./drills/stock -lock none -expect-fail     # the checks catch the oversell
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/txkit/txkit/drills/internal/drillkit"
	"github.com/txkit/txkit/examples/exapp"
)

func main() {
	cfg := Config{Log: os.Stdout}
	flag.StringVar(&cfg.Lock, "lock", "zk", "lock backend: "+strings.Join(exapp.LockKinds(), ", ")+", or none (no lock: the checks must fail)")
	flag.IntVar(&cfg.Orders, "orders", 2000, "orders of the load phase")
	flag.IntVar(&cfg.Buyers, "buyers", 32, "concurrent buyers of the load phase")
	flag.IntVar(&cfg.SKUs, "skus", 4, "SKUs of the load phase (and of the crash phase)")
	flag.Int64Var(&cfg.Stock, "stock", 50, "initial stock of each SKU")
	flag.IntVar(&cfg.Instances, "instances", 3, "stock-service instances")
	flag.IntVar(&cfg.Kills, "kills", 4, "stock instances SIGKILLed while holding a lock (0: no crash phase)")
	flag.DurationVar(&cfg.TTL, "ttl", 2*time.Second, "how long a dead holder keeps its lock: ZooKeeper session timeout, lease TTL")
	flag.DurationVar(&cfg.Window, "window", 2*time.Millisecond, "the stock service's pause between reading the stock and writing it")
	flag.StringVar(&cfg.PG, "pg", exapp.Env(exapp.EnvPG, ""), "PostgreSQL URL (the stock tables go to a schema of the run in database txkit_stock)")
	flag.StringVar(&cfg.Dir, "dir", filepath.Join(exapp.Env("TXKIT_HOME", ".txkit"), "stock"), "binaries and service logs")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the run's schema and its locks' ZooKeeper nodes for inspection")
	expectFail := flag.Bool("expect-fail", false, "exit 0 only when a check fails (for -lock none)")
	summary := flag.String("summary", "", "append a row \"backend | orders/s | p99 | kill->answer | checks\" to this file")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	flag.Parse()
	if cfg.PG == "" {
		fmt.Fprintf(os.Stderr, "no PostgreSQL URL: run `make up`, export what deploy/local/env prints (%s), or pass -pg\n", exapp.EnvPG)
		os.Exit(2)
	}
	rep, ok := drillkit.RunDemo(*timeout, fmt.Sprintf("stock report (lock %s)", cfg.Lock), Run, cfg, "a check")
	checked := len(rep.Checks)+len(rep.Violations) > 0
	checks := "ok"
	if !ok {
		checks = "FAILED"
		if checked && len(rep.Violations) > 0 {
			checks = "FAILED: " + failedChecks(rep)
		}
	}
	if *expectFail {
		checks += " (expected)"
		if ok || !checked || len(rep.Violations) == 0 {
			checks = "passed, but a failure was expected"
		}
	}
	if *summary != "" {
		row := fmt.Sprintf("%-10s | %8.0f | %8v | %12v | %s\n", cfg.Lock, rep.Load.PerSecond(), rep.Load.P99.Round(100*time.Microsecond),
			rep.MaxRecovery().Round(10*time.Millisecond), checks)
		if err := appendFile(*summary, row); err != nil {
			fmt.Fprintln(os.Stderr, "summary:", err)
			os.Exit(1)
		}
	}
	switch {
	case *expectFail && !ok && checked && len(rep.Violations) > 0:
		fmt.Printf("OK: without a lock the checks caught it (%s), as expected\n", failedChecks(rep))
	case *expectFail:
		fmt.Fprintln(os.Stderr, "-expect-fail: every check passed (or the run did not get to them); a failure was expected")
		os.Exit(1)
	case !ok:
		os.Exit(1)
	default:
		fmt.Printf("OK: lock %s: never oversold, each operation applied once, stock + sold = initial; %.0f orders/s, p99 %v\n",
			cfg.Lock, rep.Load.PerSecond(), rep.Load.P99.Round(100*time.Microsecond))
	}
}

// failedChecks names the kinds of broken checks (the text before each violation's colon).
func failedChecks(rep Report) string {
	var kinds []string
	for _, v := range rep.Violations {
		k, _, _ := strings.Cut(v, ":")
		if !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	return strings.Join(kinds, ", ")
}

func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
