// Command order is the tcc-order example's order service and TCC coordinator. POST /orders
// {"sku", "qty", "account", "amount"} runs one global transaction of three branches: the order
// service's own (an in-process participant behind its barrier: try inserts the order row
// pending, confirm marks it confirmed, cancel cancelled), then the stock and account services'
// tries in parallel over HTTP. All tries succeed → Commit (200 confirmed); any refusal or failure
// → Rollback (409 cancelled). Run several instances on one schema: each starts transactions, and
// the one elected in ZooKeeper recovers those another instance left unfinished (it crashed, a
// confirm failed, a try timed out).
//
//	go run ./examples/tcc-order/order -schema demo -id order-1 -stock http://127.0.0.1:8081 -account http://127.0.0.1:8082
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/examples/tcc-order/internal/app"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/tcc"
)

type config struct {
	listen, pg, db, schema, zk, id, election, stock, account, recovery string
	timeout, lease, callTimeout, sessionTimeout                        time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.listen, "listen", "127.0.0.1:0", "HTTP address")
	flag.StringVar(&c.pg, "pg", app.Env("TXKIT_PG_URL", app.DefaultPG), "PostgreSQL URL (its database is replaced by -db)")
	flag.StringVar(&c.db, "db", "txkit_order", "database of the order service and its coordinator log (created if missing)")
	flag.StringVar(&c.schema, "schema", "tcc_order", "schema of this run")
	flag.StringVar(&c.zk, "zk", app.Env("TXKIT_ZK", app.DefaultZK), "ZooKeeper servers")
	flag.StringVar(&c.id, "id", "order-"+uuid.NewString()[:8], "instance id (its id in the recovery election)")
	flag.StringVar(&c.election, "election", "", "ZooKeeper path of the recovery election (default /txkit-demo/<schema>/tcc)")
	flag.StringVar(&c.stock, "stock", "http://127.0.0.1:8081", "base URL of the stock service")
	flag.StringVar(&c.account, "account", "http://127.0.0.1:8082", "base URL of the account service")
	flag.DurationVar(&c.timeout, "timeout", 5*time.Second, "global timeout: a transaction still trying after it is cancelled by the leader")
	flag.DurationVar(&c.lease, "lease", 3*time.Second, "how long a starter owns a decided transaction before the leader may finish it")
	flag.DurationVar(&c.callTimeout, "call-timeout", 2*time.Second, "bound of each participant call")
	flag.DurationVar(&c.sessionTimeout, "session-timeout", 4*time.Second, "ZooKeeper session timeout (how long a dead leader keeps its leadership)")
	flag.StringVar(&c.recovery, "recovery", "@every 500ms", "cron spec of the leader's recovery pass")
	flag.Parse()
	log := app.Logger("order").With("id", c.id)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, log); err != nil {
		log.Error("order service failed", "err", err)
		os.Exit(1)
	}
}

