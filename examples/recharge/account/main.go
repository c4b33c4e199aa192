// Command account is the recharge example's account service. It keeps balances and the top-ups it
// asked for in its own database, and learns their results from the recharge service's
// notifications.
//
//   - POST /topups {"account", "amount", optional "order"} records the order as pending, then asks
//     the recharge service (POST /recharges) to top the account up.
//
//   - POST /notify is a inbox.Inbox: it verifies each delivery's signature and timestamp and, in
//     one transaction, claims the notification's id and credits the order's amount to the balance,
//     so a notification delivered twice is credited once. -fail-first answers 500 to the first
//     deliveries instead (a service warming up), so that the recharge service retries them.
//
//   - POST /reconcile asks the recharge service's query API (GET /notifications, signed, through a
//     notify.Client) for the result of every order still pending — or of the orders in the body,
//     {"orders": [...]} — and credits the ones it never got a notification for (Inbox.Reconcile):
//     a lost notification is never a lost recharge.
//
//   - GET /orders and GET /balances show the state.
//
// The HMAC key shared with the recharge service comes from $TXKIT_RECHARGE_SECRET, or from the file
// -secret-file names (at least 16 bytes; there is no default: without it the service exits).
// Plain http:// to the recharge service is allowed on the loopback interface only.
//
//	TXKIT_RECHARGE_SECRET=$(openssl rand -hex 16) go run ./examples/recharge/account -recharge http://127.0.0.1:8080 -listen 127.0.0.1:8081 -schema demo
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/recharge/app"
	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/notify"
	"github.com/txkit/txkit/notify/inbox"
)

type config struct {
	listen, pg, schema, recharge, secret string
	failFirst                            int
}

func main() {
	var c config
	flag.StringVar(&c.listen, "listen", "127.0.0.1:0", "HTTP address")
	flag.StringVar(&c.pg, "pg", exapp.Env("TXKIT_PG_URL", app.DefaultPG), "PostgreSQL URL (its database is replaced by "+app.AccountDB+", created if missing)")
	flag.StringVar(&c.schema, "schema", "account", "schema of the balances, the orders and the idempotency keys")
	flag.StringVar(&c.recharge, "recharge", "", "the recharge service's base URL (required), e.g. http://127.0.0.1:8080")
	flag.IntVar(&c.failFirst, "fail-first", 0, "deliveries answered 500 before the notifications are applied (demo fault)")
	secretFile := flag.String("secret-file", "", "file holding the HMAC key shared with the other service (default: $"+app.SecretEnv+")")
	flag.Parse()
	log := exapp.Logger("account")
	var err error
	if c.secret, err = app.Secret(*secretFile); err != nil {
		fmt.Fprintln(os.Stderr, "account:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, log); err != nil {
		log.Error("account service failed", "err", err)
		os.Exit(1)
	}
}

type service struct {
	c      config
	pool   *pgxpool.Pool
	inbox  *inbox.Inbox
	client notify.Client
	http   *http.Client
	failed atomic.Int64 // deliveries answered 500 by -fail-first
	log    *slog.Logger
}

func run(ctx context.Context, c config, log *slog.Logger) error {
	if c.recharge == "" {
		return errors.New("-recharge is required (the recharge service's base URL)")
	}
	c.recharge = strings.TrimRight(c.recharge, "/")
	pool, err := exapp.Pool(ctx, c.pg, app.AccountDB, c.schema, 16)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `
		create table if not exists balances (account text primary key, amount bigint not null default 0);
		create table if not exists orders (
			id text primary key, account text not null, amount bigint not null check (amount > 0),
			status text not null default 'pending' check (status in ('pending', 'credited', 'failed')),
			asked_at timestamptz not null default now(), credited_at timestamptz);
		-- one row per credit: an order credited twice would show here (no unique key on purpose)
		create table if not exists credits (
			order_id text not null, notification uuid not null, amount bigint not null, via text not null,
			at timestamptz not null default now())`); err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	// The Inbox claims each notification's id in this store, in the credit's transaction. Its keys
	// must outlive the sender's schedule (about a day by default): the retention is a week.
	mux := http.NewServeMux()
	reg := exapp.Metrics(mux)
	store, err := idempotency.New(pool, idempotency.WithTable(c.schema, ""),
		idempotency.WithRetention(7*24*time.Hour, "@every 1m"), idempotency.WithLogger(log),
		idempotency.WithRegisterer(reg))
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	// The client follows no redirect: a signed query goes to the recharge service only.
	s := &service{c: c, pool: pool, log: log, http: &http.Client{Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	s.client = notify.Client{URL: c.recharge + "/notifications", Receiver: app.Receiver, Secrets: []string{c.secret}, HTTP: s.http,
		PlainHTTP: app.PlainHTTP(c.recharge)}
	if s.inbox, err = inbox.New(pool, store, app.Receiver, []string{c.secret}, s.credit, inbox.WithLogger(log)); err != nil {
		return err
	}
	mux.HandleFunc("POST /topups", s.topup)
	mux.HandleFunc("POST /notify", s.notify)
	mux.HandleFunc("POST /reconcile", s.reconcile)
	mux.HandleFunc("GET /orders", s.orders)
	mux.HandleFunc("GET /balances", s.balances)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return store.Run(ctx) })
	g.Go(func() error { return exapp.Serve(ctx, c.listen, mux) })
	log.Info("account service running", "schema", c.schema, "recharge", c.recharge, "fail_first", c.failFirst)
	return g.Wait()
}

