package saga

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

type options struct {
	core.Config
	attempts int
}

func defaultOptions() options {
	c := core.DefaultConfig("txkit_saga_")
	c.Timeout = 5 * time.Minute
	return options{Config: c, attempts: 3}
}

// WithSchema sets the PostgreSQL schema of the coordinator's tables (default: the connection's
// search_path). [Coordinator.Migrate] creates it.
func WithSchema(name string) Option { return func(o *options) { o.Schema = name } }

// WithTablePrefix sets the prefix of the table names (default "txkit_saga_": txkit_saga_global,
// txkit_saga_branch). The default keeps sagas apart from tcc's tables, so the two coordinators
// may lead different elections without fencing each other out.
func WithTablePrefix(p string) Option { return func(o *options) { o.Prefix = p } }

// WithLease sets how long a starter owns a saga it drives (default 30s). A drive renews it once
// half of it has passed; a starter silent for longer is presumed gone and the leader carries the saga on
// (both driving at once is harmless — participants are idempotent — but wasteful). Keep it above
// [WithCallTimeout], so that one slow call does not outlast it.
func WithLease(d time.Duration) Option { return func(o *options) { o.Lease = d } }

// WithBackoff sets the delay before the first retry of a failed call and its cap (defaults 1s
// and 5m); delays double. In-process retries ([WithAttempts]) wait with it, and so does the
// leader between drives (with jitter, computed by PostgreSQL).
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) { o.BackoffMin, o.BackoffMax = min, max }
}

// WithElector sets the election under which [Coordinator.Run] recovers. Required by Run only.
func WithElector(el *lock.Elector) Option { return func(o *options) { o.Elector = el } }

// WithLogger sets the logger (default: discard). Keys: gid, step, op, token.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.Logger = l } }

// WithConcurrency bounds the actions (compensations) of one saga called at once (default 8).
// Only steps whose dependencies are done can run together: with the default sequential
// DependsOn, one runs at a time whatever n is.
func WithConcurrency(n int) Option { return func(o *options) { o.Concurrency = n } }

// WithAttempts sets how many times [Saga.Submit] calls an action or compensation that fails
// transiently (any error but a refusal) before it records the failure and leaves the saga to the
// leader, which retries it with backoff (default 3). The leader calls once per drive.
func WithAttempts(n int) Option { return func(o *options) { o.attempts = n } }

// WithCallTimeout bounds each participant call (default 10s). A call that times out is an
// unknown outcome: retried as an action; compensated if the saga is compensated.
func WithCallTimeout(d time.Duration) Option { return func(o *options) { o.CallTimeout = d } }

// WithDefaultTimeout sets the timeout of sagas begun without [WithTimeout] (default 5m).
func WithDefaultTimeout(d time.Duration) Option { return func(o *options) { o.Timeout = d } }

// WithHTTPClient sets the client of every call to an HTTP step, action or compensation, whether
// this process or the recovery makes it: a step is called at the URL it recorded, with this client
// (default: that of a participant.HTTP without Client, which signs nothing and follows no
// redirect). A participant's barrier handler serves only signed calls unless built with
// participant.WithUnsignedRequests: give the client of [participant.NewSigningClient].
func WithHTTPClient(c *http.Client) Option { return func(o *options) { o.Client = c } }

// WithRecovery sets the recovery's cron spec (default "@every 1s"), its claim batch size (100)
// and how many sagas it drives at once (16).
func WithRecovery(spec string, batch, concurrency int) Option {
	return func(o *options) { o.Schedule, o.Batch, o.RecoverConc = spec, batch, concurrency }
}

// WithRetention sets how long finished sagas are kept (default 7 days) and the cron spec of the
// job that deletes older ones (default "@every 1m"). The job runs on the leader.
func WithRetention(keep time.Duration, spec string) Option {
	return func(o *options) { o.Retention, o.RetentionSpec = keep, spec }
}

func (o options) validate() error {
	if err := o.Config.Validate(); err != nil {
		return fmt.Errorf("saga: %w", mapErr(err))
	}
	if o.attempts <= 0 {
		return fmt.Errorf("saga: attempts %d: %w", o.attempts, ErrInvalidOption)
	}
	return nil
}

// BeginOption configures one saga.
type BeginOption func(*beginOptions)

type beginOptions struct {
	gid     string
	timeout time.Duration
}

// WithGID sets the saga's id (default: a new UUIDv7).
func WithGID(gid string) BeginOption { return func(o *beginOptions) { o.gid = gid } }

// WithTimeout sets how long the saga may take to run its actions, counted from Submit: past it,
// a saga still running is compensated (by its starter, or by the leader when the starter is
// gone). Compensations are not bounded by it: they are retried until they succeed.
func WithTimeout(d time.Duration) BeginOption { return func(o *beginOptions) { o.timeout = d } }
