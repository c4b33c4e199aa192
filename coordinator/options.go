package coordinator

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/lock"
)

// Option configures a coordinator: tcc.New, saga.New, twopc.New and threepc.New take these, and
// their own (saga.WithAttempts, twopc.WithPrepareTimeout, threepc.WithTimeouts, ...), which another protocol's New refuses with
// an error wrapping [ErrInvalidOption]. New validates them all.
type Option = core.Option

// WithSchema sets the PostgreSQL schema of the coordinator's tables (default: the connection's
// search_path); the coordinator's Migrate creates it. twopc's schema also names its prepared
// transactions in the participant databases. The tables' names are fixed per protocol: "txkit_"
// (txkit_global, txkit_branch) for tcc, "txkit_saga_" for saga, "txkit_2pc_" for twopc and
// "txkit_3pc_" for threepc, which keeps the coordinators' logs apart, so that they may lead
// different elections without fencing each other out.
func WithSchema(name string) Option { return func(c *core.Config) { c.Schema = name } }

// WithLease sets how long a starter owns a transaction it drives (default 30s): after it, the
// leader finishes the transaction if the starter has not. A saga's drive renews it once half of it
// has passed: keep it above the call timeout of [WithRetry], so that one slow call does not outlast it (both
// driving at once is harmless — participants are idempotent — but wasteful).
func WithLease(d time.Duration) Option { return func(c *core.Config) { c.Lease = d } }

// WithRetry sets how participant calls are bounded and retried, for participants slower or
// faster than the defaults: callTimeout bounds each call (default 10s; a branch's own Timeout,
// [Branch] and saga.Step, overrides it for that branch), base is the delay before
// the first retry of a failed call and maxDelay its cap (defaults 1s and 5m). Delays double, with
// jitter, computed by PostgreSQL when the leader retries (and without, between a saga's
// in-process attempts, saga.WithAttempts). A call that times out is an unknown outcome: a try is
// followed by its cancel, an action retried (and compensated if the saga is), a confirm, cancel,
// commit or abort retried. A callTimeout or base not above 0, or a maxDelay below base, is an
// error wrapping [ErrInvalidOption].
func WithRetry(callTimeout, base, maxDelay time.Duration) Option {
	return func(c *core.Config) { c.CallTimeout, c.BackoffMin, c.BackoffMax = callTimeout, base, maxDelay }
}

// WithElector sets the election under which the coordinator's Run recovers. Required by Run only;
// New refuses a nil one with an error wrapping [ErrInvalidOption].
func WithElector(el lock.Elector) Option { return func(c *core.Config) { c.SetElector(el) } }

// WithLogger sets the logger (default: discard). Keys: txkit.gid, txkit.branch (step), txkit.op, txkit.token
// (txkit's keys begin with "txkit.": docs/tracing.md, "Log keys").
func WithLogger(l *slog.Logger) Option { return func(c *core.Config) { c.Logger = obs.Logger(l) } }

// WithConcurrency bounds the branch ops of one transaction called at once (default 8): confirms
// or cancels (tcc), prepares, commits or aborts (twopc), actions or compensations (saga, where only
// steps whose dependencies are done can run together).
func WithConcurrency(n int) Option { return func(c *core.Config) { c.Concurrency = n } }

// WithDefaultTimeout sets the timeout of transactions begun without [WithTimeout]: 1m for tcc, 5m
// for saga, 30s for twopc, 1m for threepc by default.
func WithDefaultTimeout(d time.Duration) Option { return func(c *core.Config) { c.Timeout = d } }

// WithHTTPClient sets the client of every call to a branch's participant.HTTP — its first op
// (a tcc Try, a twopc prepare, ...) as well as the confirms, cancels, commits and the recovery's
// (default: that of a participant.HTTP without Client, which signs nothing and follows no
// redirect). Leave the branches' participant.HTTP.Client nil: a branch with another client is
// refused with an error wrapping [ErrInvalidBranch], since the rest of its calls would go
// through this one. A participant's barrier handler serves only signed calls unless built with
// barrier.WithUnsignedRequests: give this the client of participant.NewSigningClient.
func WithHTTPClient(cl *http.Client) Option { return func(c *core.Config) { c.Client = cl } }

