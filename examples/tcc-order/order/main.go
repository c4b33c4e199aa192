// Command order is the tcc-order example's order service, and the coordinator of its orders —
// as TCC global transactions, sagas or workflows. POST /orders {"sku", "qty", "account", "amount"}
// places one order in the service's -mode, or in the request's "mode" ("tcc", "saga" or "workflow"):
//
//   - tcc (tcc.go): one global transaction of three branches: the order service's own (an
//     in-process participant behind its barrier: try inserts the order row pending, confirm
//     marks it confirmed, cancel cancelled), then the stock and account services' tries in
//     parallel over HTTP. All tries succeed → Commit (200 confirmed); any refusal or failure →
//     Rollback (409 cancelled).
//   - saga (saga.go): the order row is recorded, then one saga of two sequential steps: the stock
//     service deducts the stock, then the account service debits the money. Both succeed → 200
//     succeeded; a refusal (too little stock, insufficient funds) or the saga's timeout → the
//     steps that ran are compensated in reverse (409 compensated).
//   - workflow (workflow.go): the saga's steps written as a Go function (package workflow): a local
//     step records the order row, then the stock and account calls; each step's outcome is
//     recorded as it runs, and the leader replays the function of an instance that died (200
//     succeeded, 409 compensated).
//
// Run several instances on one schema: each places orders, and for each protocol the instance
// elected in ZooKeeper (one election per protocol) recovers what another instance left unfinished
// — it crashed, a call failed, a transaction or saga outlived its timeout.
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
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/tcc-order/app"
	"github.com/txkit/txkit/examples/tcc-order/shoppb"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
)

type config struct {
	listen, pg, db, schema, zk, lockKind, id, election, stock, account, recovery string
	grpcListen                                                                   string
	mode                                                                         app.Mode
	transport                                                                    app.Transport
	timeout, lease, callTimeout, sessionTimeout                                  time.Duration
}

func main() {
	c := config{mode: app.ModeTCC, transport: app.TransportHTTP}
	flag.StringVar(&c.listen, "listen", "127.0.0.1:0", "HTTP address")
	flag.StringVar(&c.pg, "pg", exapp.Env("TXKIT_PG_URL", app.DefaultPG), "PostgreSQL URL (its database is replaced by -db)")
	flag.StringVar(&c.db, "db", "txkit_order", "database of the order service and its coordinators' logs (created if missing)")
	flag.StringVar(&c.schema, "schema", "tcc_order", "schema of this run")
	flag.StringVar(&c.zk, "zk", exapp.Env("TXKIT_ZK", app.DefaultZK), "ZooKeeper servers")
	flag.StringVar(&c.lockKind, "lock", "zk", "lock backend of the recovery elections: zk (the -zk ensemble), pg (PostgreSQL lease rows in the database of TXKIT_PG_URL), redis (TXKIT_REDIS), redlock (TXKIT_REDLOCK) or redis-sentinel (TXKIT_REDIS_SENTINELS)")
	flag.StringVar(&c.id, "id", "order-"+uuid.NewString()[:8], "instance id (its id in the recovery elections)")
	flag.StringVar(&c.election, "election", "", "ZooKeeper path of the recovery elections, one per mode below it (default /txkit-demo/<schema>; with another -lock, the name txkit-demo/<schema>)")
	flag.Var(&c.mode, "mode", "how orders are placed when the request does not say: tcc, saga or workflow")
	flag.Var(&c.transport, "transport", "how stock and account are called: http (-stock and -account are base URLs) or grpc (they are gRPC targets, e.g. 127.0.0.1:9081 or dns:///stock.shop:9081; this service serves shop.v1.Orders on -grpc-listen too)")
	flag.StringVar(&c.grpcListen, "grpc-listen", "127.0.0.1:0", "gRPC address of the Orders service (with -transport grpc)")
	flag.StringVar(&c.stock, "stock", "http://127.0.0.1:8081", "the stock service: its base URL, or its gRPC target with -transport grpc")
	flag.StringVar(&c.account, "account", "http://127.0.0.1:8082", "the account service: its base URL, or its gRPC target with -transport grpc")
	flag.DurationVar(&c.timeout, "timeout", 5*time.Second, "global timeout: a transaction still trying (a saga still running) after it is cancelled (compensated)")
	flag.DurationVar(&c.lease, "lease", 3*time.Second, "how long a starter owns what it drives before the leader may finish it")
	flag.DurationVar(&c.callTimeout, "call-timeout", 2*time.Second, "bound of each participant call")
	flag.DurationVar(&c.sessionTimeout, "session-timeout", 4*time.Second, "ZooKeeper session timeout, or the lease TTL of the other -lock backends (how long a dead leader keeps its leadership)")
	flag.StringVar(&c.recovery, "recovery", "@every 500ms", "cron spec of the leaders' recovery passes")
	flag.Parse()
	log := exapp.Logger("order").With("id", c.id)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	secret, err := app.Secret()
	if err == nil {
		err = run(ctx, c, secret, log)
	}
	if err != nil {
		log.Error("order service failed", "err", err)
		os.Exit(1)
	}
}

