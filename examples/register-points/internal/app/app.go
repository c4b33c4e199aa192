// Package app holds what the register-points services share: configuration from flags and the
// environment, logging, database pools in a schema of the run's own, and the JSON event.
package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	txrocketmq "github.com/txkit/txkit/outbox/rocketmq"
)

// UserRegistered is the event the users service emits and the points service consumes.
type UserRegistered struct {
	UserID       uuid.UUID `json:"user_id"`
	Name         string    `json:"name"`
	RegisteredAt time.Time `json:"registered_at"`
}

// Env returns the environment variable name, or def when it is unset.
func Env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Logger returns the service's logger, and routes rocketmq-client-go's own log lines into it at
// warn level (a main package may set that process-wide logger; library code never does).
func Logger(service string) *slog.Logger {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("service", service)
	rlog.SetLogger(txrocketmq.NewRlogAdapter(log, slog.LevelWarn))
	return log
}

// DatabaseURL returns base with its database replaced by db and its search_path set to schema.
func DatabaseURL(base, db, schema string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("database url %q: %w", base, err)
	}
	if db != "" {
		u.Path = "/" + db
	}
	if schema != "" {
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// Pool opens a pool on url and creates the schema named in its search_path if it is missing.
func Pool(ctx context.Context, rawURL string) (*pgxpool.Pool, error) {
	pool, err := pgxpool.New(ctx, rawURL)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", rawURL, err)
	}
	u, _ := url.Parse(rawURL)
	if schema := u.Query().Get("search_path"); schema != "" {
		if _, err := pool.Exec(ctx, "create schema if not exists "+quote(schema)); err != nil {
			pool.Close()
			return nil, fmt.Errorf("create schema %s: %w", schema, err)
		}
	}
	return pool, nil
}

func quote(ident string) string { return `"` + strings.ReplaceAll(ident, `"`, `""`) + `"` }

// Serve listens on addr (port 0 picks one), prints "LISTENING <addr>" on stdout for whoever
// started the process, and serves h until ctx ends.
func Serve(ctx context.Context, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	fmt.Printf("LISTENING %s\n", ln.Addr())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	}
}

// WriteJSON writes v with status code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
