// Package exapp holds what the example services share: reading settings from the environment,
// logging, PostgreSQL URLs, databases and pools, answering errors without internal detail, the
// lock backends by name, and serving HTTP in a way the drills (drills/...) can start (each service
// prints "LISTENING <addr>"). It imports only txkit's public packages, as the examples do; a
// service copied out of this repository takes along the parts it uses.
package exapp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/tracelog"
)

// Env returns the environment variable name, or def when it is unset.
func Env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Logger returns the service's logger (text on stderr). A record logged with a context that
// carries a span (InfoContext and the like, as txkit's components log) also carries its trace_id
// and span_id (tracelog.Handler), so a log line leads to its trace.
func Logger(service string) *slog.Logger {
	return slog.New(tracelog.Handler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))).With("service", service)
}

// DatabaseURL returns base with its database replaced by db and its search_path set to schema
// (when not empty), and pool_max_conns set when maxConns > 0.
func DatabaseURL(base, db, schema string, maxConns int) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("database url %q: %w", base, err)
	}
	if db != "" {
		u.Path = "/" + db
	}
	q := u.Query()
	if schema != "" {
		q.Set("search_path", schema)
	}
	if maxConns > 0 {
		q.Set("pool_max_conns", strconv.Itoa(maxConns))
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Connect opens one connection to db on the server of base, with search_path schema.
func Connect(ctx context.Context, base, db, schema string) (*pgx.Conn, error) {
	u, err := DatabaseURL(base, db, schema, 0)
	if err != nil {
		return nil, err
	}
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", db, err)
	}
	return c, nil
}

// EnsureDatabase creates database db on the server of base when it does not exist. Several
// processes may call it at once.
func EnsureDatabase(ctx context.Context, base, db string) error {
	c, err := Connect(ctx, base, "postgres", "")
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := c.QueryRow(ctx, `select exists (select 1 from pg_database where datname = $1)`, db).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = c.Exec(ctx, "create database "+pgx.Identifier{db}.Sanitize())
	var pe *pgconn.PgError
	// 42P04: created meanwhile; 23505: two concurrent creates raced on pg_database's index.
	if errors.As(err, &pe) && (pe.Code == "42P04" || pe.Code == "23505") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create database %s: %w", db, err)
	}
	return nil
}

// Pool creates database db if needed and opens a pool of at most maxConns connections on it whose
// search_path is schema (when not empty), creating the schema if it is missing; maxConns 0 keeps
// pgxpool's default.
func Pool(ctx context.Context, base, db, schema string, maxConns int) (*pgxpool.Pool, error) {
	if err := EnsureDatabase(ctx, base, db); err != nil {
		return nil, err
	}
	rawURL, err := DatabaseURL(base, db, schema, maxConns)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, rawURL)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", db, err)
	}
	if schema == "" {
		return pool, nil
	}
	if _, err := pool.Exec(ctx, "create schema if not exists "+pgx.Identifier{schema}.Sanitize()); err != nil {
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "23505" { // a concurrent create won the race
			pool.Close()
			return nil, fmt.Errorf("create schema %s in %s: %w", schema, db, err)
		}
	}
	return pool, nil
}

// The example servers' timeouts: reading a whole request, writing an answer (longer than the
// slowest handler: a TCC order calls three participants with 10 s call timeouts), and keeping an
// idle connection.
const (
	ReadTimeout  = 15 * time.Second
	WriteTimeout = 60 * time.Second
	IdleTimeout  = 2 * time.Minute
)

// NewServer returns the server Serve runs: h with every timeout set, so that a client that sends
// its headers or body slowly, never reads the answer, or keeps an idle connection open cannot hold
// a connection (and its goroutine) for ever.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: ReadTimeout,
		WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout}
}

// Serve listens on addr (port 0 picks one), prints "LISTENING <addr>" on stdout for whoever
// started the process, and serves h until ctx ends.
func Serve(ctx context.Context, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	fmt.Printf("LISTENING %s\n", ln.Addr())
	srv := NewServer(h)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-errc
		return nil
	}
}

// WriteJSON writes v with status code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Fail answers an error without its internal detail: err (a driver message may name the database
// user, host and schema) is logged with a new request id, and the client gets code with
// {"error": msg, "request_id": id}.
func Fail(w http.ResponseWriter, log *slog.Logger, code int, msg string, err error, attrs ...any) {
	id := LogError(log, msg, err, attrs...)
	WriteJSON(w, code, map[string]string{"error": msg, "request_id": id})
}

// LogError logs err at level Error with msg, a new request id (key request_id) and attrs, and
// returns the id, for a handler that answers in a shape of its own: the client gets the id, never
// err's text, and an operator finds the log line the client quotes.
func LogError(log *slog.Logger, msg string, err error, attrs ...any) string {
	id := RequestID()
	if log != nil {
		log.Error(msg, append([]any{slog.String("request_id", id), slog.Any("err", err)}, attrs...)...)
	}
	return id
}

// RequestID returns a new random request id (16 hex digits).
func RequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Pause waits d, or less when ctx ends (then it returns ctx's error).
func Pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