// Order is the body of POST /orders and the payload of every branch's request.
type Order struct {
	SKU     string `json:"sku"`
	Qty     int64  `json:"qty"`
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

type service struct {
	c       config
	pool    *pgxpool.Pool
	log     *slog.Logger
	el      *lock.Elector
	tcc     *tcc.Coordinator
	self    participant.Participant // the order branch, registered in-process
	stock   participant.HTTP
	account participant.HTTP
}

func run(ctx context.Context, c config, log *slog.Logger) error {
	pool, err := app.Pool(ctx, c.pg, c.db, c.schema)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `
		create table if not exists orders (
			gid text primary key, sku text not null, qty bigint not null,
			account text not null, amount bigint not null, status text not null,
			created_at timestamptz not null default clock_timestamp(), updated_at timestamptz);
		create table if not exists order_ledger (
			gid text not null, branch text not null, op text not null, at timestamptz not null default clock_timestamp())`); err != nil {
		return fmt.Errorf("create order tables: %w", err)
	}
	sess, err := lock.NewSession(ctx, strings.Split(c.zk, ","), lock.WithSessionTimeout(c.sessionTimeout), lock.WithLogger(log))
	if err != nil {
		return err
	}
	defer sess.Close()
	election := c.election
	if election == "" {
		election = "/txkit-demo/" + c.schema + "/tcc"
	}
	el, err := lock.NewElector(sess, election, c.id)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: c.callTimeout + time.Second}
	coord, err := tcc.New(pool, tcc.WithSchema(c.schema), tcc.WithElector(el), tcc.WithLogger(log),
		tcc.WithDefaultTimeout(c.timeout), tcc.WithLease(c.lease), tcc.WithCallTimeout(c.callTimeout),
		tcc.WithBackoff(200*time.Millisecond, 2*time.Second), tcc.WithRecovery(c.recovery, 100, 16),
		tcc.WithHTTPClient(client))
	if err != nil {
		return err
	}
	if err := coord.Migrate(ctx); err != nil {
		return err
	}
	bar, err := participant.NewBarrier(participant.WithBarrierLogger(log))
	if err != nil {
		return err
	}
	if err := bar.Migrate(ctx, pool); err != nil {
		return err
	}
	// Every instance registers the order branch under the same name: the leader that recovers a
	// transaction calls it in its own process.
	self, err := coord.Register("order", bar.Participant(pool, orderBranch))
	if err != nil {
		return err
	}
	s := &service{c: c, pool: pool, log: log, el: el, tcc: coord, self: self,
		stock:   participant.HTTP{URL: strings.TrimSuffix(c.stock, "/") + "/try", Client: client},
		account: participant.HTTP{URL: strings.TrimSuffix(c.account, "/") + "/try", Client: client}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", s.place)
	mux.HandleFunc("GET /orders/{gid}", s.get)
	mux.HandleFunc("GET /stats", s.stats)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { app.WriteJSON(w, 200, map[string]string{"status": "ok"}) })
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return coord.Run(ctx) })
	g.Go(func() error { return bar.Run(ctx, pool) })
	g.Go(func() error { return app.Serve(ctx, c.listen, mux) })
	log.Info("order service running", "schema", c.schema, "election", election, "stock", c.stock, "account", c.account)
	return g.Wait()
}

// orderBranch is the order service's own branch: try records the order pending, confirm and
// cancel settle it. The barrier runs each at most once, in this transaction.
func orderBranch(ctx context.Context, tx pgx.Tx, req participant.Request) error {
	var o Order
	if err := json.Unmarshal(req.Payload, &o); err != nil {
		return fmt.Errorf("order payload: %w: %w", participant.ErrBadRequest, err)
	}
	var err error
	switch req.Op {
	case participant.OpTry:
		_, err = tx.Exec(ctx, `insert into orders (gid, sku, qty, account, amount, status) values ($1, $2, $3, $4, $5, 'pending')`,
			req.GID, o.SKU, o.Qty, o.Account, o.Amount)
	case participant.OpConfirm:
		_, err = tx.Exec(ctx, `update orders set status = 'confirmed', updated_at = clock_timestamp() where gid = $1`, req.GID)
	case participant.OpCancel:
		_, err = tx.Exec(ctx, `update orders set status = 'cancelled', updated_at = clock_timestamp() where gid = $1`, req.GID)
	default:
		return fmt.Errorf("order: op %s: %w", req.Op, participant.ErrBadRequest)
	}
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `insert into order_ledger (gid, branch, op) values ($1, $2, $3)`, req.GID, req.Branch, req.Op.String())
	return err
}

