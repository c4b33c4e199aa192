package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/lock"
)

// LogOption configures a [Log].
type LogOption func(*options)

type options struct {
	schema      string
	prefix      string
	lease       time.Duration
	backoffMin  time.Duration
	backoffMax  time.Duration
	partitions  int           // recovery partitions (WithPartitions, partition.go)
	groupWindow time.Duration // WithGroupCommit (groupcommit.go); 0: off
	deferFinish bool          // WithDeferredFinish (deferred.go)
}

func defaultOptions() options {
	return options{prefix: "txkit_", lease: 30 * time.Second, backoffMin: time.Second, backoffMax: 5 * time.Minute, partitions: 1}
}

// WithSchema sets the PostgreSQL schema of the tables (default: none, so the connection's
// search_path decides). [Log.Migrate] creates it when it does not exist.
func WithSchema(name string) LogOption { return func(o *options) { o.schema = name } }

// WithTablePrefix sets the prefix of the table names (default "txkit_": txkit_global, txkit_branch).
func WithTablePrefix(p string) LogOption { return func(o *options) { o.prefix = p } }

// WithLease sets how long a starter owns a transaction it is driving (default 30s): the leader
// leaves a confirming or cancelling transaction alone until its lease has passed.
func WithLease(d time.Duration) LogOption { return func(o *options) { o.lease = d } }

// WithBackoff sets the retry delay after the first failed attempt (min) and its cap (max); the
// n-th failure waits d/2 + random()·d/2, d = min(max, min·2^(n-1)). Defaults 1s and 5m.
func WithBackoff(min, max time.Duration) LogOption {
	return func(o *options) { o.backoffMin, o.backoffMax = min, max }
}

func (o options) validate() error {
	if o.schema != "" {
		if err := checkName(o.schema); err != nil {
			return fmt.Errorf("core: schema %q: %w: %w", o.schema, err, ErrInvalidOption)
		}
	}
	if err := checkName(o.prefix + "global_due"); err != nil {
		return fmt.Errorf("core: table prefix %q: %w: %w", o.prefix, err, ErrInvalidOption)
	}
	switch {
	case o.lease <= 0:
		return fmt.Errorf("core: lease %v: %w", o.lease, ErrInvalidOption)
	case o.backoffMin <= 0 || o.backoffMax < o.backoffMin:
		return fmt.Errorf("core: backoff %v..%v: %w", o.backoffMin, o.backoffMax, ErrInvalidOption)
	case o.groupWindow < 0:
		return fmt.Errorf("core: group commit window %v: %w", o.groupWindow, ErrInvalidOption)
	case o.partitions < 1 || o.partitions > MaxPartitions:
		return fmt.Errorf("core: %d partitions: not in 1..%d: %w", o.partitions, MaxPartitions, ErrInvalidOption)
	}
	return nil
}

// RecoverOption configures a [Recoverer].
type RecoverOption func(*recoverOptions)

type recoverOptions struct {
	schedule       string
	batch          int
	concurrency    int
	retention      time.Duration
	retentionEvery string
	retentionBatch int
	log            *slog.Logger
	jobs           []leaderJob
	metrics        *metrics     // the coordinator's (NewBase); nil: unregistered ones of the recoverer's own
	tr             trace.Tracer // the coordinator's (NewBase); nil: the global provider's
}

// leaderJob is extra work the leader runs on a schedule (WithLeaderJob).
type leaderJob struct {
	name, spec string
	fn         func(ctx context.Context, tok lock.Token) error
}

func defaultRecoverOptions() recoverOptions {
	return recoverOptions{
		schedule: "@every 1s", batch: 100, concurrency: 16,
		retention: 7 * 24 * time.Hour, retentionEvery: "@every 1m", retentionBatch: 1000,
		log: slog.New(slog.DiscardHandler),
	}
}

// WithSchedule sets the cron spec of the recovery tick (default "@every 1s").
func WithSchedule(spec string) RecoverOption { return func(o *recoverOptions) { o.schedule = spec } }

// WithBatchSize sets how many due transactions one claim takes (default 100).
func WithBatchSize(n int) RecoverOption { return func(o *recoverOptions) { o.batch = n } }

// WithConcurrency sets how many claimed transactions are driven at once (default 16).
func WithConcurrency(n int) RecoverOption { return func(o *recoverOptions) { o.concurrency = n } }

// WithRetention sets how long finished transactions are kept (default 7 days) and the cron spec
// of the job that deletes older ones (default "@every 1m").
func WithRetention(keep time.Duration, spec string) RecoverOption {
	return func(o *recoverOptions) { o.retention, o.retentionEvery = keep, spec }
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) RecoverOption {
	return func(o *recoverOptions) { o.log = obs.Logger(l) }
}

// withMetrics makes the recoverer count on m (a coordinator's metrics).
func withMetrics(m *metrics) RecoverOption { return func(o *recoverOptions) { o.metrics = m } }

// withTracer makes the recoverer trace with tr (a coordinator's tracer).
func withTracer(tr trace.Tracer) RecoverOption { return func(o *recoverOptions) { o.tr = tr } }

// WithLeaderJob adds a job the leader runs on the cron spec while it leads, with the leadership's
// ctx (cancelled when it ends) and token: twopc resolves in-doubt prepared transactions this way.
// An error is logged and the job runs again at its next time; one wrapping lock.ErrFenced makes
// the recoverer step down, as a fenced claim does.
func WithLeaderJob(name, spec string, fn func(ctx context.Context, tok lock.Token) error) RecoverOption {
	return func(o *recoverOptions) { o.jobs = append(o.jobs, leaderJob{name: name, spec: spec, fn: fn}) }
}

func (o recoverOptions) validate() error {
	for _, s := range []string{o.schedule, o.retentionEvery} {
		if err := pgutil.CheckCron(s); err != nil {
			return fmt.Errorf("core: schedule %q: %w: %w", s, err, ErrInvalidOption)
		}
	}
	switch {
	case o.batch <= 0:
		return fmt.Errorf("core: batch size %d: %w", o.batch, ErrInvalidOption)
	case o.concurrency <= 0:
		return fmt.Errorf("core: concurrency %d: %w", o.concurrency, ErrInvalidOption)
	case o.retention <= 0:
		return fmt.Errorf("core: retention %v: %w", o.retention, ErrInvalidOption)
	case o.log == nil:
		return fmt.Errorf("core: nil logger: %w", ErrInvalidOption)
	}
	return nil
}

// checkName accepts what PostgreSQL keeps unchanged as a quoted identifier.
func checkName(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > 63:
		return fmt.Errorf("%d bytes, more than 63", len(s))
	case !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0:
		return errors.New("not valid UTF-8 without NUL")
	}
	return nil
}
