// Command embed is the smallest service that embeds txkit, written to be read: one main that
// wires a ZooKeeper session and two electors, a transactional outbox relayed to RocketMQ, an
// idempotent consumer, and a saga whose step is an HTTP participant behind a signed barrier. It
// imports only txkit's public packages (not even the other examples' examples/exapp), so it can be
// copied into a module of your own; docs/embed.md walks through it. run reads as the recipe: each
// step a function of its own.
//
// It registers one user (a row and an outbox message in one transaction), waits until the
// consumer has applied the message, then submits two sagas: one the participant accepts, one it
// refuses (compensated). It prints what happened and exits 0, or 1 when something did not.
//
//	make up && set -a && . .txkit/env && set +a
//	go run ./examples/embed
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
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/rocketmq"
	"github.com/txkit/txkit/saga"
)

// config is what the service needs to know: where the servers are and which names are its own.
type config struct {
	PG       string   // PostgreSQL URL
	ZK       []string // ZooKeeper servers
	ZKUser   string   // ZooKeeper digest user: the nodes the session creates are this user's only
	ZKPass   string   // its password
	Namesrv  []string // RocketMQ name servers
	Broker   string   // RocketMQ broker (to create the topic)
	Schema   string   // PostgreSQL schema of every table below
	Topic    string   // RocketMQ topic of the "user registered" messages
	Election string   // ZooKeeper path under which the electors campaign
}

// result is what run saw happen.
type result struct {
	User        string        // the registered user's id
	Delivered   time.Duration // commit of the registration → the consumer's transaction committed
	Accepted    error         // Submit's result for the saga the participant accepts (nil)
	Refused     error         // Submit's result for the saga it refuses (wraps participant.ErrRefused)
	Credits     int           // credit rows in the wallet: 1, the accepted saga's
	Compensated int           // compensations that reached the wallet's code: 0, see below
}

func main() {
	env := func(name, def string) string {
		if v := os.Getenv(name); v != "" {
			return v
		}
		return def
	}
	var c config
	var zk, ns string
	flag.StringVar(&c.PG, "pg", env("TXKIT_PG_URL", "postgres://postgres@127.0.0.1:55432/txkit_test?sslmode=disable"), "PostgreSQL URL")
	flag.StringVar(&zk, "zk", env("TXKIT_ZK", "127.0.0.1:22181,127.0.0.1:22182,127.0.0.1:22183"), "ZooKeeper servers")
	flag.StringVar(&ns, "namesrv", env("TXKIT_ROCKETMQ_NAMESRV", "127.0.0.1:19876"), "RocketMQ name servers")
	flag.StringVar(&c.Broker, "broker", env("TXKIT_ROCKETMQ_BROKER", "127.0.0.1:20911"), "RocketMQ broker (topic creation)")
	flag.StringVar(&c.Schema, "schema", "embed", "PostgreSQL schema of every table")
	flag.StringVar(&c.Topic, "topic", "txkit-embed", "RocketMQ topic")
	flag.StringVar(&c.Election, "election", "/txkit-embed", "ZooKeeper path of the elections")
	flag.Parse()
	c.ZK, c.Namesrv = strings.Split(zk, ","), strings.Split(ns, ",")
	// The password from the environment, not a flag: the process list shows every flag.
	c.ZKUser, c.ZKPass, _ = strings.Cut(os.Getenv("TXKIT_ZK_AUTH"), ":") // "user:password" (deploy/local/env)

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// rocketmq-client-go logs and recovers panics through process-wide hooks: only main sets them.
	rocketmq.SetClientLogger(log, slog.LevelWarn)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := run(ctx, c, log)
	if err != nil {
		log.Error("embed failed", "err", err)
		os.Exit(1)
	}
	fmt.Printf("user %s registered; its message reached the consumer %v after the commit\n", res.User, res.Delivered.Round(time.Millisecond))
	fmt.Printf("saga accepted: %v\nsaga refused: %v\n", res.Accepted, res.Refused)
	fmt.Printf("wallet: %d credit, %d compensation run by its code (the refused step's was an empty rollback)\n", res.Credits, res.Compensated)
}

