// Command tcc-outbox is the TCC + outbox recipe, written to be copied: an order service runs one
// TCC transaction over a stock service (an HTTP participant behind a signed barrier) and its own
// in-process "order" branch, and the order branch's confirm writes the order row and enqueues its
// "order-paid" outbox message in the barrier's transaction. Nothing is written after Commit: once
// the decision is recorded, whichever process confirms the order branch — this one, or the
// elected leader after this one died — writes the row and the message, exactly once. Leadership
// is on PostgreSQL lease rows (package pglock), so PostgreSQL is the only server it needs. It
// imports only txkit's public packages; docs/embed.md walks through it.
//
// It places two orders, one the stock accepts and one it refuses, prints what each left in the
// tables and exits 0, or 1 when something did not go as described.
//
//	make up && set -a && . .txkit/env && set +a
//	go run ./examples/tcc-outbox
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/pglock"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/tcc"
)

func main() {
	url := os.Getenv("TXKIT_PG_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:55432/txkit_test?sslmode=disable"
	}
	pgURL := flag.String("pg", url, "PostgreSQL URL")
	schema := flag.String("schema", "tcc_outbox", "PostgreSQL schema of every table")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := run(ctx, *pgURL, *schema, log); err != nil {
		log.Error("tcc-outbox failed", "err", err)
		os.Exit(1)
	}
}

// run wires a shop and its stock service, places two orders and prints what they left.
func run(ctx context.Context, url, schema string, log *slog.Logger) error {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	// pgxpool's default is max(4, CPUs) connections; recovery alone drives 16 transactions at once
	// (docs/coordinators.md, "Pool sizing").
	cfg.MaxConns = 24
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	secret, err := newSecret() // in a real service: from your secret store, the same on both sides
	if err != nil {
		return err
	}

	// Leadership on PostgreSQL lease rows: no ZooKeeper ensemble to run.
	// WithSchema keeps the lock rows beside the service's other txkit tables (without it: the
	// pool's search_path); every instance must name the same schema.
	locks, err := pglock.New(pool, pglock.WithSchema(schema), pglock.WithTTL(5*time.Second))
	if err != nil {
		return err
	}
	defer locks.Close()
	if err := locks.Migrate(ctx); err != nil { // txkit_locks and its token sequence
		return err
	}
	host, _ := os.Hostname()
	el, err := locks.NewElector("tcc-outbox/recovery", fmt.Sprintf("%s-%d", host, os.Getpid()))
	if err != nil {
		return err
	}

	// The stock service, served here for the demo; in production it is another service, with its
	// own database and its own barrier table (here it shares the order service's schema).
	stockBar, err := barrier.New(pool, barrier.WithTable(schema, ""), barrier.WithSecrets(secret))
	if err != nil {
		return err
	}
	if err := stockBar.Migrate(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: stockHandler(stockBar, schema), ReadHeaderTimeout: 5 * time.Second}

	signing, err := participant.NewSigningClient(secret, nil)
	if err != nil {
		return err
	}
	s, err := newShop(ctx, pool, schema, el, signing, "http://"+ln.Addr().String()+"/stock/tcc", log)
	if err != nil {
		return err
	}
	if err := migrateApp(ctx, pool, schema, 10); err != nil { // the example's own tables: 10 in stock
		return err
	}

	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	g, gctx := errgroup.WithContext(runCtx)
	g.Go(func() error { return s.tccs.Run(gctx) }) // recovery, while el leads
	g.Go(func() error { return s.bar.Run(gctx) })
	g.Go(func() error { return stockBar.Run(gctx) })
	g.Go(func() error { return serve(gctx, srv, ln) })

	werr := func() error {
		for _, qty := range []int{3, 50} { // the second is refused: 7 left in stock
			gid, err := s.place(gctx, order{SKU: "sku-1", Qty: qty})
			var orders, messages int
			if qerr := pool.QueryRow(gctx, `select (select count(*) from `+table(schema, "orders")+` where gid = $1),
				(select count(*) from `+table(schema, "txkit_outbox")+` where key = $1)`, gid).Scan(&orders, &messages); qerr != nil {
				return qerr
			}
			fmt.Printf("order of %d: %v; order rows %d, outbox messages %d\n", qty, err, orders, messages)
			if want := qty <= 10; (err == nil) != want || orders != messages || (orders == 1) != want {
				return fmt.Errorf("order of %d: %v with %d rows and %d messages", qty, err, orders, messages)
			}
		}
		return nil
	}()
	stopAll()
	werr = errors.Join(werr, g.Wait())
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return errors.Join(werr, s.tccs.Flush(fctx)) // the finishes written in the background land
}

