package coordinator

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/lock"
)

// Option configures a coordinator: tcc.New, saga.New, twopc.New and threepc.New take these, and
// their own (saga.WithAttempts, twopc.WithPrepareTimeout, threepc.WithPreCommitTimeout, ...), which another protocol's New refuses with
// an error wrapping [ErrInvalidOption]. New validates them all.
type Option = core.Option

// WithSchema sets the PostgreSQL schema of the coordinator's tables (default: the connection's
// search_path); the coordinator's Migrate creates it. twopc's schema also names its prepared
// transactions in the participant databases.
func WithSchema(name string) Option { return func(c *core.Config) { c.Schema = name } }

// WithTablePrefix sets the prefix of the table names: "txkit_" (txkit_global, txkit_branch) for
// tcc, "txkit_saga_" for saga, "txkit_2pc_" for twopc and "txkit_3pc_" for threepc by default,
// which keeps the coordinators' logs apart, so that they may lead different elections without fencing each other out.
func WithTablePrefix(p string) Option { return func(c *core.Config) { c.Prefix = p } }

// WithLease sets how long a starter owns a transaction it drives (default 30s): after it, the
// leader finishes the transaction if the starter has not. A saga's drive renews it once half of it
// has passed: keep it above [WithCallTimeout], so that one slow call does not outlast it (both
// driving at once is harmless — participants are idempotent — but wasteful).
func WithLease(d time.Duration) Option { return func(c *core.Config) { c.Lease = d } }

// WithBackoff sets the delay before the first retry of a failed call and its cap (defaults 1s and
// 5m); delays double, with jitter, computed by PostgreSQL when the leader retries (and without,
// between a saga's in-process attempts, saga.WithAttempts).
func WithBackoff(min, max time.Duration) Option {
	return func(c *core.Config) { c.BackoffMin, c.BackoffMax = min, max }
}

// WithElector sets the election under which the coordinator's Run recovers. Required by Run only;
// New refuses a nil one with an error wrapping [ErrInvalidOption].
func WithElector(el lock.Elector) Option { return func(c *core.Config) { c.SetElector(el) } }

// WithLogger sets the logger (default: discard). Keys: gid, branch (step), op, token.
func WithLogger(l *slog.Logger) Option { return func(c *core.Config) { c.Logger = l } }

// WithConcurrency bounds the branch ops of one transaction called at once (default 8): confirms
// or cancels (tcc), prepares, commits or aborts (twopc), actions or compensations (saga, where only
// steps whose dependencies are done can run together).
func WithConcurrency(n int) Option { return func(c *core.Config) { c.Concurrency = n } }

// WithCallTimeout bounds each participant call (default 10s). A call that times out is an unknown
// outcome: a try is followed by its cancel, an action retried (and compensated if the saga is),
// a confirm, cancel, commit or abort retried.
func WithCallTimeout(d time.Duration) Option { return func(c *core.Config) { c.CallTimeout = d } }

// WithDefaultTimeout sets the timeout of transactions begun without [WithTimeout]: 1m for tcc, 5m
// for saga, 30s for twopc, 1m for threepc by default.
func WithDefaultTimeout(d time.Duration) Option { return func(c *core.Config) { c.Timeout = d } }

// WithHTTPClient sets the client of the calls to HTTP participants made from what the log
// records — the recovery's, a saga's every call, the confirms and cancels of tcc, the phase two
// of twopc and threepc's DoCommit and aborts — while a tcc Try, a twopc prepare or a threepc
// CanCommit or PreCommit uses its branch's own participant.HTTP's client
// (default: that of a participant.HTTP without Client, which signs nothing and follows no
// redirect). A participant's barrier handler serves only signed calls unless built with
// barrier.WithUnsignedRequests: give it, and the branches' participant.HTTP, the client of
// participant.NewSigningClient.
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