// run wires every component, runs them while it registers a user and submits two sagas, then
// stops them and returns what it saw. It returns when that is done or ctx ends. Each step is a
// function below, in the order a service of your own would take them.
func run(ctx context.Context, c config, log *slog.Logger) (result, error) {
	s := &service{cfg: c, log: log}
	defer s.close()                        // what the steps opened, in reverse
	if err := s.connect(ctx); err != nil { // PostgreSQL, the topic, the key the coordinator signs with
		return result{}, err
	}
	if err := s.campaign(ctx); err != nil { // 1. leadership: one ZooKeeper session, an elector per job
		return result{}, err
	}
	if err := s.build(ctx); err != nil { // 2. the components and their tables
		return result{}, err
	}
	if err := s.buildMessaging(ctx); err != nil { // 3. outbox → relay → RocketMQ → idempotent consumer
		return result{}, err
	}
	if err := s.buildWallet(); err != nil { // 4. the saga's participant behind the signed barrier
		return result{}, err
	}
	return s.runUntilDone(ctx) // 5. run everything while the work is done; then stop and wait
}

// service is what run wires, one field a component.
type service struct {
	cfg     config
	log     *slog.Logger
	group   string       // the consumer group
	secret  string       // the key the coordinator signs with and the barrier verifies
	signing *http.Client // the coordinator's client: it signs every call

	pool                      *pgxpool.Pool
	sess                      *zklock.Session
	relayElector, sagaElector *lock.Election
	ob                        *outbox.Outbox
	store                     *idempotency.Store
	bar                       *barrier.Barrier
	sagas                     *saga.Coordinator
	pub                       *rocketmq.Publisher
	relay                     *outbox.Relay
	consumer                  *rocketmq.Consumer
	ln                        net.Listener // the wallet's address
	srv                       *http.Server // the wallet

	welcomes, credits, compensations string // this service's own tables, quoted
}

// connect opens the PostgreSQL pool, makes sure the topic exists and makes the signing key and
// client.
func (s *service) connect(ctx context.Context) error {
	var err error
	if s.pool, err = pgxpool.New(ctx, s.cfg.PG); err != nil {
		return err
	}
	s.group = "embed-" + s.cfg.Schema
	// A consumer cannot start on a missing topic; its group's retry topic too, or the client warns.
	if err := rocketmq.EnsureTopic(ctx, s.cfg.Namesrv, s.cfg.Broker, s.cfg.Topic, rocketmq.WithRetryTopicsFor(s.group)); err != nil {
		return err
	}
	// In a real service the secret comes from your secret store, the same on both sides.
	if s.secret, err = newSecret(); err != nil {
		return err
	}
	s.signing, err = participant.NewSigningClient(s.secret, nil)
	return err
}

// campaign opens one ZooKeeper session and makes one elector per leader job (see docs/embed.md).
func (s *service) campaign(ctx context.Context) error {
	var err error
	s.sess, err = zklock.NewSession(ctx, s.cfg.ZK, zklock.WithSessionTimeout(4*time.Second), zklock.WithLogger(s.log),
		zklock.WithDigestAuth(s.cfg.ZKUser, s.cfg.ZKPass))
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	id := fmt.Sprintf("%s-%d", host, os.Getpid()) // shown by Elector.Leader: who leads
	if s.relayElector, err = zklock.NewElector(s.sess, s.cfg.Election+"/relay", id); err != nil {
		return err
	}
	s.sagaElector, err = zklock.NewElector(s.sess, s.cfg.Election+"/saga", id)
	return err
}

// build makes the components that keep tables and creates the tables. New* only checks options;
// Migrate creates the tables (idempotent).
func (s *service) build(ctx context.Context) error {
	var err error
	schema := s.cfg.Schema
	if s.ob, err = outbox.New(s.pool, outbox.WithTable(schema, "")); err != nil { // txkit_outbox, and txkit_fence for the relay
		return err
	}
	if s.store, err = idempotency.New(s.pool, idempotency.WithTable(schema, "")); err != nil { // txkit_idempotency
		return err
	}
	if s.bar, err = barrier.New(s.pool, barrier.WithTable(schema, ""), barrier.WithSecrets(s.secret)); err != nil { // txkit_barrier
		return err
	}
	s.sagas, err = saga.New(s.pool, coordinator.WithSchema(schema), coordinator.WithElector(s.sagaElector), // txkit_saga_global, _branch; txkit_fence, the same
		coordinator.WithHTTPClient(s.signing), coordinator.WithLogger(s.log))
	if err != nil {
		return err
	}
	s.welcomes = pgx.Identifier{schema, "welcomes"}.Sanitize()
	s.credits = pgx.Identifier{schema, "credits"}.Sanitize()
	s.compensations = pgx.Identifier{schema, "compensations"}.Sanitize()
	for _, m := range []func(context.Context) error{
		s.ob.Migrate,
		s.store.Migrate,
		s.bar.Migrate,
		s.sagas.Migrate,
		func(ctx context.Context) error { return migrateApp(ctx, s.pool, schema) }, // this service's own tables
	} {
		if err := m(ctx); err != nil {
			return err
		}
	}
	return nil
}