// order is the business payload of one order.
type order struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// shop is one instance of the order service: its outbox, the barrier its own branch runs behind,
// the TCC coordinator, and the two participants of every order.
type shop struct {
	schema string
	ob     *outbox.Outbox
	bar    *barrier.Barrier // the order branch's barrier: bar.Run purges its old markers
	tccs   *tcc.Coordinator
	order  participant.Participant // the order service's own branch, in-process
	stock  participant.Participant // the stock service's TCC route
}

// newShop builds the components of one order-service instance and creates their tables. Every
// instance registers the order branch under the same name, so the leader that recovers a
// transaction confirms it in its own process.
func newShop(ctx context.Context, pool *pgxpool.Pool, schema string, el lock.Elector, signing *http.Client,
	stockURL string, log *slog.Logger) (*shop, error) {
	s := &shop{schema: schema, stock: participant.HTTP{URL: stockURL, Client: signing}}
	var err error
	if s.ob, err = outbox.New(pool, outbox.WithTable(schema, "")); err != nil { // txkit_outbox
		return nil, err
	}
	if s.bar, err = barrier.New(pool, barrier.WithTable(schema, "")); err != nil { // txkit_barrier; in-process calls are not signed
		return nil, err
	}
	opts := []coordinator.Option{coordinator.WithSchema(schema), coordinator.WithHTTPClient(signing),
		coordinator.WithLogger(log),
		// A flow a person waits on (docs/coordinators.md, "Defaults for request/response flows"):
		coordinator.WithDefaultTimeout(10 * time.Second),                           // a dead starter's reservations: released within ~10 s
		coordinator.WithLease(5 * time.Second),                                     // a decided transaction: finished ~5 s after its starter died
		coordinator.WithRetry(2*time.Second, 200*time.Millisecond, 30*time.Second), // each call bounded at 2 s; first retry after 0.2 s
	}
	if el != nil { // a process that only starts transactions needs no elector
		opts = append(opts, coordinator.WithElector(el))
	}
	if s.tccs, err = tcc.New(pool, opts...); err != nil {
		return nil, err
	}
	for _, m := range []func(context.Context) error{s.ob.Migrate, s.bar.Migrate, s.tccs.Migrate} {
		if err := m(ctx); err != nil {
			return nil, err
		}
	}
	s.order, err = s.tccs.Register("order", s.bar.Participant(s.orderBranch))
	return s, err
}

// place runs one order as a TCC transaction: the stock's try reserves, the order branch's try
// checks the order; Commit when both succeed, Rollback otherwise. It returns the gid and nil once
// the commit is decided (the order row and its message are then written by the order branch's
// confirm, here or by the leader), or the try's error after rolling back.
func (s *shop) place(ctx context.Context, o order) (string, error) {
	body, err := json.Marshal(o)
	if err != nil {
		return "", err
	}
	g, err := s.tccs.Begin(ctx)
	if err != nil {
		return "", err
	}
	err = g.Try(ctx, tcc.Branch{Name: "stock", Participant: s.stock, Payload: body})
	if err == nil {
		err = g.Try(ctx, tcc.Branch{Name: "order", Participant: s.order, Payload: body})
	}
	if err != nil {
		if rerr := g.Rollback(ctx); rerr != nil && !errors.Is(rerr, coordinator.ErrIncomplete) {
			return g.GID(), errors.Join(err, rerr) // the leader cancels at the timeout
		}
		return g.GID(), err
	}
	// Nothing after Commit: the decision is recorded before the first confirm, and the order
	// branch's confirm writes the row and the message. ErrIncomplete: the leader finishes.
	if err := g.Commit(ctx); err != nil && !errors.Is(err, coordinator.ErrIncomplete) {
		return g.GID(), err
	}
	return g.GID(), nil
}