// place: POST /orders → 200 {"gid", "status": "confirmed"}, 409 {"gid", "status": "cancelled",
// "reason"}, 400 for a bad body, 500 when the outcome is not known to this instance (the
// transaction is then finished by the leader: cancelled at its timeout, or confirmed).
func (s *service) place(w http.ResponseWriter, r *http.Request) {
	var o Order
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&o); err != nil || o.SKU == "" || o.Account == "" || o.Qty <= 0 || o.Amount <= 0 {
		app.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"sku", "qty" > 0, "account", "amount" > 0}`})
		return
	}
	// The transaction outlives a client that hangs up: the branches are already on their way.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.c.timeout+s.c.callTimeout)
	defer cancel()
	g, err := s.tcc.Begin(ctx)
	if err != nil {
		app.WriteJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	gid := g.GID()
	body, _ := json.Marshal(o)
	stockBody, _ := json.Marshal(app.StockItem{SKU: o.SKU, Qty: o.Qty})
	fundsBody, _ := json.Marshal(app.Funds{Account: o.Account, Amount: o.Amount})

	err = g.Try(ctx, tcc.Branch{Name: "order", Participant: s.self, Payload: body})
	if err == nil {
		var wg sync.WaitGroup
		var serr, aerr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			serr = g.Try(ctx, tcc.Branch{Name: "stock", Participant: s.stock, Payload: stockBody})
		}()
		go func() {
			defer wg.Done()
			aerr = g.Try(ctx, tcc.Branch{Name: "account", Participant: s.account, Payload: fundsBody})
		}()
		wg.Wait()
		err = errors.Join(serr, aerr)
	}
	if err != nil {
		reason := "failed"
		if errors.Is(err, participant.ErrRefused) {
			reason = "refused"
		}
		rerr := g.Rollback(ctx)
		if rerr != nil && !errors.Is(rerr, tcc.ErrIncomplete) {
			s.log.Warn("rollback failed; the leader cancels at the timeout", "gid", gid, "err", rerr)
			app.WriteJSON(w, http.StatusInternalServerError, map[string]string{"gid": gid, "status": "unknown", "error": rerr.Error()})
			return
		}
		app.WriteJSON(w, http.StatusConflict, map[string]string{"gid": gid, "status": "cancelled", "reason": reason, "error": err.Error()})
		return
	}
	switch err := g.Commit(ctx); {
	case err == nil || errors.Is(err, tcc.ErrIncomplete):
		// Decided: confirms that failed are retried by the leader.
		app.WriteJSON(w, http.StatusOK, map[string]string{"gid": gid, "status": "confirmed"})
	case errors.Is(err, tcc.ErrInvalidState):
		// Cancelled by its timeout before the commit was recorded.
		app.WriteJSON(w, http.StatusConflict, map[string]string{"gid": gid, "status": "cancelled", "reason": "timeout", "error": err.Error()})
	default:
		app.WriteJSON(w, http.StatusInternalServerError, map[string]string{"gid": gid, "status": "unknown", "error": err.Error()})
	}
}

// get: GET /orders/{gid} → the order row and its global transaction's status.
func (s *service) get(w http.ResponseWriter, r *http.Request) {
	gid := r.PathValue("gid")
	var o Order
	var status string
	err := s.pool.QueryRow(r.Context(), `select sku, qty, account, amount, status from orders where gid = $1`, gid).
		Scan(&o.SKU, &o.Qty, &o.Account, &o.Amount, &status)
	if errors.Is(err, pgx.ErrNoRows) {
		app.WriteJSON(w, http.StatusNotFound, map[string]string{"gid": gid, "error": "no such order"})
		return
	}
	if err != nil {
		app.WriteJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	st, err := s.tcc.Status(r.Context(), gid)
	out := map[string]any{"gid": gid, "order": o, "status": status}
	if err == nil {
		out["transaction"] = st.String()
	}
	app.WriteJSON(w, http.StatusOK, out)
}

// stats: GET /stats → who leads the recovery election, and the coordinator's counters.
func (s *service) stats(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{"id": s.c.id, "tcc": s.tcc.Stats()}
	leader, err := s.el.Leader(r.Context())
	if err != nil && !errors.Is(err, lock.ErrNoLeader) {
		out["leader_error"] = err.Error()
	}
	out["leader"] = leader
	app.WriteJSON(w, http.StatusOK, out)
}
