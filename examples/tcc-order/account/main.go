// Command account is the tcc-order example's account service, a TCC participant: a try freezes
// funds (balance → frozen) or refuses when the balance is too low, a confirm spends the frozen
// funds (frozen → spent), a cancel unfreezes them (frozen → balance). Each op runs behind the
// participant barrier in the same PostgreSQL transaction as the balance change, and writes a
// ledger row the demo uses to prove nothing ran twice.
//
//	go run ./examples/tcc-order/account -schema demo -seed alice=1000,bob=300
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/examples/tcc-order/internal/app"
	"github.com/txkit/txkit/participant"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "HTTP address")
	pg := flag.String("pg", app.Env("TXKIT_PG_URL", app.DefaultPG), "PostgreSQL URL (its database is replaced by -db)")
	db := flag.String("db", "txkit_account", "database of the account service (created if missing)")
	schema := flag.String("schema", "tcc_order", "schema of this run")
	seed := flag.String("seed", "", "initial balances, account=amount,... (inserted only when the account is new)")
	noBarrier := flag.Bool("no-barrier", false, "run ops WITHOUT the participant barrier (to see the demo's checks fail)")
	var faults app.Faults
	app.FaultFlags(&faults, flag.CommandLine)
	flag.Parse()
	log := app.Logger("account")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *listen, *pg, *db, *schema, *seed, *noBarrier, &faults, log); err != nil {
		log.Error("account service failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, listen, pg, db, schema, seed string, noBarrier bool, faults *app.Faults, log *slog.Logger) error {
	initial, err := app.ParseSeed(seed)
	if err != nil {
		return err
	}
	pool, err := app.Pool(ctx, pg, db, schema)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `
		create table if not exists account (
			id      text primary key,
			balance bigint not null check (balance >= 0),
			frozen  bigint not null default 0 check (frozen >= 0),
			spent   bigint not null default 0);
		create table if not exists account_ledger (
			gid text not null, branch text not null, op text not null,
			account text not null, amount bigint not null, at timestamptz not null default clock_timestamp())`); err != nil {
		return fmt.Errorf("create account tables: %w", err)
	}
	for id, n := range initial {
		if _, err := pool.Exec(ctx, `insert into account (id, balance) values ($1, $2) on conflict (id) do nothing`, id, n); err != nil {
			return fmt.Errorf("seed %s: %w", id, err)
		}
	}
	return app.RunParticipant(ctx, app.ParticipantConfig{
		Name: "account", Listen: listen, Pool: pool, Log: log, Faults: faults, Do: do, NoBarrier: noBarrier,
		Stats: func(ctx context.Context) (map[string]any, error) { return totals(ctx, pool) },
	})
}

// do applies one op of an account branch in tx; the barrier has already made sure it is the first.
func do(ctx context.Context, tx pgx.Tx, req participant.Request) error {
	var f app.Funds
	if err := json.Unmarshal(req.Payload, &f); err != nil || f.Account == "" || f.Amount <= 0 {
		return fmt.Errorf("account payload %s: want {\"account\", \"amount\" > 0}: %w", req.Payload, participant.ErrBadRequest)
	}
	var q string
	switch req.Op {
	case participant.OpTry:
		q = `update account set balance = balance - $2, frozen = frozen + $2 where id = $1 and balance >= $2`
	case participant.OpConfirm:
		q = `update account set frozen = frozen - $2, spent = spent + $2 where id = $1`
	case participant.OpCancel:
		q = `update account set frozen = frozen - $2, balance = balance + $2 where id = $1`
	default:
		return fmt.Errorf("account: op %s: %w", req.Op, participant.ErrBadRequest)
	}
	tag, err := tx.Exec(ctx, q, f.Account, f.Amount)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		if req.Op == participant.OpTry {
			return fmt.Errorf("account: %s cannot freeze %d: %w", f.Account, f.Amount, participant.ErrRefused)
		}
		return fmt.Errorf("account: %s of unknown account %s", req.Op, f.Account)
	}
	_, err = tx.Exec(ctx, `insert into account_ledger (gid, branch, op, account, amount) values ($1, $2, $3, $4, $5)`,
		req.GID, req.Branch, req.Op.String(), f.Account, f.Amount)
	return err
}

func totals(ctx context.Context, pool *pgxpool.Pool) (map[string]any, error) {
	var balance, frozen, spent int64
	err := pool.QueryRow(ctx, `select coalesce(sum(balance), 0), coalesce(sum(frozen), 0), coalesce(sum(spent), 0) from account`).
		Scan(&balance, &frozen, &spent)
	return map[string]any{"balance": balance, "frozen": frozen, "spent": spent}, err
}