// WithRecovery sets the recovery's cron spec (default "@every 1s"), its claim batch size (100)
// and how many transactions it drives at once (16).
func WithRecovery(spec string, batch, concurrency int) Option {
	return func(c *core.Config) { c.Schedule, c.Batch, c.RecoverConc = spec, batch, concurrency }
}

// WithRetention sets how long finished transactions are kept (default 7 days) and the cron spec of
// the job that deletes older ones (default "@every 1m"). The job runs on the leader.
func WithRetention(keep time.Duration, spec string) Option {
	return func(c *core.Config) { c.Retention, c.RetentionSpec = keep, spec }
}

// WithTelemetry sets where the coordinator's metrics and traces go. reg registers its Prometheus
// metrics (txkit_coordinator_*, txkit_recovery_*, labelled by protocol; docs/metrics.md), for
// dashboards and alerts (default: none; still counted); coordinators of one process may share it,
// and New fails with an error wrapping [ErrInvalidOption] when a name is taken on reg with other
// labels or help. tp is the OpenTelemetry tracer provider (default: the global one): Begin, each
// branch call and the leader's recovery run under spans; a recovery drive joins the trace of the
// process that began the transaction (docs/tracing.md). A nil reg or tp keeps that part as it was.
func WithTelemetry(reg prometheus.Registerer, tp trace.TracerProvider) Option {
	return func(c *core.Config) {
		if reg != nil {
			c.Registerer = reg
		}
		if tp != nil {
			c.TracerProvider = tp
		}
	}
}

// WithGroupCommit sets how long a write of the coordinator's log may wait for a flush in flight
// to share a PostgreSQL round trip and commit with the writes of concurrent transactions
// (recording a transaction, a tcc branch, a decision, a clean finish, a workflow's step): default 2ms; 0 turns
// grouping off; above 1s New returns an error wrapping [ErrInvalidOption]. A write that finds no
// flush in flight is sent at once, so a lone transaction never waits. The price of grouping: a
// write that meets a flush waits for it (up to window), and a caller whose ctx ends while its
// batch is in flight gets an error wrapping [ErrInDoubt]. docs/coordinators.md ("Group commit")
// has the mechanism and figures.
func WithGroupCommit(window time.Duration) Option {
	return func(c *core.Config) { c.GroupCommit = window }
}

// WithDeferredFinish sets whether a starter's clean finish after a decision (confirmed, cancelled,
// committed, aborted, compensated) is a background write (default true): Commit, Submit or
// Rollback return once every last-phase call succeeded, and the finish rides on the log's next
// write (at most 100ms later), so that it costs no commit of its own. A saga's success is its
// decision and is written before Submit returns. The price:
// other processes see the transaction in its last running status until the write lands (Status
// in this process waits for it); if the process dies first, the leader finishes it after the
// lease, calling the last phase again (participants' barriers make those calls no-ops). Call
// [Base.Flush] before exiting. WithDeferredFinish(false) writes the finish before returning.
// docs/coordinators.md ("Deferred finish") has the details and figures.
func WithDeferredFinish(on bool) Option {
	return func(c *core.Config) { c.DeferredFinish = on }
}

// BeginOption configures one transaction (saga) at its coordinator's Begin.
type BeginOption = core.BeginOption

// WithGID sets the transaction's id (default: a new UUIDv7). Begin refuses, with an error
// wrapping [ErrInvalidOption], a gid that is empty, longer than 199 bytes, not valid UTF-8, or
// that holds a control character (NUL, newline, escape), a format character (a bidirectional
// override such as U+202E, a zero-width character) or a line or paragraph separator; twopc also
// refuses a backslash.
func WithGID(gid string) BeginOption { return func(c *core.BeginConfig) { c.GID = gid } }

// WithTimeout sets the transaction's timeout (default [WithDefaultTimeout]): a tcc transaction
// still trying after it (neither committed nor rolled back) is cancelled by the leader; a saga
// still running its actions after it, counted from Submit, is compensated (compensations are not
// bounded: they are retried until they succeed); a two- or three-phase commit still undecided
// after it, counted from Commit, is aborted.
func WithTimeout(d time.Duration) BeginOption { return func(c *core.BeginConfig) { c.Timeout = d } }
