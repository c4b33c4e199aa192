// Command embed is the smallest service that embeds txkit, written to be read: one main that
// wires a ZooKeeper session and two electors, a transactional outbox relayed to RocketMQ, an
// idempotent consumer, and a saga whose step is an HTTP participant behind a signed barrier. It
// imports only txkit's public packages (nothing under examples/internal), so it can be copied
// into a module of your own; docs/embed.md walks through it.
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
// stops them and returns what it saw. It returns when that is done or ctx ends.
func run(ctx context.Context, c config, log *slog.Logger) (res result, err error) {
	pool, err := pgxpool.New(ctx, c.PG)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	group := "embed-" + c.Schema // the consumer group
	// A consumer cannot start on a missing topic; its group's retry topic too, or the client warns.
	if err := rocketmq.EnsureTopic(ctx, c.Namesrv, c.Broker, c.Topic, rocketmq.WithRetryTopicsFor(group)); err != nil {
		return res, err
	}
	secret, err := newSecret() // in a real service: from your secret store, the same on both sides
	if err != nil {
		return res, err
	}
	signing, err := participant.NewSigningClient(secret, nil) // the coordinator signs every call
	if err != nil {
		return res, err
	}

	// 1. Leadership: one ZooKeeper session, one elector per leader job (see docs/embed.md).
	sess, err := lock.NewSession(ctx, c.ZK, lock.WithSessionTimeout(4*time.Second), lock.WithLogger(log),
		lock.WithDigestAuth(c.ZKUser, c.ZKPass))
	if err != nil {
		return res, err
	}
	defer sess.Close()
	host, _ := os.Hostname()
	id := fmt.Sprintf("%s-%d", host, os.Getpid()) // shown by Elector.Leader: who leads
	relayElector, err := lock.NewElector(sess, c.Election+"/relay", id)
	if err != nil {
		return res, err
	}
	sagaElector, err := lock.NewElector(sess, c.Election+"/saga", id)
	if err != nil {
		return res, err
	}

	// 2. The components. New* only checks options; Migrate creates the tables (idempotent).
	ob, err := outbox.New(pool, outbox.WithSchema(c.Schema)) // txkit_outbox, and txkit_fence for the relay
	if err != nil {
		return res, err
	}
	store, err := idempotency.New(pool, idempotency.WithSchema(c.Schema)) // txkit_idempotency
	if err != nil {
		return res, err
	}
	bar, err := barrier.New(pool, barrier.WithSchema(c.Schema), barrier.WithSecrets(secret)) // txkit_barrier
	if err != nil {
		return res, err
	}
	sagas, err := saga.New(pool, coordinator.WithSchema(c.Schema), coordinator.WithElector(sagaElector), // txkit_saga_global, _branch; txkit_fence, the same
		coordinator.WithHTTPClient(signing), coordinator.WithLogger(log))
	if err != nil {
		return res, err
	}
	for _, m := range []func(context.Context) error{
		ob.Migrate,
		store.Migrate,
		bar.Migrate,
		sagas.Migrate,
		func(ctx context.Context) error { return migrateApp(ctx, pool, c.Schema) }, // this service's own tables
	} {
		if err := m(ctx); err != nil {
			return res, err
		}
	}

	// 3. Outbox → relay → RocketMQ → idempotent consumer.
	pub, err := rocketmq.NewPublisher(ctx, c.Namesrv, rocketmq.WithLogger(log))
	if err != nil {
		return res, err
	}
	defer pub.Close()
	relay, err := outbox.NewRelay(ob, pub, outbox.WithElector(relayElector), outbox.WithLogger(log)) // fenced in txkit_fence
	if err != nil {
		return res, err
	}
	welcomes := pgx.Identifier{c.Schema, "welcomes"}.Sanitize()
	consumer, err := rocketmq.NewConsumer(c.Namesrv, group, c.Topic, pool, store,
		func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
			// Runs in the transaction that claims msg.ID: a redelivery does nothing.
			_, err := tx.Exec(ctx, `insert into `+welcomes+` (user_id) values ($1)`, msg.Key)
			return err
		}, rocketmq.WithLogger(log))
	if err != nil {
		return res, err
	}

	// 4. The saga's participant: one URL for both ops, behind the signed barrier.
	credits := pgx.Identifier{c.Schema, "credits"}.Sanitize()
	compensations := pgx.Identifier{c.Schema, "compensations"}.Sanitize()
	wallet := func(ctx context.Context, tx pgx.Tx, req participant.Request) error {
		var p struct{ Amount int }
		if err := json.Unmarshal(req.Payload, &p); err != nil {
			return fmt.Errorf("%w: payload: %w", participant.ErrBadRequest, err)
		}
		switch req.Op {
		case participant.OpAction:
			if p.Amount > 1000 {
				return fmt.Errorf("%w: amount %d over the limit", participant.ErrRefused, p.Amount)
			}
			_, err := tx.Exec(ctx, `insert into `+credits+` (gid, amount) values ($1, $2)`, req.GID, p.Amount)
			return err
		case participant.OpCompensate:
			// The coordinator compensates the refused step too (its action's outcome could have been
			// unknown). Its action never committed, so the barrier answers this call as an empty
			// rollback without calling this function: a compensation here always has work to undo.
			if _, err := tx.Exec(ctx, `insert into `+compensations+` (gid) values ($1)`, req.GID); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `delete from `+credits+` where gid = $1`, req.GID)
			return err
		}
		return fmt.Errorf("%w: op %s", participant.ErrBadRequest, req.Op)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /wallet/saga", bar.Handler(wallet,
		barrier.WithAllowedOps(participant.OpAction, participant.OpCompensate)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second,
		WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute}

	// 5. Run everything until work is done (or ctx ends); then stop and wait for all of it.
	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	g, gctx := errgroup.WithContext(runCtx)
	g.Go(func() error { return relay.Run(gctx) })    // relays while relayElector leads
	g.Go(func() error { return consumer.Run(gctx) }) // until gctx ends
	g.Go(func() error { return sagas.Run(gctx) })    // recovery while sagaElector leads
	g.Go(func() error { return store.Run(gctx) })
	g.Go(func() error { return bar.Run(gctx) })
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(gctx), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})

	work := func() error {
		user, took, err := register(gctx, pool, ob, c, welcomes)
		if err != nil {
			return err
		}
		res.User, res.Delivered = user, took
		walletURL := "http://" + ln.Addr().String() + "/wallet/saga"
		for _, amount := range []int{100, 5000} {
			s, err := sagas.Begin(coordinator.WithTimeout(30 * time.Second))
			if err != nil {
				return err
			}
			payload, _ := json.Marshal(map[string]int{"amount": amount})
			if err := s.Add(saga.Step{Name: "credit", Payload: payload,
				Participant: participant.HTTP{URL: walletURL, Client: signing}}); err != nil {
				return err
			}
			err = s.Submit(gctx) // nil: succeeded; participant.ErrRefused: compensated; coordinator.ErrIncomplete: the leader carries on
			if amount == 100 {
				res.Accepted = err
			} else {
				res.Refused = err
			}
		}
		if err := pool.QueryRow(gctx, `select count(*) from `+credits).Scan(&res.Credits); err != nil {
			return err
		}
		return pool.QueryRow(gctx, `select count(*) from `+compensations).Scan(&res.Compensated)
	}
	werr := work()
	stopAll()
	if err := g.Wait(); err != nil {
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

// register records a user and its "user registered" message in one transaction, then waits until
// the consumer has applied the message.
func register(ctx context.Context, pool *pgxpool.Pool, ob *outbox.Outbox, c config, welcomes string) (string, time.Duration, error) {
	user := uuid.NewString()
	users := pgx.Identifier{c.Schema, "users"}.Sanitize()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
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
