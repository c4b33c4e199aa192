// Command recharge is the recharge example's recharge service. POST /recharges {"order",
// "account", "amount"} records the recharge and, in the same PostgreSQL transaction, a
// notify.Notification to the account service (receiver "account", key the order) whose payload is
// the result {"account", "amount", "status": "succeeded"}: there is a notification if and only if
// the recharge was committed. The notifier delivers it — signed, retried on the schedule — on the
// instance elected in ZooKeeper (several instances may run on one schema). GET /notifications is
// the notifier's query API, where the account service asks for results it never got;
// GET /notifications/{order}/attempts shows a notification's attempts (for operators and the demo).
//
// Faults, for demos: -drop and -drop-rate lose the deliveries of some orders on the way (each of
// their attempts fails as if the network had eaten it; the notification is still recorded, so
// the query API knows it); -slow-first and -slow hold the first deliveries back, past
// -call-timeout when -slow is longer.
//
// The HMAC key shared with the account service comes from $TXKIT_RECHARGE_SECRET, or from the file
// -secret-file names (at least 16 bytes; there is no default: without it the service exits).
// Plain http:// to the account service is allowed on the loopback interface only.
//
//	TXKIT_RECHARGE_SECRET=$(openssl rand -hex 16) go run ./examples/recharge/recharge -account http://127.0.0.1:8081/notify -schema demo
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
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
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/notify"
)

type config struct {
	listen, pg, schema, zk, id, election, account, secret, schedule, tick, drop string
	callTimeout, slow, sessionTimeout, breakerCooldown                          time.Duration
	dropRate                                                                    float64
	slowFirst, breakerFailures, concurrency                                     int
}