// Order is the body of POST /orders, and the payload of the TCC order branch.
type Order struct {
	SKU     string   `json:"sku"`
	Qty     int64    `json:"qty"`
	Account string   `json:"account"`
	Amount  int64    `json:"amount"`
	Mode    app.Mode `json:"mode,omitzero"` // default: the service's -mode
}

// answer is the reply to POST /orders. It never carries an error's text, which names the
// services' addresses and may quote a driver: the error is logged with the answer's request id.
type answer struct {
	code      int
	GID       string   `json:"gid,omitempty"`
	Mode      app.Mode `json:"mode"`
	Status    string   `json:"status"`           // the outcome: confirmed, succeeded; cancelled, compensated; unknown
	Reason    string   `json:"reason,omitempty"` // why it was cancelled or compensated: refused, failed, timeout
	RequestID string   `json:"request_id,omitempty"`
}

// failed is the answer of an order whose outcome this instance does not know (500): the leader
// finishes it. err is logged with the answer's request id.
func (s *service) failed(gid string, err error) answer {
	id := exapp.LogError(s.log, "order outcome unknown; the leader finishes it", err, "gid", gid)
	return answer{code: http.StatusInternalServerError, GID: gid, Status: "unknown", RequestID: id}
}

// undone is the answer of an order rolled back (409): cancelled, or compensated. Its reason is
// "refused" when a participant refused, otherwise the caller's; err is logged with the answer's
// request id.
func (s *service) undone(gid, status string, err error, otherwise string) answer {
	reason := otherwise
	if errors.Is(err, participant.ErrRefused) {
		reason = "refused"
	}
	id := exapp.RequestID()
	s.log.Info("order "+status, "request_id", id, "gid", gid, "reason", reason, "err", err)
	return answer{code: http.StatusConflict, GID: gid, Status: status, Reason: reason, RequestID: id}
}

// flow is how the service places orders in one mode, with one coordinator.
type flow struct {
	el     lock.Elector                    // the mode's recovery election
	run    func(ctx context.Context) error // the coordinator's recovery: it works while el elects this instance
	place  func(ctx context.Context, o Order) answer
	status func(ctx context.Context, gid string) (fmt.Stringer, error)
	stats  func() any
}

type service struct {
	c       config
	pool    *pgxpool.Pool
	log     *slog.Logger
	client  *http.Client
	reg     prometheus.Registerer // the service's registry (exapp.Metrics), for every component's metrics
	flows   map[app.Mode]*flow
	stock   app.Resource
	account app.Resource
	// secret signs every participant call: HTTP through client, gRPC through grpccall.WithSecret.
	secret string
	// conns are, with -transport grpc, the connections to "stock" and "account".
	conns map[string]*grpc.ClientConn
}

