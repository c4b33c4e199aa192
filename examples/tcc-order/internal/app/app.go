// Package app holds what the tcc-order services share: configuration from flags and the
// environment, logging, a database and schema of the run's own, serving HTTP, and the fault
// injection the drill turns on in the stock and account services.
package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/participant"
)

// DefaultPG is the PostgreSQL URL of `make up`, used when TXKIT_PG_URL is unset.
const DefaultPG = "postgres://postgres@127.0.0.1:55432/txkit_test?sslmode=disable"

// DefaultZK is the ZooKeeper ensemble of `make up`, used when TXKIT_ZK is unset.
const DefaultZK = "127.0.0.1:22181,127.0.0.1:22182,127.0.0.1:22183"

// StockItem is the payload of a stock branch.
type StockItem struct {
	SKU string `json:"sku"`
	Qty int64  `json:"qty"`
}

// Funds is the payload of an account branch.
type Funds struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// Env returns the environment variable name, or def when it is unset.
func Env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Logger returns the service's logger (text on stderr).
func Logger(service string) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("service", service)
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

// EnsureDatabase creates database db on the server of base when it does not exist. Several
// processes may call it at once.
func EnsureDatabase(ctx context.Context, base, db string) error {
	u, err := DatabaseURL(base, "postgres", "")
	if err != nil {
		return err
	}
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		return fmt.Errorf("connect %s: %w", u, err)
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

// Pool creates database db if needed and opens a pool on it whose search_path is schema, creating
// the schema if it is missing.
func Pool(ctx context.Context, base, db, schema string) (*pgxpool.Pool, error) {
	if err := EnsureDatabase(ctx, base, db); err != nil {
		return nil, err
	}
	rawURL, err := DatabaseURL(base, db, schema)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, rawURL)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", rawURL, err)
	}
	if schema != "" {
		if _, err := pool.Exec(ctx, "create schema if not exists "+pgx.Identifier{schema}.Sanitize()); err != nil {
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "23505" { // a concurrent create won the race
				pool.Close()
				return nil, fmt.Errorf("create schema %s: %w", schema, err)
			}
		}
	}
	return pool, nil
}

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

// Faults injects the drill's faults in front of a participant's handler. Zero values inject
// nothing. Faults is safe for concurrent use.
type Faults struct {
	RefuseRate float64       // tries answered 409 without running (a business refusal)
	FailRate   float64       // requests answered 500 without running (the coordinator retries)
	LostRate   float64       // requests run and committed, then answered 500 (a lost reply: the retry is a duplicate)
	Delay      time.Duration // every request waits a random time up to Delay first
	SlowRate   float64       // requests that wait Slow first (longer than the coordinator's call timeout)
	Slow       time.Duration

	Refused, Failed, Lost, Slowed atomic.Int64
}

// Enabled reports whether f injects anything.
func (f *Faults) Enabled() bool {
	return f.RefuseRate > 0 || f.FailRate > 0 || f.LostRate > 0 || f.Delay > 0 || f.SlowRate > 0
}