func main() {
	var c config
	flag.StringVar(&c.listen, "listen", "127.0.0.1:0", "HTTP address")
	flag.StringVar(&c.pg, "pg", exapp.Env("TXKIT_PG_URL", app.DefaultPG), "PostgreSQL URL (its database is replaced by "+app.RechargeDB+", created if missing)")
	flag.StringVar(&c.schema, "schema", "recharge", "schema of the recharges and the notifications")
	flag.StringVar(&c.zk, "zk", exapp.Env("TXKIT_ZK", app.DefaultZK), "ZooKeeper servers")
	flag.StringVar(&c.id, "id", "recharge-"+uuid.NewString()[:8], "instance id (its id in the delivery election)")
	flag.StringVar(&c.election, "election", "", "ZooKeeper path of the delivery election (default /txkit-demo/<schema>/notify)")
	flag.StringVar(&c.account, "account", "", "the account service's notification URL (required), e.g. http://127.0.0.1:8081/notify")
	flag.StringVar(&c.schedule, "schedule", "", "delays between attempts, comma-separated (default notify.DefaultSchedule: 15s, 15s, 30s, 3m, ... about a day)")
	flag.StringVar(&c.tick, "tick", "@every 1s", "cron spec on which the leader looks for due notifications")
	flag.DurationVar(&c.callTimeout, "call-timeout", 10*time.Second, "bound of each delivery's HTTP call")
	flag.IntVar(&c.concurrency, "concurrency", 4, "deliveries to the account service in flight at once")
	flag.IntVar(&c.breakerFailures, "breaker-failures", 5, "consecutive failed deliveries that open the circuit breaker")
	flag.DurationVar(&c.breakerCooldown, "breaker-cooldown", time.Minute, "how long an open breaker holds deliveries back")
	flag.DurationVar(&c.sessionTimeout, "session-timeout", 4*time.Second, "ZooKeeper session timeout")
	flag.StringVar(&c.drop, "drop", "", "orders whose deliveries are lost on the way, comma-separated (demo fault)")
	flag.Float64Var(&c.dropRate, "drop-rate", 0, "fraction of the orders whose deliveries are lost on the way, chosen by a hash of the order (demo fault)")
	flag.IntVar(&c.slowFirst, "slow-first", 0, "deliveries held back by -slow before they are sent, the first ones (demo fault)")
	flag.DurationVar(&c.slow, "slow", 0, "how long -slow-first holds a delivery back; longer than -call-timeout, it fails")
	secretFile := flag.String("secret-file", "", "file holding the HMAC key shared with the other service (default: $"+app.SecretEnv+")")
	flag.Parse()
	log := exapp.Logger("recharge").With("id", c.id)
	var err error
	if c.secret, err = app.Secret(*secretFile); err != nil {
		fmt.Fprintln(os.Stderr, "recharge:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, log); err != nil {
		log.Error("recharge service failed", "err", err)
		os.Exit(1)
	}
}

type service struct {
	pool *pgxpool.Pool
	n    *notify.Notifier
	el   lock.Elector
	id   string
	log  *slog.Logger
}

func run(ctx context.Context, c config, log *slog.Logger) error {
	if c.account == "" {
		return errors.New("-account is required (the account service's notification URL)")
	}
	schedule := notify.DefaultSchedule()
	if c.schedule != "" {
		var err error
		if schedule, err = parseDurations(c.schedule); err != nil {
			return fmt.Errorf("-schedule: %w", err)
		}
	}
	if c.dropRate < 0 || c.dropRate > 1 || c.slowFirst < 0 || c.slow < 0 {
		return fmt.Errorf("-drop-rate %v (want 0..1), -slow-first %d, -slow %v", c.dropRate, c.slowFirst, c.slow)
	}
	pool, err := exapp.Pool(ctx, c.pg, app.RechargeDB, c.schema, 16)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `create table if not exists recharges (
		order_id text primary key, account text not null, amount bigint not null check (amount > 0),
		at timestamptz not null default now())`); err != nil {
		return fmt.Errorf("create table recharges: %w", err)
	}
	mux := http.NewServeMux()
	reg := exapp.Metrics(mux)
	auth, err := exapp.ZKAuth() // TXKIT_ZK_AUTH
	if err != nil {
		return err
	}
	sess, err := zklock.NewSession(ctx, strings.Split(c.zk, ","), zklock.WithSessionTimeout(c.sessionTimeout), zklock.WithLogger(log), auth)
	if err != nil {
		return err
	}
	defer sess.Close()
	election := c.election
	if election == "" {
		election = "/txkit-demo/" + c.schema + "/notify"
	}
	el, err := zklock.NewElector(sess, election, c.id, lock.WithElectionRegisterer(reg))
	if err != nil {
		return err
	}
	f := &faults{next: http.DefaultTransport, drop: map[string]bool{}, dropRate: c.dropRate, slowFirst: int64(c.slowFirst), slow: c.slow, log: log}
	for _, o := range strings.Split(c.drop, ",") {
		if o = strings.TrimSpace(o); o != "" {
			f.drop[o] = true
		}
	}
	opts := []notify.Option{notify.WithElector(el), notify.WithLogger(log), notify.WithTable(c.schema, ""),
		notify.WithSchedule(schedule, 0.1), notify.WithTick(c.tick, 100),
		notify.WithBreaker(c.breakerFailures, c.breakerCooldown), notify.WithTelemetry(reg, nil),
		// No redirects: a signed delivery goes to the account service only.
		notify.WithHTTPClient(&http.Client{Transport: f, Timeout: c.callTimeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }})}
	if app.PlainHTTP(c.account) {
		opts = append(opts, notify.WithPlainHTTP()) // loopback only; anywhere else https://
	}
	n, err := notify.New(pool, []notify.Receiver{{Name: app.Receiver, URL: c.account, Secrets: []string{c.secret},
		Echo: "success", Concurrency: c.concurrency}}, opts...)
	if err != nil {
		return err
	}
	if err := n.Migrate(ctx); err != nil {
		return err
	}
	s := &service{pool: pool, n: n, el: el, id: c.id, log: log}
	mux.HandleFunc("POST /recharges", s.recharge)
	mux.HandleFunc("GET /recharges", s.totals)
	mux.Handle("GET /notifications", n.QueryHandler())
	mux.HandleFunc("GET /notifications/{order}/attempts", s.attempts)
	mux.HandleFunc("GET /healthz", s.health)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return n.Run(ctx) })
	g.Go(func() error { return exapp.Serve(ctx, c.listen, mux) })
	log.Info("recharge service running", "schema", c.schema, "election", election, "account", c.account,
		"schedule", c.schedule, "drop", c.drop, "drop_rate", c.dropRate, "slow_first", c.slowFirst, "slow", c.slow)
	err = g.Wait()
	fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = n.Flush(fctx) // the records of the last answers' first attempts, before the pool closes
	return err
}

// recharge: POST /recharges → 200 recharged (also when the order was recharged before: the
// request is idempotent per order); 400 for a bad body; 409 when the order was recharged before
// with another account or amount.
func (s *service) recharge(w http.ResponseWriter, r *http.Request) {
	var req app.Recharge
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil ||
		req.Order == "" || req.Account == "" || req.Amount <= 0 {
		exapp.WriteJSON(w, http.StatusBadRequest, app.Answer{Order: req.Order, Status: "rejected", Error: `want {"order", "account", "amount" > 0}`})
		return
	}
	payload, err := json.Marshal(app.Result{Account: req.Account, Amount: req.Amount, Status: "succeeded"})
	if err != nil {
		exapp.Fail(w, s.log, http.StatusInternalServerError, "recharge failed", err, "order", req.Order)
		return
	}
	var id uuid.UUID
	errConflict := errors.New("recharged before with another account or amount")
	// The recharge and its notification commit together, or neither does; once they have, Do
	// makes the first attempt at once, from this process, before it returns (at most the call
	// timeout); what it does not finish (a failure, this process dying) the leader does.
	err = s.n.Do(r.Context(), func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `insert into recharges (order_id, account, amount) values ($1, $2, $3) on conflict do nothing`,
			req.Order, req.Account, req.Amount)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 { // recharged before: the same request again, or a conflicting one
			var account string
			var amount int64
			if err := tx.QueryRow(ctx, `select account, amount from recharges where order_id = $1`, req.Order).Scan(&account, &amount); err != nil {
				return err
			}
			if account != req.Account || amount != req.Amount {
				return errConflict
			}
		}
		id, err = s.n.Enqueue(ctx, tx, notify.Notification{Receiver: app.Receiver, Key: req.Order, Payload: payload})
		return err
	})
	switch {
	case errors.Is(err, errConflict):
		exapp.WriteJSON(w, http.StatusConflict, app.Answer{Order: req.Order, Status: "rejected", Error: errConflict.Error()})
	case err != nil:
		exapp.Fail(w, s.log, http.StatusInternalServerError, "recharge failed", err, "order", req.Order)
	default:
		exapp.WriteJSON(w, http.StatusOK, app.Answer{Order: req.Order, Status: "recharged", Notification: id.String()})
	}
}

