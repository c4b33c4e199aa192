package idempotency

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
)

// Option configures a [Store]. Options are applied in order by [New], which validates the result.
type Option func(*options)

type options struct {
	schema   string
	table    string
	retain   time.Duration
	log      *slog.Logger
	schedule string
	batch    int // keys one purge statement deletes: purgeBatch; tests set it (export_test.go)
	reg      prometheus.Registerer
}

func defaultOptions() options {
	return options{
		table:    "txkit_idempotency",
		retain:   7 * 24 * time.Hour,
		log:      slog.New(slog.DiscardHandler),
		schedule: "@every 1m",
		batch:    purgeBatch,
	}
}

// WithTable sets the PostgreSQL schema of the table (default: none, so the connection's
// search_path decides; [Store.Migrate] creates it if it does not exist) and the table's name
// (default "txkit_idempotency"; quoted, so used exactly as given, case included; at most
// [maxTableLen] bytes, so that the names derived from it fit PostgreSQL's 63-byte identifiers).
// An empty schema or table keeps that part as it was.
func WithTable(schema, table string) Option {
	return func(o *options) { o.schema, o.table = cmp.Or(schema, o.schema), cmp.Or(table, o.table) }
}

// WithRetention sets how long a key is kept after it is claimed (default 7 days; at least a
// microsecond) and the robfig/cron spec on which [Store.Run] purges expired keys (default
// "@every 1m"; five fields or a descriptor such as "@hourly"). A key is remembered for at least
// keep: it is purged some time after it expires, and until then it still counts as claimed. The
// expiry is computed by PostgreSQL (now() + keep, at the claiming transaction's start).
func WithRetention(keep time.Duration, spec string) Option {
	return func(o *options) { o.retain, o.schedule = keep, spec }
}

// WithLogger sets the logger (default: discard). The retention job logs what it deletes; the
// robfig/cron scheduler's own messages go to it at debug level and its errors at error level.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = obs.Logger(l)
		}
	}
}

// WithRegisterer registers the Store's txkit_idempotency_claims_total on reg (listed in
// docs/metrics.md; default: none, still counted). Stores on one reg share the series. [New] fails
// with an error wrapping [ErrInvalidOption] when the name is taken on reg by a metric of another
// kind or labels.
func WithRegisterer(reg prometheus.Registerer) Option { return func(o *options) { o.reg = reg } }

// purgeBatch is how many expired keys one purge statement deletes: each statement is short, so
// it never holds many row locks.
const purgeBatch = 1000

const (
	maxIdentLen = 63                             // PostgreSQL's NAMEDATALEN - 1
	indexSuffix = "_expires_at_idx"              // the expiry index is named <table>_expires_at_idx
	maxTableLen = maxIdentLen - len(indexSuffix) // 48 bytes
)

func (o options) validate() error {
	if o.schema != "" {
		if err := pgutil.CheckText(o.schema, maxIdentLen); err != nil {
			return fmt.Errorf("idempotency: schema %q: %w: %w", o.schema, err, ErrInvalidOption)
		}
	}
	if err := pgutil.CheckText(o.table, maxTableLen); err != nil {
		return fmt.Errorf("idempotency: table %q: %w: %w", o.table, err, ErrInvalidOption)
	}
	if o.retain < time.Microsecond {
		return fmt.Errorf("idempotency: retention %v is below 1µs: %w", o.retain, ErrInvalidOption)
	}
	if o.batch < 1 {
		return fmt.Errorf("idempotency: purge batch %d is below 1: %w", o.batch, ErrInvalidOption)
	}
	if _, err := cron.ParseStandard(o.schedule); err != nil {
		return fmt.Errorf("idempotency: purge schedule %q: %w: %w", o.schedule, err, ErrInvalidOption)
	}
	return nil
}
