// Command users is the register-points example's users service: POST /users registers a user and
// records a UserRegistered event in the same PostgreSQL transaction — in the transactional outbox
// (-mode outbox; the elected instance relays it to RocketMQ) or as a RocketMQ transactional half
// message (-mode txmsg). Run several instances: only the elected one relays — or, with
// -partitions P, the outbox is split into P partitions and the instances share them, each relaying
// about P/N (GET /stats lists the partitions an instance leads under "led").
//
//	go run ./examples/register-points/users -schema demo -topic txkit-user-registered -id users-1
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
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/register-points/app"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/outbox"
	txrocketmq "github.com/txkit/txkit/rocketmq"
)

type config struct {
	listen, pg, db, schema, zk, namesrv, topic, mode, id, election, lockKind string
	partitions                                                               int
	sessionTimeout                                                           time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.listen, "listen", "127.0.0.1:0", "HTTP address")
	flag.StringVar(&c.pg, "pg", exapp.Env("TXKIT_PG_URL", "postgres://postgres@127.0.0.1:55432/txkit_test?sslmode=disable"), "PostgreSQL URL (its database is replaced by -db)")
	flag.StringVar(&c.db, "db", "txkit_users", "database of the users service")
	flag.StringVar(&c.schema, "schema", "register_points", "schema of this run")
	flag.StringVar(&c.zk, "zk", exapp.Env("TXKIT_ZK", "127.0.0.1:22181,127.0.0.1:22182,127.0.0.1:22183"), "ZooKeeper servers")
	flag.StringVar(&c.namesrv, "namesrv", exapp.Env("TXKIT_ROCKETMQ_NAMESRV", "127.0.0.1:19876"), "RocketMQ name servers")
	flag.StringVar(&c.topic, "topic", "txkit-user-registered", "topic of UserRegistered events (must exist)")
	flag.StringVar(&c.mode, "mode", "outbox", "outbox or txmsg")
	flag.StringVar(&c.id, "id", "users-"+uuid.NewString()[:8], "instance id (the relay's election id)")
	flag.StringVar(&c.election, "election", "", "ZooKeeper path of the relay election (default /txkit-demo/<schema>/relay; with another -lock, its name)")
	flag.StringVar(&c.lockKind, "lock", "zk", "lock backend of the relay's elections: zk (the -zk ensemble), pg (PostgreSQL lease rows in the database of TXKIT_PG_URL), redis (TXKIT_REDIS), redlock (TXKIT_REDLOCK) or redis-sentinel (TXKIT_REDIS_SENTINELS)")
	flag.DurationVar(&c.sessionTimeout, "session-timeout", 4*time.Second, "ZooKeeper session timeout, or the lease TTL of the other -lock backends (how long a dead relay leader keeps its leadership)")
	flag.IntVar(&c.partitions, "partitions", 0, "split the outbox into this many partitions, each with its own election <election>/p<i>, shared among the instances (0: one election, one relaying instance)")
	flag.Parse()
	log := app.Logger("users").With("id", c.id)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, log); err != nil {
		log.Error("users service failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config, log *slog.Logger) error {
	if c.mode != "outbox" && c.mode != "txmsg" {
		return fmt.Errorf("-mode %q: want outbox or txmsg", c.mode)
	}
	url, err := exapp.DatabaseURL(c.pg, c.db, c.schema, 0)
	if err != nil {
		return err
	}
	pool, err := app.Pool(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `create table if not exists users (
		id uuid primary key, name text not null, registered_at timestamptz not null)`); err != nil {
		return fmt.Errorf("create users table: %w", err)
	}
	ns := strings.Split(c.namesrv, ",")
	mux := http.NewServeMux()
	reg := exapp.Metrics(mux)
	s := &service{c: c, pool: pool, log: log}
	g, ctx := errgroup.WithContext(ctx)
	switch c.mode {
	case "outbox":
		var obOpts []outbox.Option
		if c.partitions > 0 {
			obOpts = append(obOpts, outbox.WithPartitions(c.partitions))
		}
		if s.ob, err = outbox.New(pool, obOpts...); err != nil {
			return err
		}
		if err := s.ob.Migrate(ctx); err != nil {
			return err
		}
		election := c.election
		if election == "" {
			election = "/txkit-demo/" + c.schema + "/relay"
		}
		// newEl makes the elector of one election; count, when not nil, says how many relays share
		// the partitions (ZooKeeper only: the others lead every partition they win).
		var newEl func(name string) (lock.Elector, error)
		var count func(ctx context.Context) (int, error)
		paths := make([]string, c.partitions)
		for p := range paths {
			paths[p] = fmt.Sprintf("%s/p%d", election, p)
		}
		if c.lockKind == "zk" {
			auth, err := exapp.ZKAuth() // TXKIT_ZK_AUTH
			if err != nil {
				return err
			}
			sess, err := zklock.NewSession(ctx, strings.Split(c.zk, ","), zklock.WithSessionTimeout(c.sessionTimeout), zklock.WithLogger(log), auth)
			if err != nil {
				return err
			}
			defer sess.Close()
			newEl = func(name string) (lock.Elector, error) { return zklock.NewElector(sess, name, c.id) }
			if s.el, err = zklock.NewElector(sess, election, c.id, lock.WithElectionRegisterer(reg)); err != nil {
				return err
			}
			if c.partitions > 0 {
				count = outbox.ContenderCount(sess.Inspector(), paths...)
			}
		} else {
			locks, err := exapp.OpenLocks(ctx, c.lockKind, log, exapp.WithLockTTL(c.sessionTimeout), exapp.WithLocksRegisterer(reg))
			if err != nil {
				return err
			}
			defer locks.Close()
			newEl = func(name string) (lock.Elector, error) { return locks.Elector(strings.TrimPrefix(name, "/"), c.id) }
			if s.el, err = newEl(election); err != nil {
				return err
			}
		}
		pub, err := txrocketmq.NewPublisher(ctx, ns, txrocketmq.WithLogger(log))
		if err != nil {
			return err
		}
		defer pub.Close()
		ropts := []outbox.RelayOption{outbox.WithLogger(log), outbox.WithTelemetry(reg, nil)}
		if c.partitions > 0 {
			// Each partition's election; on ZooKeeper the instances share them, ceil(P/N) each at most.
			ropts = append(ropts, outbox.WithElectors(func(p int) (lock.Elector, error) { return newEl(paths[p]) }, count))
		} else {
			ropts = append(ropts, outbox.WithElector(s.el))
		}
		relay, err := outbox.NewRelay(s.ob, pub, ropts...)
		if err != nil {
			return err
		}
		s.relay = relay
		g.Go(func() error { return relay.Run(ctx) })
	case "txmsg":
		if s.txp, err = txrocketmq.NewTxProducer(ctx, ns, "txkit-demo-users-tx", pool, txrocketmq.WithLogger(log), txrocketmq.WithTelemetry(reg, nil)); err != nil {
			return err
		}
		defer s.txp.Close()
		if err := s.txp.Migrate(ctx); err != nil {
			return err
		}
	}
	mux.HandleFunc("POST /users", s.register)
	mux.HandleFunc("GET /stats", s.stats)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		exapp.WriteJSON(w, 200, map[string]string{"status": "ok"})
	})
	g.Go(func() error { return exapp.Serve(ctx, c.listen, mux) })
	log.Info("users service running", "mode", c.mode, "schema", c.schema, "topic", c.topic, "lock", c.lockKind)
	return g.Wait()
}

