// Package shop holds what the stock example's order service, stock service and demo share: the
// tables (in a schema of the run's own), the JSON of their HTTP calls, the outcomes, and the
// services' start-up ([Service]).
package shop

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/examples/exapp"
)

// DB is the database the example's schemas live in (created if missing).
const DB = "txkit_stock"

// Status is the outcome of a deduction, as the stock service answers it and the order service
// records it.
type Status string

const (
	Pending   Status = "pending"   // the order service has not had a final answer yet
	Deducted  Status = "deducted"  // the stock was deducted for the operation (now or by an earlier call)
	Refused   Status = "refused"   // too little stock (or no such SKU): nothing was deducted
	Undecided Status = "undecided" // the order service gave up retrying; the outcome is unknown
)

// Final reports whether s is an answer a caller can act on (deducted or refused).
func (s Status) Final() bool { return s == Deducted || s == Refused }

// DeductRequest is the body of the stock service's POST /deduct.
type DeductRequest struct {
	OpID string `json:"op_id"` // the operation id, the same on every retry of one order
	SKU  string `json:"sku"`
	Qty  int64  `json:"qty"`
}

// DeductAnswer is the stock service's answer: 200 deducted, 409 refused.
type DeductAnswer struct {
	Status    Status `json:"status"`
	Duplicate bool   `json:"duplicate,omitempty"` // the operation had already been applied
	Stock     int64  `json:"stock"`               // what the stock service read
}

// OrderRequest is the body of the order service's POST /orders.
type OrderRequest struct {
	SKU string `json:"sku"`
	Qty int64  `json:"qty"`
}

// OrderAnswer is the order service's answer: 200 deducted, 409 refused, 503 undecided.
type OrderAnswer struct {
	OpID     string `json:"op_id"`
	Status   Status `json:"status"`
	Attempts int    `json:"attempts"` // stock-service calls made
}

// MaxQty bounds one order's quantity.
const MaxQty = 1000

// Check returns what is wrong with a request naming sku and qty, or nil.
func Check(sku string, qty int64) error {
	if sku == "" || len(sku) > 64 {
		return fmt.Errorf("sku %q: want 1 to 64 bytes", sku)
	}
	if qty < 1 || qty > MaxQty {
		return fmt.Errorf("qty %d: want 1 to %d", qty, MaxQty)
	}
	return nil
}

// Migrate creates the example's tables in the pool's schema (its search_path):
//
//   - sku: the stock of each SKU, and what it started with;
//   - stock_flow: one row per deduction, keyed by the operation id, so that a retried operation
//     is recognised and every deduction is on record;
//   - orders: the order service's orders and their outcomes.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `
create table if not exists sku (
    sku     text   primary key,
    initial bigint not null,
    stock   bigint not null
);
create table if not exists stock_flow (
    op_id text        primary key,
    sku   text        not null references sku,
    qty   bigint      not null,
    at    timestamptz not null default clock_timestamp()
);
create table if not exists orders (
    op_id       text        primary key,
    sku         text        not null,
    qty         bigint      not null,
    status      text        not null,
    attempts    int         not null default 0,
    created_at  timestamptz not null default clock_timestamp(),
    answered_at timestamptz
)`)
	if err != nil {
		return fmt.Errorf("create the stock tables: %w", err)
	}
	return nil
}

// Seed inserts each SKU of stock with its quantity.
func Seed(ctx context.Context, pool *pgxpool.Pool, stock map[string]int64) error {
	for _, sku := range slices.Sorted(maps.Keys(stock)) {
		if _, err := pool.Exec(ctx, `insert into sku (sku, initial, stock) values ($1, $2, $2)`, sku, stock[sku]); err != nil {
			return fmt.Errorf("seed %s: %w", sku, err)
		}
	}
	return nil
}

// Main runs a service: run with a ctx that ends on SIGINT or SIGTERM. When run fails, it logs
// "<what> failed" and exits 1.
func Main(log *slog.Logger, what string, run func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		log.Error(what+" failed", "err", err)
		os.Exit(1)
	}
}

// Service is what the order and the stock service both take from their command line: where they
// listen and where their tables are.
type Service struct {
	Listen, PG, DB, Schema string
}

// Flags defines -listen, -pg, -db and -schema on the command line's flag set, into s; tables
// names the service's tables in their help ("orders table").
func (s *Service) Flags(tables string) {
	flag.StringVar(&s.Listen, "listen", "127.0.0.1:0", "HTTP address")
	flag.StringVar(&s.PG, "pg", exapp.Env(exapp.EnvPG, ""), "PostgreSQL URL (its database is replaced by -db)")
	flag.StringVar(&s.DB, "db", DB, "database of the "+tables+" (created if missing)")
	flag.StringVar(&s.Schema, "schema", "txkit_stock", "schema of the "+tables)
}

// Pool opens a pool of at most 8 connections on database s.DB (created if missing) of the server
// of s.PG, whose search_path is s.Schema (created if missing). It blocks until the server answers
// or ctx ends.
func (s Service) Pool(ctx context.Context) (*pgxpool.Pool, error) {
	if s.PG == "" {
		return nil, fmt.Errorf("no PostgreSQL URL: set %s or -pg", exapp.EnvPG)
	}
	return exapp.Pool(ctx, s.PG, s.DB, s.Schema, 8)
}

// Serve adds GET /healthz (204) to mux and serves it on s.Listen until ctx ends (see
// [exapp.Serve]).
func (s Service) Serve(ctx context.Context, mux *http.ServeMux) error {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	return exapp.Serve(ctx, s.Listen, mux)
}

// Decode decodes the JSON body of r, 4 KiB at most, into v. When it cannot, it answers 400 "bad
// request body" and returns false.
func Decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(v); err != nil {
		exapp.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": "bad request body"})
		return false
	}
	return true
}