// buildMessaging makes the publisher, the relay that publishes the outbox through it while its
// elector leads, and the idempotent consumer of the topic.
func (s *service) buildMessaging(ctx context.Context) error {
	var err error
	if s.pub, err = rocketmq.NewPublisher(ctx, s.cfg.Namesrv, rocketmq.WithLogger(s.log)); err != nil {
		return err
	}
	if s.relay, err = outbox.NewRelay(s.ob, s.pub, outbox.WithElector(s.relayElector), outbox.WithLogger(s.log)); err != nil { // fenced in txkit_fence
		return err
	}
	s.consumer, err = rocketmq.NewConsumer(s.cfg.Namesrv, s.group, s.cfg.Topic, s.pool, s.store,
		func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
			// Runs in the transaction that claims msg.ID: a redelivery does nothing.
			_, err := tx.Exec(ctx, `insert into `+s.welcomes+` (user_id) values ($1)`, msg.Key)
			return err
		}, rocketmq.WithLogger(s.log))
	return err
}

// buildWallet serves the saga's participant, the wallet: one URL for both ops, behind the signed
// barrier.
func (s *service) buildWallet() error {
	mux := http.NewServeMux()
	mux.Handle("POST /wallet/saga", s.bar.Handler(s.wallet,
		barrier.WithAllowedOps(participant.OpAction, participant.OpCompensate)))
	var err error
	if s.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return err
	}
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second,
		WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
	return nil
}

// wallet is the participant's code, run by the barrier in the transaction that records the op.
func (s *service) wallet(ctx context.Context, tx pgx.Tx, req participant.Request) error {
	var p struct{ Amount int }
	if err := json.Unmarshal(req.Payload, &p); err != nil {
		return fmt.Errorf("%w: payload: %w", participant.ErrBadRequest, err)
	}
	switch req.Op {
	case participant.OpAction:
		if p.Amount > 1000 {
			return fmt.Errorf("%w: amount %d over the limit", participant.ErrRefused, p.Amount)
		}
		_, err := tx.Exec(ctx, `insert into `+s.credits+` (gid, amount) values ($1, $2)`, req.GID, p.Amount)
		return err
	case participant.OpCompensate:
		// The coordinator compensates the refused step too (its action's outcome could have been
		// unknown). Its action never committed, so the barrier answers this call as an empty
		// rollback without calling this function: a compensation here always has work to undo.
		if _, err := tx.Exec(ctx, `insert into `+s.compensations+` (gid) values ($1)`, req.GID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `delete from `+s.credits+` where gid = $1`, req.GID)
		return err
	}
	return fmt.Errorf("%w: op %s", participant.ErrBadRequest, req.Op)
}

// runUntilDone runs every component's Run and the wallet's server while work runs (or until ctx
// ends), then stops them all and waits for them.
func (s *service) runUntilDone(ctx context.Context) (res result, err error) {
	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	g, gctx := errgroup.WithContext(runCtx)
	g.Go(func() error { return s.relay.Run(gctx) })    // relays while relayElector leads
	g.Go(func() error { return s.consumer.Run(gctx) }) // until gctx ends
	g.Go(func() error { return s.sagas.Run(gctx) })    // recovery while sagaElector leads
	g.Go(func() error { return s.store.Run(gctx) })
	g.Go(func() error { return s.bar.Run(gctx) })
	g.Go(func() error { return s.serve(gctx) })

	werr := s.work(gctx, &res)
	stopAll()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := errors.Join(g.Wait(), s.sagas.Flush(fctx)); err != nil { // Flush: the sagas' finishes written in the background land
		return res, err
	}
	if werr != nil {
		return res, werr
	}
	if res.Accepted != nil || !errors.Is(res.Refused, participant.ErrRefused) {
		return res, fmt.Errorf("sagas: accepted %v, refused %v", res.Accepted, res.Refused)
	}
	return res, nil
}

