package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/notify"
)

// Config is one run of the example.
type Config struct {
	PG, ZK     string    // PostgreSQL URL, ZooKeeper servers (comma-separated)
	Recharges  int       // top-ups the account service asks for
	FailFirst  int       // deliveries the account service answers 500 before it works
	Lost       int       // the recharge whose notifications never get through (its index)
	Out        io.Writer // the report
	Log        *slog.Logger
	KeepSchema bool
}

// Report is what a run saw and checked.
type Report struct {
	Recharges, ByNotification, ByReconcile int
	Requested, Credited                    int64
	Violations                             []string
}

// secret is shared by the two services (in production: from a secret store, per receiver).
const secret = "recharge-demo-secret"

// account is the account service: balances, the top-ups it asked for, and the notify.Inbox that
// credits each one once.
type account struct {
	pool  *pgxpool.Pool
	inbox *notify.Inbox
	mu    sync.Mutex
	fail  int    // deliveries still to answer 500
	lost  string // the order whose deliveries are lost on the way (answered 503)
}

func (a *account) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	fail := a.fail > 0
	if fail {
		a.fail--
	}
	a.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	var d notify.Delivery
	_ = json.Unmarshal(body, &d)
	switch {
	case d.Key == a.lost:
		http.Error(w, "lost on the way", http.StatusServiceUnavailable)
		return
	case fail:
		http.Error(w, "account service warming up", http.StatusInternalServerError)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	a.inbox.ServeHTTP(w, r)
}

// credit applies a recharge's result: the order is credited, once (the Inbox claims the
// notification's id in the same transaction).
func (a *account) credit(ctx context.Context, tx pgx.Tx, d notify.Delivery) error {
	var p struct {
		Account string `json:"account"`
		Amount  int64  `json:"amount"`
		Status  string `json:"status"`
	}
	if err := json.Unmarshal(d.Payload, &p); err != nil {
		return err
	}
	if p.Status != "succeeded" {
		_, err := tx.Exec(ctx, `update orders set status = 'failed' where id = $1`, d.Key)
		return err
	}
	tag, err := tx.Exec(ctx, `update orders set status = 'credited' where id = $1 and status = 'asked'`, d.Key)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("order %s is not waiting for a credit", d.Key)
	}
	_, err = tx.Exec(ctx, `update balances set amount = amount + $1 where account = $2`, p.Amount, p.Account)
	return err
}

// recharge is the recharge service: it tops accounts up and notifies the account service.
type recharge struct {
	pool *pgxpool.Pool
	n    *notify.Notifier
}