// Wrap returns h behind the faults. The op is read from the request's path suffix (/try, ...).
func (f *Faults) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.Delay > 0 {
			sleep(r.Context(), rand.N(f.Delay))
		}
		if f.SlowRate > 0 && rand.Float64() < f.SlowRate {
			f.Slowed.Add(1)
			sleep(r.Context(), f.Slow)
		}
		if strings.HasSuffix(r.URL.Path, "/try") && f.RefuseRate > 0 && rand.Float64() < f.RefuseRate {
			f.Refused.Add(1)
			http.Error(w, "injected refusal", participant.StatusRefused)
			return
		}
		if f.FailRate > 0 && rand.Float64() < f.FailRate {
			f.Failed.Add(1)
			http.Error(w, "injected failure", http.StatusInternalServerError)
			return
		}
		if f.LostRate > 0 && rand.Float64() < f.LostRate {
			rec := &discard{header: http.Header{}}
			h.ServeHTTP(rec, r)
			f.Lost.Add(1)
			http.Error(w, "injected lost reply", http.StatusInternalServerError)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Stats returns the counts of injected faults.
func (f *Faults) Stats() map[string]int64 {
	return map[string]int64{"refused": f.Refused.Load(), "failed": f.Failed.Load(), "lost": f.Lost.Load(), "slowed": f.Slowed.Load()}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// discard is a ResponseWriter that drops the reply.
type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// ParticipantConfig is what [RunParticipant] needs to serve a TCC participant.
type ParticipantConfig struct {
	Name   string // service name: "stock", "account"
	Listen string
	Pool   *pgxpool.Pool
	Log    *slog.Logger
	Faults *Faults
	// Do runs one op of a branch in the participant's transaction, behind the barrier: it runs
	// at most once per (gid, branch, op); a refusal wraps participant.ErrRefused.
	Do func(ctx context.Context, tx pgx.Tx, req participant.Request) error
	// Stats adds the service's own numbers to GET /stats.
	Stats func(ctx context.Context) (map[string]any, error)
	// NoBarrier runs Do without the barrier: a duplicate is applied again, a cancel without its
	// try releases what was never reserved. Only for showing that the demo's checks catch it.
	NoBarrier bool
}

// RunParticipant serves POST /try, /confirm and /cancel through a [participant.Barrier] in the
// pool's database (so duplicates, empty rollbacks and hanging tries are handled in the business
// transaction), with c.Faults in front, plus GET /healthz and GET /stats. It runs the barrier's
// purge too, and blocks until ctx ends.
func RunParticipant(ctx context.Context, c ParticipantConfig) error {
	bar, err := participant.NewBarrier(participant.WithBarrierLogger(c.Log))
	if err != nil {
		return err
	}
	if err := bar.Migrate(ctx, c.Pool); err != nil {
		return err
	}
	var h http.Handler = bar.Handler(c.Pool, c.Do)
	if c.NoBarrier {
		c.Log.Warn("running WITHOUT the participant barrier: duplicates and empty rollbacks will corrupt the data")
		h = unguarded(c.Pool, c.Do)
	}
	h = c.Faults.Wrap(h)
	mux := http.NewServeMux()
	mux.Handle("POST /try", h)
	mux.Handle("POST /confirm", h)
	mux.Handle("POST /cancel", h)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { WriteJSON(w, 200, map[string]string{"status": "ok"}) })
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		out := map[string]any{"service": c.Name, "faults": c.Faults.Stats()}
		if c.Stats != nil {
			more, err := c.Stats(r.Context())
			if err != nil {
				WriteJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
				return
			}
			for k, v := range more {
				out[k] = v
			}
		}
		WriteJSON(w, http.StatusOK, out)
	})
	errc := make(chan error, 2)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { errc <- bar.Run(ctx, c.Pool) }()
	go func() { errc <- Serve(ctx, c.Listen, mux) }()
	c.Log.Info(c.Name+" service running", "faults", c.Faults.Enabled())
	err = <-errc
	cancel()
	return errors.Join(err, <-errc)
}

// FaultFlags are the fault injection flags of a participant service.
func FaultFlags(f *Faults, fs interface {
	Float64Var(p *float64, name string, value float64, usage string)
	DurationVar(p *time.Duration, name string, value time.Duration, usage string)
}) {
	fs.Float64Var(&f.RefuseRate, "refuse-rate", 0, "fraction of tries refused (HTTP 409) without running")
	fs.Float64Var(&f.FailRate, "fail-rate", 0, "fraction of requests answered HTTP 500 without running")
	fs.Float64Var(&f.LostRate, "lost-rate", 0, "fraction of requests run and committed, then answered HTTP 500 (the retry is a duplicate)")
	fs.DurationVar(&f.Delay, "delay", 0, "each request first waits a random time up to this")
	fs.Float64Var(&f.SlowRate, "slow-rate", 0, "fraction of requests that first wait -slow (past the coordinator's call timeout)")
	fs.DurationVar(&f.Slow, "slow", 3*time.Second, "the wait of a slow request")
}

// ParseSeed reads "key=n,key=n" (the initial rows of a participant's table).
func ParseSeed(s string) (map[string]int64, error) {
	out := map[string]int64{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		var n int64
		if _, err := fmt.Sscan(v, &n); !ok || k == "" || err != nil {
			return nil, fmt.Errorf("seed %q: want key=number", kv)
		}
		out[k] = n
	}
	return out, nil
}

// unguarded serves the wire protocol like [participant.Barrier.Handler] but without the barrier:
// every request runs Do.
func unguarded(pool *pgxpool.Pool, do func(ctx context.Context, tx pgx.Tx, req participant.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req participant.Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		err := pgx.BeginFunc(r.Context(), pool, func(tx pgx.Tx) error { return do(r.Context(), tx, req) })
		switch {
		case err == nil:
			WriteJSON(w, http.StatusOK, map[string]bool{"ok": true})
		case errors.Is(err, participant.ErrRefused):
			http.Error(w, err.Error(), participant.StatusRefused)
		case errors.Is(err, participant.ErrBadRequest):
			http.Error(w, err.Error(), http.StatusBadRequest)
		default:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
}
