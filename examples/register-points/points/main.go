// Command points is the register-points example's points service: it consumes UserRegistered
// events from RocketMQ and awards 100 points once per user — the award and the idempotency claim
// on the message id commit in one PostgreSQL transaction, so a redelivered event changes nothing.
// GET /points/{user} answers a user's points.
//
//	go run ./examples/register-points/points -schema demo -topic txkit-user-registered
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

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/register-points/app"
	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/outbox"
	txrocketmq "github.com/txkit/txkit/rocketmq"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "HTTP address")
	pg := flag.String("pg", exapp.Env("TXKIT_PG_URL", "postgres://postgres@127.0.0.1:55432/txkit_test?sslmode=disable"), "PostgreSQL URL (its database is replaced by -db)")
	db := flag.String("db", "txkit_points", "database of the points service")
	schema := flag.String("schema", "register_points", "schema of this run")
	namesrv := flag.String("namesrv", exapp.Env("TXKIT_ROCKETMQ_NAMESRV", "127.0.0.1:19876"), "RocketMQ name servers")
	topic := flag.String("topic", "txkit-user-registered", "topic of UserRegistered events (must exist)")
	group := flag.String("group", "", "consumer group (default txkit-demo-points-<schema>)")
	flag.Parse()
	log := app.Logger("points")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *group == "" {
		*group = "txkit-demo-points-" + strings.ReplaceAll(*schema, "_", "-")
	}
	if err := run(ctx, *listen, *pg, *db, *schema, *namesrv, *topic, *group, log); err != nil {
		log.Error("points service failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, listen, pg, db, schema, namesrv, topic, group string, log *slog.Logger) error {
	url, err := exapp.DatabaseURL(pg, db, schema, 0)
	if err != nil {
		return err
	}
	pool, err := app.Pool(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `create table if not exists points (
		user_id uuid primary key,
		points int not null,
		registered_at timestamptz not null,
		awarded_at timestamptz not null default clock_timestamp())`); err != nil {
		return fmt.Errorf("create points table: %w", err)
	}
	mux := http.NewServeMux()
	reg := exapp.Metrics(mux)
	store, err := idempotency.New(pool, idempotency.WithLogger(log), idempotency.WithRegisterer(reg))
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	award := func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
		var ev app.UserRegistered
		if err := json.Unmarshal(msg.Body, &ev); err != nil {
			return fmt.Errorf("decode UserRegistered %s: %w", msg.ID, err)
		}
		// A second award for the same user adds up, so a duplicate that slipped past the
		// idempotency claim would show as 200 points.
		_, err := tx.Exec(ctx, `insert into points (user_id, points, registered_at) values ($1, 100, $2)
			on conflict (user_id) do update set points = points.points + 100`, ev.UserID, ev.RegisteredAt)
		return err
	}
	c, err := txrocketmq.NewConsumer(strings.Split(namesrv, ","), group, topic, pool, store, award, txrocketmq.WithLogger(log), txrocketmq.WithTelemetry(reg, nil))
	if err != nil {
		return err
	}
	mux.HandleFunc("GET /points/{user}", userPoints(pool, log))
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) { exapp.WriteJSON(w, http.StatusOK, c.Stats()) })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		exapp.WriteJSON(w, 200, map[string]string{"status": "ok"})
	})
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return c.Run(ctx) })
	g.Go(func() error { return exapp.Serve(ctx, listen, mux) })
	log.Info("points service running", "schema", schema, "topic", topic, "group", group)
	return g.Wait()
}

// userPoints answers GET /points/{user}: 200 {"user", "points"}, 404 with 0 points for a user
// not awarded yet, and 500 {"error", "request_id"} when the database fails (its detail is logged
// under that request id, not answered).
func userPoints(pool *pgxpool.Pool, log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := uuid.Parse(r.PathValue("user"))
		if err != nil {
			exapp.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": "user must be a UUID"})
			return
		}
		var n int
		err = pool.QueryRow(r.Context(), `select points from points where user_id = $1`, id).Scan(&n)
		if errors.Is(err, pgx.ErrNoRows) {
			exapp.WriteJSON(w, http.StatusNotFound, map[string]any{"user": id, "points": 0})
			return
		}
		if err != nil {
			exapp.Fail(w, log, http.StatusInternalServerError, "reading the points failed", err, "user", id.String())
			return
		}
		exapp.WriteJSON(w, http.StatusOK, map[string]any{"user": id, "points": n})
	}
}
