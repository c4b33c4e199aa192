// Command stock is the tcc-order example's stock service, a TCC participant: a try reserves
// stock (available → reserved) or refuses when too little is available, a confirm sells the
// reservation (reserved → sold), a cancel releases it (reserved → available). Each op runs behind
// the participant barrier in the same PostgreSQL transaction as the stock change, so a duplicate
// does nothing, a cancel without a try is an empty rollback and a try after its cancel is refused.
// Every applied op also writes a ledger row, which the demo uses to prove nothing ran twice.
//
//	go run ./examples/tcc-order/stock -schema demo -seed sku-1=100,sku-2=50
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
	db := flag.String("db", "txkit_stock", "database of the stock service (created if missing)")
	schema := flag.String("schema", "tcc_order", "schema of this run")
	seed := flag.String("seed", "", "initial stock, sku=available,... (inserted only when the sku is new)")
	noBarrier := flag.Bool("no-barrier", false, "run ops WITHOUT the participant barrier (to see the demo's checks fail)")
	var faults app.Faults
	app.FaultFlags(&faults, flag.CommandLine)
	flag.Parse()
	log := app.Logger("stock")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *listen, *pg, *db, *schema, *seed, *noBarrier, &faults, log); err != nil {
		log.Error("stock service failed", "err", err)
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
		create table if not exists stock (
			sku       text primary key,
			available bigint not null check (available >= 0),
			reserved  bigint not null default 0 check (reserved >= 0),
			sold      bigint not null default 0);
		create table if not exists stock_ledger (
			gid text not null, branch text not null, op text not null,
			sku text not null, qty bigint not null, at timestamptz not null default clock_timestamp())`); err != nil {
		return fmt.Errorf("create stock tables: %w", err)
	}
	for sku, n := range initial {
		if _, err := pool.Exec(ctx, `insert into stock (sku, available) values ($1, $2) on conflict (sku) do nothing`, sku, n); err != nil {
			return fmt.Errorf("seed %s: %w", sku, err)
		}
	}
	return app.RunParticipant(ctx, app.ParticipantConfig{
		Name: "stock", Listen: listen, Pool: pool, Log: log, Faults: faults, Do: do, NoBarrier: noBarrier,
		Stats: func(ctx context.Context) (map[string]any, error) { return totals(ctx, pool) },
	})
}

// do applies one op of a stock branch in tx; the barrier has already made sure it is the first.
func do(ctx context.Context, tx pgx.Tx, req participant.Request) error {
	var item app.StockItem
	if err := json.Unmarshal(req.Payload, &item); err != nil || item.SKU == "" || item.Qty <= 0 {
		return fmt.Errorf("stock payload %s: want {\"sku\", \"qty\" > 0}: %w", req.Payload, participant.ErrBadRequest)
	}
	var q string
	switch req.Op {
	case participant.OpTry:
		q = `update stock set available = available - $2, reserved = reserved + $2 where sku = $1 and available >= $2`
	case participant.OpConfirm:
		q = `update stock set reserved = reserved - $2, sold = sold + $2 where sku = $1`
	case participant.OpCancel:
		q = `update stock set reserved = reserved - $2, available = available + $2 where sku = $1`
	default:
		return fmt.Errorf("stock: op %s: %w", req.Op, participant.ErrBadRequest)
	}
	tag, err := tx.Exec(ctx, q, item.SKU, item.Qty)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		if req.Op == participant.OpTry {
			return fmt.Errorf("stock: %d of %s not available: %w", item.Qty, item.SKU, participant.ErrRefused)
		}
		return fmt.Errorf("stock: %s of unknown sku %s", req.Op, item.SKU)
	}
	_, err = tx.Exec(ctx, `insert into stock_ledger (gid, branch, op, sku, qty) values ($1, $2, $3, $4, $5)`,
		req.GID, req.Branch, req.Op.String(), item.SKU, item.Qty)
	return err
}

func totals(ctx context.Context, pool *pgxpool.Pool) (map[string]any, error) {
	var avail, reserved, sold int64
	err := pool.QueryRow(ctx, `select coalesce(sum(available), 0), coalesce(sum(reserved), 0), coalesce(sum(sold), 0) from stock`).
		Scan(&avail, &reserved, &sold)
	return map[string]any{"available": avail, "reserved": reserved, "sold": sold}, err
}