// totals: GET /recharges → how many recharges were recorded and their sum.
func (s *service) totals(w http.ResponseWriter, r *http.Request) {
	var t app.Totals
	if err := s.pool.QueryRow(r.Context(), `select count(*), coalesce(sum(amount), 0) from recharges`).Scan(&t.Count, &t.Amount); err != nil {
		exapp.Fail(w, s.log, http.StatusInternalServerError, "reading the totals failed", err)
		return
	}
	exapp.WriteJSON(w, http.StatusOK, t)
}

// attempts: GET /notifications/{order}/attempts → the notification of the order and every
// attempt to deliver it; 404 when there is none.
func (s *service) attempts(w http.ResponseWriter, r *http.Request) {
	order := r.PathValue("order")
	rec, err := s.n.ByKey(r.Context(), app.Receiver, order)
	if errors.Is(err, notify.ErrNotFound) {
		exapp.WriteJSON(w, http.StatusNotFound, map[string]string{"error": "no notification for order " + order})
		return
	}
	var as []notify.Attempt
	if err == nil {
		as, err = s.n.Attempts(r.Context(), rec.ID)
	}
	if err != nil {
		exapp.Fail(w, s.log, http.StatusInternalServerError, "reading the attempts failed", err, "order", order)
		return
	}
	out := app.Delivery{Order: order, ID: rec.ID.String(), Status: rec.Status.String(), Attempts: []app.Attempt{}}
	for _, a := range as {
		out.Attempts = append(out.Attempts, app.Attempt{N: a.N, StatusCode: a.StatusCode,
			LatencyMS: float64(a.Latency) / float64(time.Millisecond), Error: a.Error})
	}
	exapp.WriteJSON(w, http.StatusOK, out)
}

// health: GET /healthz → this instance's id, who leads the delivery election, and the notifier's
// counters.
func (s *service) health(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{"id": s.id, "stats": s.n.Stats()}
	leader, err := s.el.Leader(r.Context())
	if err != nil && !errors.Is(err, lock.ErrNoLeader) {
		out["leader_error"] = "leader unknown (request id " + exapp.LogError(s.log, "reading the leader failed", err) + ")"
	}
	out["leader"] = leader
	exapp.WriteJSON(w, http.StatusOK, out)
}

// errLost is the failure of a delivery that -drop or -drop-rate loses on the way.
var errLost = errors.New("lost on the way (-drop)")

// faults is the network between the notifier and the account service, made unreliable on demand:
// deliveries of the orders to drop fail without reaching it, every time (so the notification
// fails after its schedule, and only reconciliation gets its result across); the first slowFirst
// deliveries are held back by slow first. Safe for concurrent use.
type faults struct {
	next      http.RoundTripper
	drop      map[string]bool
	dropRate  float64
	slowFirst int64
	slow      time.Duration
	sent      atomic.Int64
	log       *slog.Logger
}

func (f *faults) RoundTrip(req *http.Request) (*http.Response, error) {
	if key := deliveryKey(req); key != "" && f.lost(key) {
		f.log.Info("delivery lost on the way", "key", key)
		return nil, errLost
	}
	if f.slowFirst > 0 && f.sent.Add(1) <= f.slowFirst {
		f.log.Info("delivery held back", "for", f.slow)
		t := time.NewTimer(f.slow)
		defer t.Stop()
		select {
		case <-req.Context().Done():
			return nil, req.Context().Err()
		case <-t.C:
		}
	}
	return f.next.RoundTrip(req)
}

// lost says whether key's deliveries are lost: named by -drop, or among the -drop-rate fraction
// (by a hash of the key, so that every attempt of one notification shares its fate).
func (f *faults) lost(key string) bool {
	if f.drop[key] {
		return true
	}
	if f.dropRate <= 0 {
		return false
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return float64(h.Sum32()%10000) < f.dropRate*10000
}

// deliveryKey reads the business key from a delivery's body (a copy of it), or "".
func deliveryKey(req *http.Request) string {
	if req.GetBody == nil {
		return ""
	}
	body, err := req.GetBody()
	if err != nil {
		return ""
	}
	defer body.Close()
	var d notify.Delivery
	if b, err := io.ReadAll(body); err != nil || json.Unmarshal(b, &d) != nil {
		return ""
	}
	return d.Key
}

func parseDurations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, p := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(p))
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}