func (s *recharge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Order, Account string
		Amount         int64
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Amount <= 0 {
		http.Error(w, "bad recharge", http.StatusBadRequest)
		return
	}
	payload, _ := json.Marshal(map[string]any{"account": req.Account, "amount": req.Amount, "status": "succeeded"})
	// The top-up and its notification commit together: no result without its notification.
	err := pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(r.Context(), `insert into recharges values ($1, $2, $3)`, req.Order, req.Account, req.Amount); err != nil {
			return err
		}
		_, err := s.n.Enqueue(r.Context(), tx, notify.Notification{Receiver: "account", Key: req.Order, Payload: payload})
		return err
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// Run runs the example and checks it.
func Run(ctx context.Context, cfg Config) (Report, error) {
	var rep Report
	run := strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
	schemaA, schemaR := "rc_"+run+"_account", "rc_"+run+"_recharge"
	poolA, err := pool(ctx, cfg.PG, schemaA)
	if err != nil {
		return rep, err
	}
	defer poolA.Close()
	poolR, err := pool(ctx, cfg.PG, schemaR)
	if err != nil {
		return rep, err
	}
	defer poolR.Close()
	if !cfg.KeepSchema {
		defer func() {
			for _, s := range []string{schemaA, schemaR} {
				_, _ = poolA.Exec(context.WithoutCancel(ctx), "drop schema if exists "+s+" cascade")
			}
		}()
	}
	if _, err := poolA.Exec(ctx, `create table balances (account text primary key, amount bigint not null);
		create table orders (id text primary key, account text not null, amount bigint not null, status text not null)`); err != nil {
		return rep, err
	}
	if _, err := poolR.Exec(ctx, `create table recharges (id text primary key, account text not null, amount bigint not null)`); err != nil {
		return rep, err
	}

	// The account service.
	store, err := idempotency.New(idempotency.WithSchema(schemaA))
	if err != nil {
		return rep, err
	}
	if err := store.Migrate(ctx, poolA); err != nil {
		return rep, err
	}
	acc := &account{pool: poolA, fail: cfg.FailFirst, lost: orderID(cfg.Lost)}
	if acc.inbox, err = notify.NewInbox(poolA, store, []string{secret}, acc.credit, notify.WithInboxLogger(cfg.Log)); err != nil {
		return rep, err
	}
	accSrv := httptest.NewServer(acc)
	defer accSrv.Close()

	// The recharge service, delivering under a ZooKeeper election.
	sess, err := lock.NewSession(ctx, strings.Split(cfg.ZK, ","), lock.WithSessionTimeout(4*time.Second))
	if err != nil {
		return rep, fmt.Errorf("zookeeper at %s: %w", cfg.ZK, err)
	}
	defer sess.Close()
	el, err := lock.NewElector(sess, "/txkit/examples/recharge/"+run, "recharge-1")
	if err != nil {
		return rep, err
	}
	n, err := notify.New(poolR, []notify.Receiver{{Name: "account", URL: accSrv.URL, Secrets: []string{secret}, Echo: "success"}},
		notify.WithSchema(schemaR), notify.WithElector(el), notify.WithLogger(cfg.Log),
		notify.WithSchedule([]time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}, 0.1),
		notify.WithBreaker(100, time.Second))
	if err != nil {
		return rep, err
	}
	if err := n.Migrate(ctx); err != nil {
		return rep, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /recharges", &recharge{pool: poolR, n: n})
	mux.Handle("GET /notifications", n.QueryHandler())
	rcSrv := httptest.NewServer(mux)
	defer rcSrv.Close()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- n.Run(rctx) }()
	defer func() { stop(); <-done }()

	// The account service asks for the top-ups.
	fmt.Fprintf(cfg.Out, "account service asks the recharge service for %d top-ups; the first %d deliveries fail (500); %s's never get through (503)\n",
		cfg.Recharges, cfg.FailFirst, orderID(cfg.Lost))
	for i := range cfg.Recharges {
		acct, amount := fmt.Sprintf("acct-%d", i%4), int64(10*(i+1))
		rep.Requested += amount
		if _, err := poolA.Exec(ctx, `insert into balances values ($1, 0) on conflict do nothing;
			`, acct); err != nil {
			return rep, err
		}
		if _, err := poolA.Exec(ctx, `insert into orders values ($1, $2, $3, 'asked')`, orderID(i), acct, amount); err != nil {
			return rep, err
		}
		body, _ := json.Marshal(map[string]any{"order": orderID(i), "account": acct, "amount": amount})
		resp, err := http.Post(rcSrv.URL+"/recharges", "application/json", bytes.NewReader(body))
		if err != nil {
			return rep, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return rep, fmt.Errorf("recharge %s: HTTP %d", orderID(i), resp.StatusCode)
		}
	}
	rep.Recharges = cfg.Recharges

	// Wait until every notification is delivered, or failed (the lost one).
	deadline := time.Now().Add(60 * time.Second)
	for {
		var open int
		if err := poolR.QueryRow(ctx, `select count(*) from txkit_notify where status = 'pending'`).Scan(&open); err != nil {
			return rep, err
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			return rep, errors.New("notifications still pending after 60s")
		}
		time.Sleep(100 * time.Millisecond) // polling the example's progress
	}
	if err := poolA.QueryRow(ctx, `select count(*) from orders where status = 'credited'`).Scan(&rep.ByNotification); err != nil {
		return rep, err
	}
	fmt.Fprintf(cfg.Out, "notifications: %d delivered and credited, %d failed after the whole schedule\n", rep.ByNotification, len(mustFailed(ctx, n)))
	for _, id := range []int{0, cfg.Lost} {
		rec, err := n.ByKey(ctx, "account", orderID(id))
		if err != nil {
			return rep, err
		}
		as, err := n.Attempts(ctx, rec.ID)
		if err != nil {
			return rep, err
		}
		var codes []string
		for _, a := range as {
			codes = append(codes, fmt.Sprint(a.StatusCode))
		}
		fmt.Fprintf(cfg.Out, "  %s: %s after %d attempts (HTTP %s)\n", orderID(id), rec.Status, rec.Attempts, strings.Join(codes, ", "))
	}

	// Reconcile: the account service asks about the orders still waiting, through the query API.
	rows, err := poolA.Query(ctx, `select id from orders where status = 'asked' order by id`)
	if err != nil {
		return rep, err
	}
	waiting, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return rep, err
	}
	client := notify.Client{URL: rcSrv.URL + "/notifications", Receiver: "account", Secret: secret}
	if rep.ByReconcile, err = acc.inbox.Reconcile(ctx, client, waiting...); err != nil {
		return rep, err
	}
	again, err := acc.inbox.Reconcile(ctx, client, orderID(cfg.Lost))
	if err != nil {
		return rep, err
	}
	fmt.Fprintf(cfg.Out, "reconcile: %d orders still waiting %v; %d credited from the query API; reconciling again credits %d\n",
		len(waiting), waiting, rep.ByReconcile, again)

	// Checks.
	var unpaid, balance int64
	if err := poolA.QueryRow(ctx, `select (select count(*) from orders where status <> 'credited'), (select coalesce(sum(amount), 0) from balances)`).
		Scan(&unpaid, &balance); err != nil {
		return rep, err
	}
	var recharged int64
	if err := poolR.QueryRow(ctx, `select coalesce(sum(amount), 0) from recharges`).Scan(&recharged); err != nil {
		return rep, err
	}
	rep.Credited = balance
	check := func(ok bool, format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		if !ok {
			rep.Violations = append(rep.Violations, line)
			line = "FAIL " + line
		} else {
			line = "ok   " + line
		}
		fmt.Fprintln(cfg.Out, "  "+line)
	}
	check(unpaid == 0, "every order credited (%d not)", unpaid)
	check(balance == recharged && recharged == rep.Requested, "balances %d = recharged %d = asked %d (each credited once)", balance, recharged, rep.Requested)
	check(rep.ByNotification+rep.ByReconcile == cfg.Recharges, "%d by notification + %d by reconcile = %d recharges", rep.ByNotification, rep.ByReconcile, cfg.Recharges)
	check(again == 0, "a second reconcile credits nothing")
	return rep, nil
}

func mustFailed(ctx context.Context, n *notify.Notifier) []*notify.Record {
	rs, _ := n.ListFailed(ctx, 100)
	return rs
}

func orderID(i int) string { return fmt.Sprintf("order-%03d", i) }

// pool opens a pool on url whose connections use schema (created if missing).
func pool(ctx context.Context, url, schema string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := p.Exec(ctx, "create schema if not exists "+pgx.Identifier{schema}.Sanitize()); err != nil {
		p.Close()
		return nil, fmt.Errorf("PostgreSQL at %s: %w", url, err)
	}
	return p, nil
}