// topup: POST /topups → 200 asked (the recharge service took the order; its result comes by
// notification); 400 for a bad body; 409 when the order exists with another account or amount;
// 502 when the recharge service did not take it (the order stays pending, and reconciliation
// finds nothing to credit for it until it is asked again).
func (s *service) topup(w http.ResponseWriter, r *http.Request) {
	var req app.Recharge
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil || req.Account == "" || req.Amount <= 0 {
		exapp.WriteJSON(w, http.StatusBadRequest, app.Answer{Order: req.Order, Status: "rejected", Error: `want {"account", "amount" > 0, optional "order"}`})
		return
	}
	if req.Order == "" {
		req.Order = "order-" + uuid.NewString()
	}
	// The order is recorded before the recharge is asked for: a result can never arrive for an
	// order this service does not know.
	var account string
	var amount int64
	err := pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(r.Context(), `insert into balances (account) values ($1) on conflict do nothing`, req.Account); err != nil {
			return err
		}
		if _, err := tx.Exec(r.Context(), `insert into orders (id, account, amount) values ($1, $2, $3) on conflict do nothing`,
			req.Order, req.Account, req.Amount); err != nil {
			return err
		}
		return tx.QueryRow(r.Context(), `select account, amount from orders where id = $1`, req.Order).Scan(&account, &amount)
	})
	if err != nil {
		exapp.Fail(w, s.log, http.StatusInternalServerError, "recording the order failed", err, "order", req.Order)
		return
	}
	if account != req.Account || amount != req.Amount {
		exapp.WriteJSON(w, http.StatusConflict, app.Answer{Order: req.Order, Status: "rejected", Error: "the order exists with another account or amount"})
		return
	}
	code, ans, err := s.askRecharge(r.Context(), req)
	if err != nil || code != http.StatusOK {
		if err == nil {
			err = fmt.Errorf("recharge service answered %d: %s", code, ans.Error)
		}
		exapp.Fail(w, s.log, http.StatusBadGateway, "the recharge service did not take the order", err, "order", req.Order)
		return
	}
	exapp.WriteJSON(w, http.StatusOK, app.Answer{Order: req.Order, Status: "asked", Notification: ans.Notification})
}

func (s *service) askRecharge(ctx context.Context, req app.Recharge) (int, app.Answer, error) {
	var ans app.Answer
	body, err := json.Marshal(req)
	if err != nil {
		return 0, ans, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, s.c.recharge+"/recharges", bytes.NewReader(body))
	if err != nil {
		return 0, ans, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := s.http.Do(hreq)
	if err != nil {
		return 0, ans, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return resp.StatusCode, ans, err
	}
	if err := json.Unmarshal(b, &ans); err != nil {
		return resp.StatusCode, ans, fmt.Errorf("recharge service answered %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return resp.StatusCode, ans, nil
}

// notify: POST /notify → the Inbox, after -fail-first deliveries answered 500.
func (s *service) notify(w http.ResponseWriter, r *http.Request) {
	if n := s.failed.Add(1); n <= int64(s.c.failFirst) {
		s.log.Info("answering 500 to a delivery (-fail-first)", "id", r.Header.Get(notify.HeaderID), "n", n)
		http.Error(w, "warming up (-fail-first)", http.StatusInternalServerError)
		return
	}
	s.inbox.ServeHTTP(w, r)
}

// viaKey marks the context of a reconciliation, so that credit records how the result came.
type viaKey struct{}

// credit applies one result in tx, the Inbox's transaction that has just claimed the
// notification's id (so it runs once per notification, whether the result came by delivery or by
// reconciliation): the order is credited and its amount added to the balance. An order this
// service did not ask for, or a result that does not match the order, is an error: the
// transaction rolls back and the delivery is answered 500.
func (s *service) credit(ctx context.Context, tx pgx.Tx, d notify.Delivery) error {
	var res app.Result
	if err := json.Unmarshal(d.Payload, &res); err != nil {
		return fmt.Errorf("order %s: payload: %w", d.Key, err)
	}
	var account string
	var amount int64
	err := tx.QueryRow(ctx, `select account, amount from orders where id = $1 for update`, d.Key).Scan(&account, &amount)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("order %s: not asked for here", d.Key)
	}
	if err != nil {
		return err
	}
	if account != res.Account || amount != res.Amount {
		return fmt.Errorf("order %s: result %s %d does not match the order (%s %d)", d.Key, res.Account, res.Amount, account, amount)
	}
	if res.Status != "succeeded" {
		_, err := tx.Exec(ctx, `update orders set status = 'failed' where id = $1 and status = 'pending'`, d.Key)
		return err
	}
	via, _ := ctx.Value(viaKey{}).(string)
	if via == "" {
		via = "notification"
	}
	// No "where status = 'pending'" guard here on purpose: applying once is the Inbox's job, and
	// the credits table would show a second credit.
	if _, err := tx.Exec(ctx, `update orders set status = 'credited', credited_at = now() where id = $1`, d.Key); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `insert into credits (order_id, notification, amount, via) values ($1, $2, $3, $4)`, d.Key, d.ID, amount, via); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `update balances set amount = amount + $2 where account = $1`, account, amount)
	return err
}