func run(ctx context.Context, c config, secret string, log *slog.Logger) error {
	// One client signs every participant call: the orders this instance places and its recovery.
	client, err := participant.NewSigningClient(secret, &http.Client{Timeout: c.callTimeout + time.Second})
	if err != nil {
		return err
	}
	pool, err := exapp.Pool(ctx, c.pg, c.db, c.schema, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `
		create table if not exists orders (
			gid text primary key, mode text not null, sku text not null, qty bigint not null,
			account text not null, amount bigint not null, status text not null,
			created_at timestamptz not null default clock_timestamp(), updated_at timestamptz);
		create table if not exists order_ledger (
			gid text not null, branch text not null, op text not null, at timestamptz not null default clock_timestamp())`); err != nil {
		return fmt.Errorf("create order tables: %w", err)
	}
	mux := http.NewServeMux()
	reg := exapp.Metrics(mux)
	electors, closeElectors, err := c.electors(ctx, log, reg)
	if err != nil {
		return err
	}
	defer closeElectors()
	bar, err := barrier.New(pool, barrier.WithLogger(log), barrier.WithTelemetry(reg, nil))
	if err != nil {
		return err
	}
	if err := bar.Migrate(ctx); err != nil {
		return err
	}
	s := &service{c: c, secret: secret, pool: pool, log: log, client: client, reg: reg,
		flows: map[app.Mode]*flow{}, stock: app.Stock(), account: app.Account()}
	var grpcLn net.Listener
	if c.transport == app.TransportGRPC {
		closeConns, err := s.dial()
		if err != nil {
			return err
		}
		defer closeConns()
		if grpcLn, err = app.ListenGRPC(c.grpcListen); err != nil {
			return err
		}
		defer grpcLn.Close()
	}
	// Each coordinator recovers under an election of its own: their logs and fences are apart, so
	// the two leaders may be different instances.
	for _, m := range app.Modes() {
		el, err := electors(m.String())
		if err != nil {
			return err
		}
		var f *flow
		switch m {
		case app.ModeTCC:
			f, err = s.tccFlow(ctx, el, bar)
		case app.ModeSaga:
			f, err = s.sagaFlow(ctx, el)
		case app.ModeWorkflow:
			f, err = s.workflowFlow(ctx, el)
		}
		if err != nil {
			return err
		}
		s.flows[m] = f
	}
	mux.HandleFunc("POST /orders", s.place)
	mux.HandleFunc("GET /orders/{gid}", s.get)
	mux.HandleFunc("GET /stats", s.stats)
	health := map[string]string{"status": "ok"}
	if grpcLn != nil {
		health["grpc"] = grpcLn.Addr().String()
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		exapp.WriteJSON(w, 200, health)
	})
	g, ctx := errgroup.WithContext(ctx)
	for _, f := range s.flows {
		g.Go(func() error { return f.run(ctx) })
	}
	g.Go(func() error { return bar.Run(ctx) })
	g.Go(func() error { return exapp.Serve(ctx, c.listen, mux) })
	if grpcLn != nil {
		srv := grpc.NewServer()
		shoppb.RegisterOrdersServer(srv, ordersServer{s: s})
		g.Go(func() error { return app.ServeGRPC(ctx, grpcLn, srv) })
	}
	log.Info("order service running", "schema", c.schema, "lock", c.lockKind, "election", c.electionName(), "mode", c.mode.String(),
		"transport", c.transport.String(), "stock", c.stock, "account", c.account)
	return g.Wait()
}

// coordinatorOptions are one coordinator package's option constructors: tcc and saga name them
// alike, each with its own Option type. build gives both coordinators the same settings.
type coordinatorOptions[O any] struct {
	schema         func(string) O
	elector        func(lock.Elector) O
	logger         func(*slog.Logger) O
	timeout, lease func(time.Duration) O
	retry          func(callTimeout, base, maxDelay time.Duration) O
	recovery       func(spec string, batch, concurrency int) O
	client         func(*http.Client) O
	telemetry      func(prometheus.Registerer, trace.TracerProvider) O
}

// optionsOf returns package coordinator's option constructors, which tcc, saga and workflow share.
func optionsOf() coordinatorOptions[coordinator.Option] {
	return coordinatorOptions[coordinator.Option]{
		schema: coordinator.WithSchema, elector: coordinator.WithElector, logger: coordinator.WithLogger, timeout: coordinator.WithDefaultTimeout,
		lease: coordinator.WithLease, retry: coordinator.WithRetry, recovery: coordinator.WithRecovery,
		client: coordinator.WithHTTPClient, telemetry: coordinator.WithTelemetry}
}

func (b coordinatorOptions[O]) build(s *service, el lock.Elector) []O {
	c := s.c
	return []O{b.schema(c.schema), b.elector(el), b.logger(s.log), b.timeout(c.timeout), b.lease(c.lease),
		b.retry(c.callTimeout, 200*time.Millisecond, 2*time.Second), b.recovery(c.recovery, 100, 16), b.client(s.client), b.telemetry(s.reg, nil)}
}

