// Package app holds what the register-points services share: configuration from flags and the
// environment, logging, database pools in a schema of the run's own, and the JSON event.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/examples/exapp"
	txrocketmq "github.com/txkit/txkit/rocketmq"
)

// UserRegistered is the event the users service emits and the points service consumes.
type UserRegistered struct {
	UserID       uuid.UUID `json:"user_id"`
	Name         string    `json:"name"`
	RegisteredAt time.Time `json:"registered_at"`
}

// Logger returns the service's logger, routes rocketmq-client-go's own log lines into it at warn
// level, and has a panic in one of the client's goroutines logged there instead of ending the
// process (a main package may set those process-wide hooks; library code never does).
func Logger(service string) *slog.Logger {
	log := exapp.Logger(service)
	txrocketmq.SetClientLogger(log, slog.LevelWarn)
	return log
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