// reconcile: POST /reconcile [{"orders": [...]}] → asks the recharge service about the orders in
// the body, or else about every pending one, and credits those whose result never came.
func (s *service) reconcile(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Orders []string `json:"orders"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		exapp.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": `want nothing, or {"orders": [...]}`})
		return
	}
	out := app.Reconciled{Asked: req.Orders}
	if len(out.Asked) == 0 {
		var err error
		if out.Asked, err = s.pending(r.Context()); err != nil {
			exapp.Fail(w, s.log, http.StatusInternalServerError, "listing the pending orders failed", err)
			return
		}
	}
	n, err := s.inbox.Reconcile(context.WithValue(r.Context(), viaKey{}, "reconcile"), s.client, out.Asked...)
	out.Credited = n
	if err != nil {
		out.Error = "asking the recharge service failed for some orders (request id " + exapp.LogError(s.log, "reconcile failed", err) + ")"
	}
	pending, perr := s.pending(r.Context())
	if perr != nil {
		exapp.Fail(w, s.log, http.StatusInternalServerError, "listing the pending orders failed", perr)
		return
	}
	out.Pending = pending
	code := http.StatusOK
	if err != nil {
		code = http.StatusBadGateway
	}
	exapp.WriteJSON(w, code, out)
}

func (s *service) pending(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `select id from orders where status = 'pending' order by id`)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if ids == nil {
		ids = []string{}
	}
	return ids, err
}

// orders: GET /orders → every order, with its credits.
func (s *service) orders(w http.ResponseWriter, r *http.Request) {
	rows, err := s.pool.Query(r.Context(), `select o.id, o.account, o.amount, o.status, o.asked_at,
	extract(epoch from o.credited_at - o.asked_at)::float8, count(c.order_id)::int, coalesce(array_agg(c.via order by c.at) filter (where c.via is not null), '{}')
from orders o left join credits c on c.order_id = o.id group by o.id order by o.id`)
	if err != nil {
		exapp.Fail(w, s.log, http.StatusInternalServerError, "reading the database failed", err)
		return
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (app.Order, error) {
		var o app.Order
		err := row.Scan(&o.ID, &o.Account, &o.Amount, &o.Status, &o.AskedAt, &o.Credited, &o.Credits, &o.Via)
		return o, err
	})
	if err != nil {
		exapp.Fail(w, s.log, http.StatusInternalServerError, "reading the database failed", err)
		return
	}
	exapp.WriteJSON(w, http.StatusOK, out)
}

// balances: GET /balances → account → balance.
func (s *service) balances(w http.ResponseWriter, r *http.Request) {
	rows, err := s.pool.Query(r.Context(), `select account, amount from balances order by account`)
	if err != nil {
		exapp.Fail(w, s.log, http.StatusInternalServerError, "reading the database failed", err)
		return
	}
	out := map[string]int64{}
	var account string
	var amount int64
	_, err = pgx.ForEachRow(rows, []any{&account, &amount}, func() error {
		out[account] = amount
		return nil
	})
	if err != nil {
		exapp.Fail(w, s.log, http.StatusInternalServerError, "reading the database failed", err)
		return
	}
	exapp.WriteJSON(w, http.StatusOK, out)
}