// serve serves the wallet until ctx ends, then shuts it down.
func (s *service) serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		err := s.srv.Shutdown(sctx)
		<-errc // http.ErrServerClosed
		return err
	}
}

// work registers a user, then submits two sagas to the wallet — one it accepts, one it refuses —
// and counts what reached the wallet.
func (s *service) work(ctx context.Context, res *result) error {
	user, took, err := register(ctx, s.pool, s.ob, s.cfg, s.welcomes)
	if err != nil {
		return err
	}
	res.User, res.Delivered = user, took
	if res.Accepted, err = s.credit(ctx, 100); err != nil {
		return err
	}
	if res.Refused, err = s.credit(ctx, 5000); err != nil {
		return err
	}
	if err := s.pool.QueryRow(ctx, `select count(*) from `+s.credits).Scan(&res.Credits); err != nil {
		return err
	}
	return s.pool.QueryRow(ctx, `select count(*) from `+s.compensations).Scan(&res.Compensated)
}

// credit submits a saga of one step, crediting amount in the wallet, and returns Submit's result:
// nil when it succeeded, participant.ErrRefused when it was compensated, coordinator.ErrIncomplete
// when the leader carries on. err is a failure to build the saga.
func (s *service) credit(ctx context.Context, amount int) (submitted, err error) {
	sg, err := s.sagas.Begin(ctx, coordinator.WithTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	payload, _ := json.Marshal(map[string]int{"amount": amount})
	walletURL := "http://" + s.ln.Addr().String() + "/wallet/saga"
	if err := sg.Add(saga.Step{Name: "credit", Payload: payload,
		Participant: participant.HTTP{URL: walletURL}}); err != nil {
		return nil, err
	}
	return sg.Submit(ctx), nil
}

// close closes what the steps opened, in reverse order.
func (s *service) close() {
	if s.pub != nil {
		s.pub.Close()
	}
	if s.sess != nil {
		s.sess.Close()
	}
	if s.pool != nil {
		s.pool.Close()
	}
}

// register records a user and its "user registered" message in one transaction, then waits until
// the consumer has applied the message.
func register(ctx context.Context, pool *pgxpool.Pool, ob *outbox.Outbox, c config, welcomes string) (string, time.Duration, error) {
	user := uuid.NewString()
	users := pgx.Identifier{c.Schema, "users"}.Sanitize()
	err := ob.Do(ctx, func(ctx context.Context, tx pgx.Tx) error { // on ob's pool; handed to the relay once committed
		if _, err := tx.Exec(ctx, `insert into `+users+` (id, name) values ($1, $2)`, user, "ada"); err != nil {
			return err
		}
		body, _ := json.Marshal(map[string]string{"id": user, "name": "ada"})
		_, err := ob.Enqueue(ctx, tx, outbox.Message{Topic: c.Topic, Key: user, Body: body})
		return err
	})
	if err != nil {
		return "", 0, err
	}
	committed := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		if err := pool.QueryRow(ctx, `select count(*) from `+welcomes+` where user_id = $1`, user).Scan(&n); err != nil {
			return "", 0, err
		}
		if n > 0 {
			return user, time.Since(committed), nil
		}
		select {
		case <-ctx.Done():
			return "", 0, fmt.Errorf("waiting for the consumer to apply user %s: %w", user, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// migrateApp creates this service's own tables.
func migrateApp(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	s := pgx.Identifier{schema}.Sanitize()
	_, err := pool.Exec(ctx, `create schema if not exists `+s+`;
		create table if not exists `+s+`.users (id uuid primary key, name text not null);
		create table if not exists `+s+`.welcomes (user_id uuid primary key);
		create table if not exists `+s+`.credits (gid text primary key, amount int not null);
		create table if not exists `+s+`.compensations (gid text not null)`)
	return err
}

func newSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