type service struct {
	c     config
	pool  *pgxpool.Pool
	log   *slog.Logger
	ob    *outbox.Outbox
	el    lock.Elector
	relay *outbox.Relay
	txp   *txrocketmq.TxProducer
}

// register: POST /users {"name": "..."} → 201 {"id": "..."}; a failure → 500 {"error": "registration
// failed", "request_id": "..."}, its detail in the log under that request id.
func (s *service) register(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"name"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil || strings.TrimSpace(req.Name) == "" {
		exapp.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": "want a JSON body with a non-empty name"})
		return
	}
	ev := app.UserRegistered{UserID: uuid.New(), Name: req.Name, RegisteredAt: time.Now().UTC()}
	body, _ := json.Marshal(ev)
	msg := outbox.Message{Topic: s.c.topic, Key: ev.UserID.String(), Body: body, Headers: map[string]string{"type": "UserRegistered"}}
	insert := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `insert into users (id, name, registered_at) values ($1, $2, $3)`, ev.UserID, ev.Name, ev.RegisteredAt)
		return err
	}
	var err error
	if s.ob != nil {
		err = pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
			if err := insert(r.Context(), tx); err != nil {
				return err
			}
			_, err := s.ob.Enqueue(r.Context(), tx, msg)
			return err
		})
	} else {
		msg.ID = uuid.New()
		err = s.txp.Send(r.Context(), msg, insert)
	}
	if err != nil {
		// The error may name the database, its user and host: logged with a request id, not answered.
		exapp.Fail(w, s.log, http.StatusInternalServerError, "registration failed", err)
		return
	}
	exapp.WriteJSON(w, http.StatusCreated, map[string]string{"id": ev.UserID.String()})
}

// stats: GET /stats → the relay's counters, who leads, and the outbox backlog.
func (s *service) stats(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{"id": s.c.id, "mode": s.c.mode}
	if s.relay != nil {
		out["relay"] = s.relay.Stats()
		out["led"] = s.relay.Led()
		leader, err := s.el.Leader(r.Context())
		if err != nil && !errors.Is(err, lock.ErrNoLeader) {
			out["leader_error"] = "leader unknown (request id " + exapp.LogError(s.log, "reading the leader failed", err) + ")"
		}
		out["leader"] = leader
		pending, dead, err := s.ob.Backlog(r.Context(), s.pool)
		if err == nil {
			out["pending"], out["dead"] = pending, dead
		}
	}
	exapp.WriteJSON(w, http.StatusOK, out)
}
