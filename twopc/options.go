package twopc

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"time"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/lock"
)

// Option configures a [Coordinator].
type Option func(*options)

type options struct {
	core.Config
	prepareTimeout time.Duration
	resolveSpec    string
	resolveGrace   time.Duration
	phaseTwoConns  int
	hook           Hook
}

func defaultOptions() options {
	c := core.DefaultConfig("txkit_2pc_")
	c.Timeout = 30 * time.Second
	return options{Config: c, prepareTimeout: 10 * time.Second, resolveSpec: "@every 5s", resolveGrace: 15 * time.Second,
		phaseTwoConns: 2}
}

// WithSchema sets the PostgreSQL schema of the coordinator's tables (default: the connection's
// search_path). [Coordinator.Migrate] creates it. The schema also names this coordinator's
// prepared transactions in the participant databases (see [Coordinator.RegisterDB]).
func WithSchema(name string) Option { return func(o *options) { o.Schema = name } }

// WithTablePrefix sets the prefix of the table names (default "txkit_2pc_": txkit_2pc_global,
// txkit_2pc_branch), which keeps two-phase commits apart from tcc's and saga's tables.
func WithTablePrefix(p string) Option { return func(o *options) { o.Prefix = p } }

// WithLease sets how long a starter owns a decided transaction while it runs phase two (default
// 30s); after it the leader finishes phase two if the starter has not.
func WithLease(d time.Duration) Option { return func(o *options) { o.Lease = d } }

// WithBackoff sets the first retry delay after a failed commit or abort and its cap (defaults 1s
// and 5m); delays double, with jitter, computed by PostgreSQL.
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) { o.BackoffMin, o.BackoffMax = min, max }
}

// WithElector sets the election under which [Coordinator.Run] recovers. Required by Run only.
func WithElector(el *lock.Elector) Option { return func(o *options) { o.Elector = el } }

// WithLogger sets the logger (default: discard). Keys: gid, branch, op, token.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.Logger = l } }

// WithConcurrency bounds the prepares (commits, aborts) of one transaction run at once (default 8).
func WithConcurrency(n int) Option { return func(o *options) { o.Concurrency = n } }

// WithCallTimeout bounds each commit or abort call to a participant (default 10s); a call that
// times out is retried.
func WithCallTimeout(d time.Duration) Option { return func(o *options) { o.CallTimeout = d } }

// WithPrepareTimeout bounds phase one (default 10s): a participant that has not voted by then
// counts as a "no", and the transaction aborts. It must be shorter than the global timeout.
func WithPrepareTimeout(d time.Duration) Option { return func(o *options) { o.prepareTimeout = d } }

// WithDefaultTimeout sets the global timeout of transactions begun without [WithTimeout] (default
// 30s), counted from [Global.Commit]: a transaction still undecided after it (its starter
// vanished during phase one) is aborted by the leader — presumed abort.
func WithDefaultTimeout(d time.Duration) Option { return func(o *options) { o.Timeout = d } }

// WithHTTPClient sets the client of HTTP participants called by the recovery (default: that of a
// participant.HTTP without Client, which signs nothing and follows no redirect). A participant's
// barrier handler serves only signed calls unless built with participant.WithUnsignedRequests:
// give the client of [participant.NewSigningClient], the same one the branches' participant.HTTP
// values carry, since branches committed by this process use their own participant.HTTP's client.
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

// WithInDoubtResolution sets the cron spec of the leader's scan of pg_prepared_xacts in every
// registered database (default "@every 5s") and the grace a prepared transaction is left alone
// after it was prepared (default 15s). A prepared transaction the log does not know is rolled
// back once the grace has passed, so keep the grace above [WithPrepareTimeout]: a shorter one
// only aborts transactions whose phase one is slow (it never commits half of one).
func WithInDoubtResolution(spec string, grace time.Duration) Option {
	return func(o *options) { o.resolveSpec, o.resolveGrace = spec, grace }
}

// WithPhaseTwoConns sets the size of the pool each registered database gets for the phase two
// of the recovery and for the in-doubt resolver (default 2; see [Coordinator.RegisterDB]). The
// starter's own phase two runs on the connections its branches prepared on, so this pool serves
// only the leader's work and operators' [Coordinator.ResolveInDoubt]. Below 1 is an error wrapping
// [ErrInvalidOption].
func WithPhaseTwoConns(n int) Option { return func(o *options) { o.phaseTwoConns = n } }

// Phase is a point in [Global.Commit] where a [Hook] is called.
type Phase uint8

// The points a hook sees.
const (
	PhasePrepared Phase = iota + 1 // every branch voted yes; the decision is not yet written
	PhaseDecided                   // the decision (commit or abort) is written; phase two not begun
)

func (p Phase) String() string {
	switch p {
	case PhasePrepared:
		return "prepared"
	case PhaseDecided:
		return "decided"
	}
	return fmt.Sprintf("Phase(%d)", uint8(p))
}

// Hook is called by [Global.Commit] at each [Phase] with the transaction's gid. It exists for
// failure drills and tests: a hook that blocks (or kills the process) there shows what recovery
// does with a coordinator that died between the phases. An error it returns aborts the
// transaction at PhasePrepared and is returned; at PhaseDecided it is ignored.
type Hook func(ctx context.Context, gid string, p Phase) error

// WithHook sets the hook (default none).
func WithHook(h Hook) Option { return func(o *options) { o.hook = h } }

func (o options) validate() error {
	if err := o.Config.Validate(); err != nil {
		return fmt.Errorf("twopc: %w", mapErr(err))
	}
	switch {
	case o.prepareTimeout <= 0:
		return fmt.Errorf("twopc: prepare timeout %v: %w", o.prepareTimeout, ErrInvalidOption)
	case o.prepareTimeout >= o.Timeout:
		return fmt.Errorf("twopc: prepare timeout %v not below the global timeout %v: %w", o.prepareTimeout, o.Timeout, ErrInvalidOption)
	case o.resolveGrace < 0:
		return fmt.Errorf("twopc: in-doubt grace %v: %w", o.resolveGrace, ErrInvalidOption)
	case o.phaseTwoConns < 1 || o.phaseTwoConns > math.MaxInt32:
		return fmt.Errorf("twopc: phase-two connections %d: %w", o.phaseTwoConns, ErrInvalidOption)
	}
	return nil
}

// BeginOption configures one global transaction.
type BeginOption func(*beginOptions)

type beginOptions struct {
	gid     string
	timeout time.Duration
}

// WithGID sets the transaction's id (default: a new UUIDv7): at most 199 bytes of UTF-8 (less
// the length of the prepared transactions' names, see [Coordinator.RegisterDB]), with no
// backslash and no control character; [Coordinator.Begin] refuses anything else.
func WithGID(gid string) BeginOption { return func(o *beginOptions) { o.gid = gid } }

// WithTimeout sets the global timeout of this transaction (see [WithDefaultTimeout]).
func WithTimeout(d time.Duration) BeginOption { return func(o *beginOptions) { o.timeout = d } }