// newCoordinator creates a coordinator of package newC with opts built for this service, and
// migrates its log.
func newCoordinator[C interface{ Migrate(context.Context) error }, O any](ctx context.Context, s *service, el lock.Elector,
	newC func(*pgxpool.Pool, ...O) (C, error), opts coordinatorOptions[O]) (C, error) {
	c, err := newC(s.pool, opts.build(s, el)...)
	if err == nil {
		err = c.Migrate(ctx)
	}
	return c, err
}

// flushed returns c's Run followed, once it returns, by c's Flush: the finishes the coordinator
// wrote in the background (deferred finish, the default) land before the process exits.
func flushed(c interface {
	Run(context.Context) error
	Flush(context.Context) error
}) func(context.Context) error {
	return func(ctx context.Context) error {
		err := c.Run(ctx)
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return errors.Join(err, c.Flush(fctx))
	}
}

// endpoint returns the participant at base's endpoint of mode m (the stock and account services
// serve /tcc and /saga; a workflow's calls are saga ops: action, and compensate on rollback).
func (s *service) endpoint(base string, m app.Mode) participant.HTTP {
	path := m.String()
	if m == app.ModeWorkflow {
		path = app.ModeSaga.String()
	}
	return participant.HTTP{URL: strings.TrimSuffix(base, "/") + "/" + path} // called with the coordinator's client
}

// participants returns stock and account as participants of coord's branches in mode m: their
// HTTP endpoints, or with -transport grpc their gRPC methods registered with coord (grpc.go).
func (s *service) participants(coord registrar, m app.Mode) (stock, account participant.Participant, err error) {
	if s.c.transport == app.TransportGRPC {
		return s.grpcParticipants(coord)
	}
	return s.endpoint(s.c.stock, m), s.endpoint(s.c.account, m), nil
}

// payloads returns the payloads of order o's stock and account branches: the participant wire
// protocol's JSON, or with -transport grpc the shoppb messages (grpc.go).
func (s *service) payloads(o Order) (stock, account json.RawMessage, err error) {
	if s.c.transport == app.TransportGRPC {
		return grpcPayloads(o)
	}
	return s.stock.Payload(o.SKU, o.Qty), s.account.Payload(o.Account, o.Amount), nil
}

// execer is a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// insertOrder inserts an order row.
const insertOrder = `insert into orders (gid, mode, sku, qty, account, amount, status) values ($1, $2, $3, $4, $5, $6, $7)`

// record inserts the order row of gid.
func record(ctx context.Context, db execer, gid string, o Order, m app.Mode, status string) error {
	_, err := db.Exec(ctx, insertOrder, gid, m.String(), o.SKU, o.Qty, o.Account, o.Amount, status)
	return err
}

// recordOnce is record that does nothing when gid's row is there already (a workflow's step run
// again after a crash).
func recordOnce(ctx context.Context, db execer, gid string, o Order, m app.Mode, status string) error {
	_, err := db.Exec(ctx, insertOrder+` on conflict (gid) do nothing`, gid, m.String(), o.SKU, o.Qty, o.Account, o.Amount, status)
	return err
}

// check validates o and gives it the service's mode when it has none.
func (s *service) check(o *Order) error {
	if o.SKU == "" || o.Account == "" || o.Qty <= 0 || o.Amount <= 0 {
		return errors.New(`want {"sku", "qty" > 0, "account", "amount" > 0, "mode": "tcc" | "saga" | "workflow" (optional)}`)
	}
	if o.Mode == 0 {
		o.Mode = s.c.mode
	}
	return nil
}

// placeWithin places o (checked) under the order's own deadline: the order outlives a client that
// hangs up, as its calls are already on their way.
func (s *service) placeWithin(ctx context.Context, o Order) answer {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.c.timeout+s.c.callTimeout)
	defer cancel()
	a := s.flows[o.Mode].place(ctx, o)
	a.Mode = o.Mode
	return a
}

