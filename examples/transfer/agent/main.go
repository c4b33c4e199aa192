// Command agent is the transfer example's three-phase-commit agent: the process beside one
// database (txkit_east or txkit_west) that ends the prepared transactions a silent coordinator
// left there. Every -poll it looks in pg_prepared_xacts for the bank coordinators' prepared
// transactions (the run's -schema names them) older than -timeout — pre-committed branches that
// heard neither DoCommit nor abort — and ends each by its termination mode: textbook commits it
// (what the documents prescribe; under a partition the coordinator may have aborted), consult-log
// asks the coordinators' decision log (the threepc log in txkit_east's schema, on a pool of its
// own) and follows it, writing the abort itself when the transaction is still undecided; while
// the log cannot be reached it leaves the transaction prepared and asks again at the next poll
// (it never commits without the log: the example gives agent.WithTermination no fallback).
//
// Run one per database, with -timeout equal to the banks' -participant-timeout:
//
//	go run ./examples/transfer/agent -db east -schema demo -termination consult-log
//	go run ./examples/transfer/agent -db west -schema demo -termination consult-log
//
// GET /stats answers what it has done (found, committed, rolled back, fallbacks).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/transfer/app"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/threepc/agent"
)

type config struct {
	listen, pg, db, schema, termination string
	timeout, poll                       time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.listen, "listen", "127.0.0.1:0", "HTTP address of GET /stats")
	flag.StringVar(&c.pg, "pg", exapp.Env("TXKIT_PG_URL", app.DefaultPG), "PostgreSQL URL (its database is replaced by "+app.East+" or "+app.West+")")
	flag.StringVar(&c.db, "db", "", "the database this agent stands beside: east ("+app.East+") or west ("+app.West+")")
	flag.StringVar(&c.schema, "schema", "transfer", "the run's schema (the banks' -schema): it names the prepared transactions, and the decision log lives in "+app.East+"'s")
	flag.StringVar(&c.termination, "termination", "consult-log", "what to do with a pre-committed branch past -timeout: textbook (commit) or consult-log (follow the decision log; wait while it cannot be reached)")
	flag.DurationVar(&c.timeout, "timeout", 3*time.Second, "how long a prepared transaction waits for its coordinator before the agent ends it (the banks' -participant-timeout)")
	flag.DurationVar(&c.poll, "poll", 250*time.Millisecond, "how often the agent scans pg_prepared_xacts")
	flag.Parse()
	log := exapp.Logger("agent").With("db", c.db, "termination", c.termination)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, log); err != nil {
		log.Error("agent failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config, log *slog.Logger) error {
	dbs := map[string]string{"east": app.East, "west": app.West}
	db, ok := dbs[c.db]
	if !ok {
		return fmt.Errorf("-db %q: want east or west", c.db)
	}
	mode, err := agent.ParseTermination(c.termination)
	if err != nil {
		return err
	}
	// The decision log: a pool of its own, on txkit_east's schema of the run, as the banks'.
	logPool, err := exapp.Pool(ctx, c.pg, app.East, c.schema, 4)
	if err != nil {
		return err
	}
	defer logPool.Close()
	pool, err := exapp.Pool(ctx, c.pg, db, c.schema, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	// A coordinator that never runs its recovery: the agent uses it only to read and write the
	// decision log (Decide) and to name the run's prepared transactions.
	mux := http.NewServeMux()
	reg := exapp.Metrics(mux)
	coord, err := threepc.New(logPool, coordinator.WithSchema(c.schema), coordinator.WithLogger(log), coordinator.WithTelemetry(reg, nil))
	if err != nil {
		return err
	}
	defer coord.Close()
	if err := coord.Migrate(ctx); err != nil {
		return err
	}
	pg, err := agent.NewPG(coord, c.db, pool, agent.WithTimeout(c.timeout, c.poll), agent.WithTermination(mode, 0),
		agent.WithLogger(log))
	if err != nil {
		return err
	}
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		exapp.WriteJSON(w, http.StatusOK, map[string]any{"db": c.db, "termination": mode.String(), "agent": pg.Stats()})
	})
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := pg.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	})
	g.Go(func() error { return exapp.Serve(ctx, c.listen, mux) })
	log.Info("agent running", "database", db, "schema", c.schema, "timeout", c.timeout, "poll", c.poll)
	return g.Wait()
}