// orderBranch is the order service's own branch, run by the barrier at most once per op in the
// transaction that records the op. Its confirm writes the order row and enqueues the order's
// message in that transaction: both exist if and only if the confirm committed.
func (s *shop) orderBranch(ctx context.Context, tx pgx.Tx, req participant.Request) error {
	var o order
	if err := json.Unmarshal(req.Payload, &o); err != nil {
		return fmt.Errorf("%w: order payload: %w", participant.ErrBadRequest, err)
	}
	switch req.Op {
	case participant.OpTry: // check the order; nothing to reserve here
		if o.Qty <= 0 {
			return fmt.Errorf("%w: quantity %d", participant.ErrRefused, o.Qty)
		}
		return nil
	case participant.OpConfirm:
		if _, err := tx.Exec(ctx, `insert into `+table(s.schema, "orders")+` (gid, sku, qty) values ($1, $2, $3)`,
			req.GID, o.SKU, o.Qty); err != nil {
			return err
		}
		// Topic is the RocketMQ topic the relay publishes to (create it: docs/embed.md); an
		// event name belongs in Tags when several kinds of message share a topic.
		_, err := s.ob.Enqueue(ctx, tx, outbox.Message{Topic: "order-paid", Key: req.GID, Body: req.Payload})
		return err
	case participant.OpCancel: // the try wrote nothing
		return nil
	}
	return fmt.Errorf("%w: op %s", participant.ErrBadRequest, req.Op)
}

// stockHandler serves the stock service's TCC route behind bar: try reserves, confirm takes the
// reservation, cancel puts it back. The barrier runs each op at most once and never a cancel's
// business code without its try.
func stockHandler(bar *barrier.Barrier, schema string) http.Handler {
	stock := table(schema, "stock")
	mux := http.NewServeMux()
	mux.Handle("POST /stock/tcc", bar.Handler(func(ctx context.Context, tx pgx.Tx, req participant.Request) error {
		var o order
		if err := json.Unmarshal(req.Payload, &o); err != nil {
			return fmt.Errorf("%w: stock payload: %w", participant.ErrBadRequest, err)
		}
		var q string
		switch req.Op {
		case participant.OpTry:
			q = `update ` + stock + ` set available = available - $2, reserved = reserved + $2 where sku = $1 and available >= $2`
		case participant.OpConfirm:
			q = `update ` + stock + ` set reserved = reserved - $2, sold = sold + $2 where sku = $1`
		case participant.OpCancel:
			q = `update ` + stock + ` set available = available + $2, reserved = reserved - $2 where sku = $1`
		}
		tag, err := tx.Exec(ctx, q, o.SKU, o.Qty)
		if err == nil && tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: %d of %s not in stock", participant.ErrRefused, o.Qty, o.SKU)
		}
		return err
	}, barrier.WithAllowedOps(participant.OpTry, participant.OpConfirm, participant.OpCancel)))
	return mux
}

// serve serves srv on ln until ctx ends, then shuts it down.
func serve(ctx context.Context, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		<-errc // http.ErrServerClosed
		return err
	}
}

// migrateApp creates the example's own tables: the orders and the stock, with initial of sku-1.
func migrateApp(ctx context.Context, pool *pgxpool.Pool, schema string, initial int) error {
	_, err := pool.Exec(ctx, `create schema if not exists `+pgx.Identifier{schema}.Sanitize()+`;
		create table if not exists `+table(schema, "orders")+` (gid text primary key, sku text not null, qty int not null);
		create table if not exists `+table(schema, "stock")+` (sku text primary key, available int not null,
			reserved int not null default 0, sold int not null default 0);
		insert into `+table(schema, "stock")+` (sku, available) values ('sku-1', `+fmt.Sprint(initial)+`) on conflict do nothing`)
	return err
}

func table(schema, name string) string { return pgx.Identifier{schema, name}.Sanitize() }

func newSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
