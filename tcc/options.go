package tcc

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/lock"
)

// Option configures a [Coordinator].
type Option func(*options)

type options struct{ core.Config }

func defaultOptions() options { return options{core.DefaultConfig("txkit_")} }

// WithSchema sets the PostgreSQL schema of the coordinator's tables (default: the connection's
// search_path). [Coordinator.Migrate] creates it.
func WithSchema(name string) Option { return func(o *options) { o.Schema = name } }

// WithTablePrefix sets the prefix of the table names (default "txkit_").
func WithTablePrefix(p string) Option { return func(o *options) { o.Prefix = p } }

// WithLease sets how long a starter owns a transaction while it confirms or cancels (default
// 30s); after it the leader finishes the transaction if the starter has not.
func WithLease(d time.Duration) Option { return func(o *options) { o.Lease = d } }

// WithBackoff sets the first retry delay after a failed confirm or cancel and its cap (defaults
// 1s and 5m); delays double, with jitter, computed by PostgreSQL.
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) { o.BackoffMin, o.BackoffMax = min, max }
}

// WithElector sets the election under which [Coordinator.Run] recovers. Required by Run only.
func WithElector(el *lock.Elector) Option { return func(o *options) { o.Elector = el } }

// WithLogger sets the logger (default: discard). Keys: gid, branch, op, token.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.Logger = l } }

// WithConcurrency bounds the confirms (cancels) of one transaction called at once (default 8).
func WithConcurrency(n int) Option { return func(o *options) { o.Concurrency = n } }

// WithCallTimeout bounds each participant call (default 10s). A call that times out is an
// unknown outcome: a try is followed by its cancel, a confirm or cancel is retried.
func WithCallTimeout(d time.Duration) Option { return func(o *options) { o.CallTimeout = d } }

// WithDefaultTimeout sets the global timeout of transactions begun without [WithTimeout]
// (default 1m).
func WithDefaultTimeout(d time.Duration) Option { return func(o *options) { o.Timeout = d } }

// WithHTTPClient sets the client of the confirms and cancels of HTTP participants, whether this
// process or the recovery calls them (default: that of a participant.HTTP without Client, which
// signs nothing and follows no redirect); a Try uses its branch's own participant.HTTP's client.
// A participant's barrier handler serves only signed calls unless built with
// participant.WithUnsignedRequests: give both the client of [participant.NewSigningClient].
func WithHTTPClient(c *http.Client) Option { return func(o *options) { o.Client = c } }

// WithRecovery sets the recovery's cron spec (default "@every 1s"), its claim batch size (100)
// and how many transactions it drives at once (16).
func WithRecovery(spec string, batch, concurrency int) Option {
	return func(o *options) { o.Schedule, o.Batch, o.RecoverConc = spec, batch, concurrency }
}

// WithRetention sets how long finished transactions are kept (default 7 days) and the cron spec
// of the job that deletes older ones (default "@every 1m"). The job runs on the leader.
func WithRetention(keep time.Duration, spec string) Option {
	return func(o *options) { o.Retention, o.RetentionSpec = keep, spec }
}

func (o options) validate() error {
	if err := o.Config.Validate(); err != nil {
		return fmt.Errorf("tcc: %w", mapErr(err))
	}
	return nil
}

// BeginOption configures one global transaction.
type BeginOption func(*beginOptions)

type beginOptions struct {
	gid     string
	timeout time.Duration
}

// WithGID sets the transaction's id (default: a new UUIDv7).
func WithGID(gid string) BeginOption { return func(o *beginOptions) { o.gid = gid } }

// WithTimeout sets the global timeout: a transaction still trying after it (neither committed
// nor rolled back) is cancelled by the leader.
func WithTimeout(d time.Duration) BeginOption { return func(o *beginOptions) { o.timeout = d } }