// WithRegisterer registers the coordinator's Prometheus metrics on reg (default: none registered,
// still counted; never the default registry unless given). New fails with an error wrapping
// [ErrInvalidOption] when a metric's name is taken on reg by a collector with other labels or
// help. Coordinators of one process given the same reg share the series, told apart by the label
// protocol (tcc, saga, 2pc, 3pc):
//
//   - txkit_coordinator_transactions_begun_total{protocol}: transactions this process recorded (Begin;
//     also those twopc's in-doubt resolver records to roll back);
//   - txkit_coordinator_transactions_finished_total{protocol,outcome}: transactions whose final status this
//     process recorded, as starter or leader; outcome committed (confirmed, succeeded) or aborted
//     (cancelled, compensated);
//   - txkit_coordinator_branch_calls_total{protocol,op,result}: branch calls, op the participant op (try,
//     confirm, cancel, action, compensate, prepare, commit, abort, cancommit, precommit, docommit),
//     result ok, refused (wrapping participant.ErrRefused) or error;
//   - txkit_coordinator_phase_seconds{protocol,phase}: histogram of one branch call's duration, phase the op;
//   - txkit_recovery_backlog{protocol}: unfinished transactions due for recovery, and
//     txkit_recovery_oldest_unfinished_seconds{protocol}: the oldest unfinished one's age — gauges set by
//     the leader (Run) at each recovery pass with one query, removed when it steps down;
//   - txkit_recovery_attempts_total{protocol,result}: transactions the leader drove, result ok or error
//     (rescheduled with backoff);
//   - txkit_recovery_timed_out_total{protocol}: trying transactions the leader moved to cancelling at their
//     timeout;
//   - txkit_leader_partitions_unled{resource}, with [WithPartitions] only: the recovery partitions whose
//     election has no leader, as this instance sees them (docs/metrics.md).
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(c *core.Config) { c.Registerer = reg }
}

// WithTracerProvider sets where the coordinator's tracer ("github.com/txkit/txkit/<package>")
// comes from (default: the application's global provider, otel.GetTracerProvider). Spans:
//
//   - "<protocol> begin" (protocol tcc, saga, 2pc, 3pc) around the recording of a transaction,
//     whose trace context is stored with it (column trace_context of the global table);
//   - "<protocol> <op>" (client) around each branch call, op the participant op (try, confirm,
//     action, prepare, precommit, ...), attributes txkit.gid, txkit.branch, txkit.op; a failed
//     call records its error and status Error;
//   - on the leader (Run), "recovery pass" around each pass, and "recovery drive" around each
//     transaction it drives: a CHILD of the context stored with the transaction — so the drive and
//     its branch calls join the trace of the process that began it, even one that died — with a
//     link to the pass's span.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *core.Config) { c.TracerProvider = tp }
}

// WithGroupCommit makes the coordinator's log group the writes of the transactions it runs at
// the same time (default 0: off) — recording a transaction, a tcc branch, a decision, a clean
// finish — into one PostgreSQL round trip and transaction, as a database's group commit shares
// its WAL flushes. A write that finds no other in flight is sent at once, alone, with the same
// statement as without the option: a lone transaction waits for no partner. A write arriving
// while another is being sent waits for it to end, then goes in one batch with the writes that
// queued meanwhile — but never waits longer than window: then it sends the queue itself. Each
// transaction still gets its own outcome: a batch's statements keep each write's condition (the
// gid not taken, the status expected), and a batch PostgreSQL refuses (one bad row) is made again
// one write at a time. Each caller returns when its own ctx ends; one whose write was in a batch
// then, or whose batch lost its connection, gets an error wrapping [ErrInDoubt]. A batch is
// bounded by its writers' latest deadline, and by the lease when one has none. A leader's fenced
// writes and partial records are not grouped. A window outside 0..1s is refused by New with an
// error wrapping [ErrInvalidOption].
// docs/coordinators.md ("Group commit") has the figures.
func WithGroupCommit(window time.Duration) Option {
	return func(c *core.Config) { c.GroupCommit = window }
}

// WithDeferredFinish makes a starter's clean finish a background write: once every confirm
// (tcc, 2pc, 3pc), action (saga) or cancel, compensation or rollback has succeeded, Commit,
// Submit or Rollback return at once, and the write that marks the transaction finished — which
// nothing after it waits for — follows in the background, sharing a batch with the others when
// [WithGroupCommit] is on too. The caller's latency loses one PostgreSQL commit. Until the write
// lands, [Shell.Status] reports the transaction confirming (running, cancelling…); if the process
// dies first, the leader finishes it once the starter's lease has passed, calling the last phase
// again — the participants' barrier turns each call into a no-op, and a COMMIT PREPARED already
// made is found done — so nothing is lost or applied twice. A write that fails is logged and left
// to the leader the same way. [Shell.Flush] waits for the writes deferred so far (call it before
// exiting). Off by default. docs/coordinators.md ("Deferred finish") has the figures.
func WithDeferredFinish() Option {
	return func(c *core.Config) { c.DeferredFinish = true }
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