// place: POST /orders → 200 {"gid", "mode", "status": "confirmed" | "succeeded"}, 409 {"gid",
// "mode", "status": "cancelled" | "compensated", "reason", "request_id"}, 400 for a bad body,
// 500 {"gid", "mode", "status": "unknown", "request_id"} when the outcome is not known to this
// instance (the leader finishes the order: a transaction is cancelled at its timeout or
// confirmed; a saga carried forward or compensated). The error behind a 409 or 500 is logged
// with its request id.
func (s *service) place(w http.ResponseWriter, r *http.Request) {
	var o Order
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&o)
	if err == nil {
		err = s.check(&o)
	}
	if err != nil {
		exapp.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"sku", "qty" > 0, "account", "amount" > 0, "mode": "tcc" | "saga" | "workflow" (optional)}`})
		return
	}
	a := s.placeWithin(r.Context(), o)
	exapp.WriteJSON(w, a.code, a)
}

// get: GET /orders/{gid} → the order row and its transaction's (saga's) status.
func (s *service) get(w http.ResponseWriter, r *http.Request) {
	gid := r.PathValue("gid")
	var o Order
	var mode, status string
	err := s.pool.QueryRow(r.Context(), `select mode, sku, qty, account, amount, status from orders where gid = $1`, gid).
		Scan(&mode, &o.SKU, &o.Qty, &o.Account, &o.Amount, &status)
	if errors.Is(err, pgx.ErrNoRows) {
		exapp.WriteJSON(w, http.StatusNotFound, map[string]string{"gid": gid, "error": "no such order"})
		return
	}
	if err == nil {
		err = o.Mode.Set(mode)
	}
	if err != nil {
		exapp.Fail(w, s.log, http.StatusInternalServerError, "reading the order failed", err, "gid", gid)
		return
	}
	out := map[string]any{"gid": gid, "order": o, "status": status}
	if st, err := s.flows[o.Mode].status(r.Context(), gid); err == nil {
		out["transaction"] = st.String()
	}
	exapp.WriteJSON(w, http.StatusOK, out)
}

// stats: GET /stats → per mode, who leads its recovery election and the coordinator's counters.
func (s *service) stats(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{"id": s.c.id}
	for m, f := range s.flows {
		st := map[string]any{"coordinator": f.stats()}
		leader, err := f.el.Leader(r.Context())
		if err != nil && !errors.Is(err, lock.ErrNoLeader) {
			st["leader_error"] = "unknown (request id " + exapp.LogError(s.log, "reading the leader failed", err, "mode", m.String()) + ")"
		}
		st["leader"] = leader
		out[m.String()] = st
	}
	exapp.WriteJSON(w, http.StatusOK, out)
}

// electionName is the -election flag, or its default: a ZooKeeper path for zk, a lock name for
// the other backends.
func (c config) electionName() string {
	switch {
	case c.election != "":
		return c.election
	case c.lockKind == "zk":
		return "/txkit-demo/" + c.schema
	}
	return "txkit-demo/" + c.schema
}

// electors returns how this instance makes the candidate of each mode's recovery election, on the
// -lock backend, and what closes that backend's connections.
func (c config) electors(ctx context.Context, log *slog.Logger, reg prometheus.Registerer) (func(mode string) (lock.Elector, error), func(), error) {
	if c.lockKind == "zk" {
		auth, err := exapp.ZKAuth() // TXKIT_ZK_AUTH
		if err != nil {
			return nil, nil, err
		}
		sess, err := zklock.NewSession(ctx, strings.Split(c.zk, ","), zklock.WithSessionTimeout(c.sessionTimeout), zklock.WithLogger(log), auth)
		if err != nil {
			return nil, nil, err
		}
		return func(mode string) (lock.Elector, error) {
			return zklock.NewElector(sess, c.electionName()+"/"+mode, c.id, lock.WithElectionRegisterer(reg))
		}, func() { _ = sess.Close() }, nil
	}
	locks, err := exapp.OpenLocks(ctx, c.lockKind, log, exapp.WithLockTTL(c.sessionTimeout), exapp.WithLocksRegisterer(reg))
	if err != nil {
		return nil, nil, err
	}
	return func(mode string) (lock.Elector, error) {
		return locks.Elector(c.electionName()+"/"+mode, c.id)
	}, func() { _ = locks.Close() }, nil
}
