package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/participant"
)

// Config is what every coordinator built on the core (tcc, saga, twopc, threepc) is configured with: the
// options of package coordinator ([Option]) set its fields, and a protocol's own options set Own.
type Config struct {
	Schema, Prefix         string        // where the log's tables live (WithSchema; the prefix is the protocol's)
	Lease                  time.Duration // a starter's ownership of a transaction it drives
	BackoffMin, BackoffMax time.Duration // retry delays, computed by PostgreSQL
	Elector                lock.Elector  // the election Run recovers under
	Logger                 *slog.Logger
	Concurrency            int           // branch ops of one transaction called at once
	CallTimeout            time.Duration // each participant call
	Timeout                time.Duration // default global timeout
	Client                 *http.Client  // every call of an HTTP participant (Participants.Target refuses another)
	Schedule               string        // recovery tick (cron spec)
	Batch, RecoverConc     int           // recovery claim size and drives at once
	Retention              time.Duration // how long finished transactions are kept
	RetentionSpec          string        // cron spec of the retention job
	// Registerer is where [NewBase] registers the coordinator's metrics (WithTelemetry); nil
	// registers none (they are still counted).
	Registerer prometheus.Registerer
	// TracerProvider is where the coordinator's tracer comes from (WithTelemetry); nil: the
	// application's global provider.
	TracerProvider trace.TracerProvider
	// GroupCommit is the log's group commit window (WithGroupCommit, see [WithGroupCommit]); 0: off;
	// [DefaultGroupCommitWindow] by default.
	GroupCommit time.Duration
	// DeferredFinish makes a starter's clean finish a background write (WithDeferredFinish, see
	// [WithDeferredFinish]); on by default.
	DeferredFinish bool
	// Partitions splits the recovery into partitions led separately (WithPartitions, see
	// partition.go); the zero value is one partition, led under Elector.
	Partitions Partitioning
	// PhaseHook is called between the phases of a two- or three-phase Commit (see [WithPhaseHook]);
	// nil: never. Only tests and drills set it.
	PhaseHook PhaseHook
	// Own points to the protocol's own settings (nil for a protocol without any), which its
	// options ([OwnOption]) set.
	Own any

	misfits    []string // protocol options given to another protocol's coordinator
	nilElector bool     // WithElector(nil)
}

// SetElector sets Elector; a nil one is refused by [Config.Validate] (a Run without an election is
// refused by Run itself).
func (c *Config) SetElector(el lock.Elector) { c.Elector, c.nilElector = el, el == nil }

// Option sets a coordinator's [Config]. Package coordinator offers the options every protocol
// takes; a protocol's own options are built with [OwnOption].
type Option func(*Config)

// OwnOption returns the option called name that sets a protocol's own settings S through set.
// Given to the coordinator of another protocol (whose Config.Own is not an *S), it is refused by
// [NewBase] with an error wrapping [ErrInvalidOption] naming it.
func OwnOption[S any](name string, set func(*S)) Option {
	return func(c *Config) {
		if s, ok := c.Own.(*S); ok {
			set(s)
			return
		}
		c.misfits = append(c.misfits, name)
	}
}

// DefaultGroupCommitWindow is a coordinator's group commit window unless WithGroupCommit sets
// another: a lone write never waits for it (groupcommit.go).
const DefaultGroupCommitWindow = 2 * time.Millisecond

// DefaultConfig returns the defaults shared by the coordinators; prefix names their tables.
func DefaultConfig(prefix string) Config {
	return Config{
		Prefix: prefix, Lease: 30 * time.Second, BackoffMin: time.Second, BackoffMax: 5 * time.Minute,
		Logger: slog.New(slog.DiscardHandler), Concurrency: 8, CallTimeout: 10 * time.Second, Timeout: time.Minute,
		Schedule: "@every 1s", Batch: 100, RecoverConc: 16, Retention: 7 * 24 * time.Hour, RetentionSpec: "@every 1m",
		GroupCommit: DefaultGroupCommitWindow, DeferredFinish: true,
	}
}

// Validate returns an error wrapping [ErrInvalidOption] naming the first unusable field.
func (c Config) Validate() error {
	switch {
	case len(c.misfits) > 0:
		return fmt.Errorf("option %s is not for this coordinator: %w", strings.Join(c.misfits, ", "), ErrInvalidOption)
	case c.nilElector:
		return fmt.Errorf("nil elector: %w", ErrInvalidOption)
	case c.Logger == nil:
		return fmt.Errorf("nil logger: %w", ErrInvalidOption)
	case c.Concurrency <= 0:
		return fmt.Errorf("concurrency %d: %w", c.Concurrency, ErrInvalidOption)
	case c.CallTimeout <= 0:
		return fmt.Errorf("call timeout %v: %w", c.CallTimeout, ErrInvalidOption)
	case c.Timeout <= 0:
		return fmt.Errorf("default timeout %v: %w", c.Timeout, ErrInvalidOption)
	case c.GroupCommit < 0 || c.GroupCommit > MaxGroupCommitWindow:
		return fmt.Errorf("group commit window %v: not in 0..%v: %w", c.GroupCommit, MaxGroupCommitWindow, ErrInvalidOption)
	}
	return c.Partitions.validate()
}

// Base is the part every coordinator shares: its log, its participant registry, its
// configuration, its counters, the guard against two Runs, and the calls of branch ops. A
// coordinator holds one and exposes Migrate, Register, Status, Stats and Run through one-line
// methods of its own (with its own docs); the errors they return start with the coordinator's
// name.
//
// Base is safe for concurrent use by multiple goroutines.
type Base struct {
	Log   *Log
	Parts *Participants
	Cfg   Config
	shard atomic.Pointer[shardID] // nil: the log is no shard (SetShards, shard.go)
	// Failures and Violations count failed branch ops and refusals that break the protocol
	// ([Stats]); the coordinator adds to them.
	Failures, Violations atomic.Int64
	name                 string // "tcc", "saga", "twopc": the prefix of the errors
	kind                 Kind
	running              atomic.Bool
	metrics              *metrics
	m                    *kindMetrics            // the series of kind, also the Log's
	tr                   trace.Tracer            // "github.com/txkit/txkit/<name>", also the Log's
	callSpan             []trace.SpanStartOption // a branch call's span: a client's
	spanNames            [opCount]string         // a branch call's span, by op (spanName)
	syncStandbys         *prometheus.GaugeVec    // replication.go
}

// Stats counts what a coordinator of this process saw since it was built; every coordinator
// returns this one type (coordinator.Stats), and a field its protocol does not count stays zero.
type Stats struct {
	// Committed counts the transactions this process committed, phase two done (twopc, threepc).
	Committed int64
	// Aborted counts the transactions this process aborted (twopc; threepc: at CanCommit, at
	// PreCommit, or found aborted).
	Aborted int64
	// Failures counts failed branch calls other than refused tries, actions and votes (every
	// coordinator); they are retried.
	Failures int64
	// Violations counts refusals of ops that must succeed eventually (a confirm, cancel,
	// compensation, commit or abort): a participant broke the protocol (every coordinator). They
	// are retried.
	Violations int64
	// Resolved counts in-doubt prepared transactions resolved from pg_prepared_xacts (twopc).
	Resolved int64
	// AgentAborts counts undecided transactions whose abort was recorded for a 3PC agent that
	// asked (threepc's Decide).
	AgentAborts int64
}

// Protocol is what a coordinator package tells [NewBase] about itself.
type Protocol struct {
	Name    string        // prefixes its errors: "tcc", "saga", "twopc"
	Kind    Kind          // of the transactions it logs
	Prefix  string        // default table prefix
	Timeout time.Duration // default global timeout
	Own     Settings      // its own settings (a pointer set by its [OwnOption]s), or nil
}

// Settings are a protocol's own settings: [NewBase] validates them, with the shared
// configuration, once every option is applied; an error wraps [ErrInvalidOption].
type Settings interface {
	Validate(cfg Config) error
}

// NewBase applies opts to the defaults of protocol p, validates the result and returns a Base
// whose log of p's transactions lives in pool. It does not touch the database. It builds the
// coordinator's metrics and registers them on Config.Registerer. Errors wrap [ErrInvalidOption],
// among them a registration's (a metric name taken by another collector with other labels).
func NewBase(pool *pgxpool.Pool, p Protocol, opts []Option) (*Base, error) {
	cfg := DefaultConfig(p.Prefix)
	cfg.Timeout, cfg.Own = p.Timeout, p.Own
	for _, opt := range opts {
		opt(&cfg)
	}
	err := cfg.Validate()
	if err == nil && p.Own != nil {
		err = p.Own.Validate(cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Name, err)
	}
	lopts := []LogOption{WithTablePrefix(cfg.Prefix), WithLease(cfg.Lease), WithBackoff(cfg.BackoffMin, cfg.BackoffMax)}
	if cfg.Schema != "" {
		lopts = append(lopts, WithSchema(cfg.Schema))
	}
	if cfg.GroupCommit > 0 {
		lopts = append(lopts, WithGroupCommit(cfg.GroupCommit))
	}
	if cfg.DeferredFinish {
		lopts = append(lopts, WithDeferredFinish())
	}
	if cfg.Partitions.Parts > 1 {
		lopts = append(lopts, WithPartitions(cfg.Partitions.Parts))
	}
	l, err := New(pool, lopts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Name, err)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", p.Name, err, ErrInvalidOption)
	}
	km := m.forKind(p.Kind)
	tr := tracer(cfg.TracerProvider, p.Name)
	l.m, l.tr, l.lg = km, tr, cfg.Logger
	b := &Base{Log: l, Parts: NewParticipants(cfg.Client), Cfg: cfg, name: p.Name, kind: p.Kind, metrics: m, m: km, tr: tr,
		syncStandbys: syncGauge(cfg.Registerer), callSpan: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}}
	for op := range b.spanNames {
		b.spanNames[op] = p.Kind.String() + " " + participant.Op(op).String()
	}
	return b, nil
}

// Errorf returns the error of format and args with the coordinator's name in front.
func (b *Base) Errorf(format string, args ...any) error {
	return fmt.Errorf(b.name+": "+format, args...)
}

// Migrate creates the log's tables (and the fence table) when they do not exist.
func (b *Base) Migrate(ctx context.Context) error {
	if err := b.Log.Migrate(ctx); err != nil {
		return b.Errorf("%w", err)
	}
	if err := b.checkShard(ctx); err != nil {
		return b.Errorf("migrate: %w", err)
	}
	return nil
}

// Register makes p the in-process participant called name (see [Participants.Register]).
func (b *Base) Register(name string, p participant.Participant) (participant.Participant, error) {
	h, err := b.Parts.Register(name, p)
	if err != nil {
		return nil, b.Errorf("%w", err)
	}
	return h, nil
}

// Target says where the recovery finds p (see [Participants.Target]).
func (b *Base) Target(p participant.Participant) (Target, error) { return b.Parts.Target(p) }

// Flush waits until the finishes deferred so far ([WithDeferredFinish]) are written, or ctx ends.
func (b *Base) Flush(ctx context.Context) error {
	if err := b.Log.Flush(ctx); err != nil {
		return b.Errorf("%w", err)
	}
	return nil
}

// Stats returns the counters every coordinator keeps, Failures and Violations; a coordinator that
// counts more fills in the rest.
func (b *Base) Stats() Stats {
	return Stats{Violations: b.Violations.Load(), Failures: b.Failures.Load()}
}

// Status returns gid's status, or an error wrapping [ErrNotFound].
func (b *Base) Status(ctx context.Context, gid string) (Status, error) {
	t, err := b.Log.Get(ctx, gid)
	if err != nil {
		return 0, b.Errorf("status: %w", err)
	}
	return t.Status, nil
}

// Attach waits until gid's transaction is finished (a final status) and returns that status. It
// reads the log, with delays from 10ms doubling to 500ms; an unknown gid returns an error
// wrapping [ErrNotFound], and ctx ending first the status last read with an error wrapping
// [ErrIncomplete] and ctx's error.
func (b *Base) Attach(ctx context.Context, gid string) (Status, error) {
	delay := 10 * time.Millisecond
	for {
		st, err := b.Log.status(ctx, gid)
		switch {
		case err != nil && ctx.Err() == nil:
			return 0, b.Errorf("attach: %w", err)
		case err == nil && st.Final():
			return st, nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return st, b.Errorf("attach %s: %s: %w: %w", gid, st, ErrIncomplete, context.Cause(ctx))
		case <-t.C:
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// BeginOption sets a transaction's [BeginConfig].
type BeginOption func(*BeginConfig)

// BeginConfig is what a transaction is begun with.
type BeginConfig struct {
	GID     string        // default: a new UUIDv7
	Timeout time.Duration // default: Config.Timeout
	Named   bool          // set by [Base.Begin]: the caller gave GID (WithGID)
}

// Begin applies opts to the defaults: a new UUIDv7 gid and the configured timeout. A ctx already
// done returns an error wrapping its error (every coordinator's Begin takes ctx, see package
// coordinator), a gid that fails [CheckGID] or a timeout that is not positive one wrapping
// [ErrInvalidOption].
func (b *Base) Begin(ctx context.Context, opts []BeginOption) (BeginConfig, error) {
	c := BeginConfig{Timeout: b.Cfg.Timeout}
	if err := ctx.Err(); err != nil {
		return c, b.Errorf("begin: %w", err)
	}
	if len(opts) > 0 {
		c = applyBegin(c, opts)
	}
	given := c.GID != ""
	c.Named = given
	if !given {
		id, err := uuid.NewV7()
		if err != nil {
			return c, b.Errorf("gid: %w", err)
		}
		c.GID = id.String()
	}
	if err := CheckGID(c.GID); err != nil {
		return c, b.Errorf("begin: gid %.64q: %v: %w", c.GID, err, ErrInvalidOption)
	}
	var err error
	if c.GID, err = b.shardGID(c.GID, given); err != nil {
		return c, err
	}
	if c.Timeout <= 0 {
		return c, b.Errorf("begin %s: timeout %v: %w", c.GID, c.Timeout, ErrInvalidOption)
	}
	return c, nil
}

// applyBegin returns c with opts applied: c's copy goes to the heap (an option is called with its
// address) only when there are options.
func applyBegin(c BeginConfig, opts []BeginOption) BeginConfig {
	for _, opt := range opts {
		opt(&c)
	}
	return c
}

// Run runs a [Recoverer] of the coordinator's transactions with driver d under the configured
// elector until ctx ends; opts add to the recoverer's options (a leader job). It returns an error
// wrapping [ErrInvalidOption] without an elector and [ErrRunning] when another Run of b is
// running.
func (b *Base) Run(ctx context.Context, d Driver, opts ...RecoverOption) error {
	if err := b.run(ctx, d, opts); err != nil {
		return b.Errorf("run: %w", err)
	}
	return nil
}

func (b *Base) run(ctx context.Context, d Driver, opts []RecoverOption) error {
	if b.Cfg.Elector == nil && b.Cfg.Partitions.Electors == nil {
		return fmt.Errorf("no elector (WithElector): %w", ErrInvalidOption)
	}
	if !b.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer b.running.Store(false)
	if err := b.checkShard(ctx); err != nil {
		if ctx.Err() != nil { // ended while starting, as a Recoverer's Run: not an error
			return nil
		}
		return err
	}
	b.CheckSyncStandby(ctx, b.Log.pool, "log")
	ropts := append([]RecoverOption{WithSchedule(b.Cfg.Schedule), WithBatchSize(b.Cfg.Batch),
		WithConcurrency(b.Cfg.RecoverConc), WithRetention(b.Cfg.Retention, b.Cfg.RetentionSpec),
		WithLogger(b.Cfg.Logger), withMetrics(b.metrics), withTracer(b.tr)}, opts...)
	var r *Recoverer
	var err error
	if pc := b.Cfg.Partitions; pc.Parts > 1 {
		r, err = NewPartitionedRecoverer(b.Log, pc.Electors, pc.Members, map[Kind]Driver{b.kind: d}, ropts...)
	} else {
		el := b.Cfg.Elector
		if el == nil && pc.Electors != nil { // WithPartitions(1, ...): partition 0's election
			if el, err = pc.Electors(0); err != nil {
				return fmt.Errorf("elector of partition 0: %w: %w", err, ErrInvalidOption)
			}
		}
		r, err = NewRecoverer(b.Log, el, map[Kind]Driver{b.kind: d}, ropts...)
	}
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// Call calls p with the call timeout; a participant.HTTP without Client is called with the
// coordinator's ([Config.Client]). It is [Base.CallFor] with no branch's timeout.
func (b *Base) Call(ctx context.Context, p participant.Participant, req participant.Request) error {
	return b.CallFor(ctx, p, Target{}, req)
}

// CallFor calls p, the participant of a branch recorded as t, bounded by t's Timeout (when set)
// or the call timeout. A panic in p.Do is recovered: it is logged with its stack
// and returned as a *[PanicError], so the caller records it on the branch and retries with
// backoff like any failure, instead of the process (every leader in turn) crashing. Every branch
// call goes through Call: it counts the call by op and result and observes its duration, and
// records it in a client span "<protocol> <op>" (attributes txkit.gid, txkit.branch, txkit.op;
// a failure recorded as its error), a child of ctx's span, whose context p receives (an HTTP
// participant sends it with the request).
func (b *Base) CallFor(ctx context.Context, p participant.Participant, t Target, req participant.Request) (err error) {
	ctx, span := b.tr.Start(ctx, b.spanName(req.Op), b.callSpan...)
	if span.IsRecording() { // built only for a span that keeps them
		span.SetAttributes(attribute.String(AttrGID, req.GID), attribute.String(AttrBranch, req.Branch),
			attribute.String(AttrOp, req.Op.String()))
	}
	timeout := b.Cfg.CallTimeout
	if t.Timeout > 0 {
		timeout = t.Timeout
	}
	start := time.Now()
	cctx := ctx
	if d, ok := ctx.Deadline(); !ok || d.After(start.Add(timeout)) {
		// ctx's own deadline, when it comes first, bounds the call as the timeout would: no timer.
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	defer func() {
		if v := recover(); v != nil {
			err = recovered(ctx, b.Cfg.Logger, "core: participant panicked", v, slog.String("gid", req.GID),
				slog.String("branch", req.Branch), slog.String("op", req.Op.String()))
		}
		b.m.called(req.Op, transportOf(p), time.Since(start), err)
		obs.EndSpan(span, err)
	}()
	return b.Parts.bind(p).Do(cctx, req)
}

// spanName returns the name of op's call span, "<protocol> <op>", built once per op.
func (b *Base) spanName(op participant.Op) string {
	if int(op) < len(b.spanNames) && b.spanNames[op] != "" {
		return b.spanNames[op]
	}
	return b.kind.String() + " " + op.String()
}

// recovered logs a recovered panic's value v with the stack of the goroutine that panicked (call
// it from the deferred function) and returns it as a *PanicError.
func recovered(ctx context.Context, log *slog.Logger, msg string, v any, attrs ...any) error {
	log.ErrorContext(ctx, msg, append(attrs, slog.String("panic", fmt.Sprint(v)), slog.String("stack", string(debug.Stack())))...)
	return &PanicError{Value: v}
}

// CallTarget calls the participant a branch recorded.
func (b *Base) CallTarget(ctx context.Context, t Target, req participant.Request) error {
	p, err := b.Parts.Resolve(t)
	if err != nil {
		return err
	}
	return b.CallFor(ctx, p, t, req)
}

// CleanupTimeout bounds the writes made after the caller's ctx ended (recording what happened).
const CleanupTimeout = 5 * time.Second

// PhaseTwo carries out the decision st (confirming or cancelling) of gid — op, the one of
// [PhaseTwoOp], on every branch not yet done, at most Cfg.Concurrency at once — records the
// outcome with [Log.Record] (fenced with tok when it is a leader's), and returns nil when every
// branch is done, an error wrapping [ErrIncomplete] and each failure as a *[BranchError] when some
// failed (recorded, retried later), or the recording's error. A failure counts in Failures and is
// logged; a refusal breaks the protocol (a decision must be carried out): it also counts in
// Violations, is logged as an error and recorded as a protocol violation.
func (b *Base) PhaseTwo(ctx context.Context, tok lock.Token, gid string, st Status, branches []Branch) error {
	op := PhaseTwoOp(b.kind, st)
	failed, err := b.phaseTwo(ctx, tok, gid, st, op, branches)
	if err != nil {
		return b.Errorf("%s %s: record: %w", op, gid, err)
	}
	if len(failed) > 0 {
		errs := make([]error, len(failed))
		for i, f := range failed {
			errs[i] = &BranchError{GID: gid, Branch: f.Branch, Op: op, Err: f.Err}
		}
		return b.Errorf("%s %s: %w: %w", op, gid, ErrIncomplete, errors.Join(errs...))
	}
	return nil
}

// PhaseTwoOp is the op that carries out the decision st of a transaction of kind k: confirm or
// cancel (TCC), commit or abort (two-phase commit), do-commit or abort (three-phase commit).
func PhaseTwoOp(k Kind, st Status) participant.Op {
	switch {
	case (k == Kind2PC || k == Kind3PC) && st == StatusCancelling:
		return participant.OpAbort
	case k == Kind2PC:
		return participant.OpCommit
	case k == Kind3PC:
		return participant.OpDoCommit
	case st == StatusCancelling:
		return participant.OpCancel
	}
	return participant.OpConfirm
}

// PhaseTwoDriver is the recovery's [Driver] of a coordinator whose recovery is [Base.PhaseTwo]:
// failed branches are recorded (and rescheduled) by it, so only a failed recording is returned.
func (b *Base) PhaseTwoDriver() Driver {
	return DriverFunc(func(ctx context.Context, tok lock.Token, t *Transaction) error {
		if err := b.PhaseTwo(ctx, tok, t.GID, t.Status, t.Branches); !errors.Is(err, ErrIncomplete) {
			return err
		}
		return nil
	})
}

// onFail counts and logs the failure err of op on branch of gid, and returns the error to record.
func (b *Base) onFail(ctx context.Context, gid, branch string, op participant.Op, err error) error {
	b.Failures.Add(1)
	lvl := slog.LevelWarn
	if errors.Is(err, participant.ErrRefused) {
		b.Violations.Add(1)
		lvl = slog.LevelError
		err = fmt.Errorf("protocol violation, %s refused (retrying): %w", op, err)
	}
	b.Cfg.Logger.Log(ctx, lvl, b.name+": branch op failed; retrying later", slog.String("gid", gid),
		slog.String("branch", branch), slog.String("op", op.String()), slog.Any("err", err))
	return err
}

func (b *Base) phaseTwo(ctx context.Context, tok lock.Token, gid string, st Status, op participant.Op,
	branches []Branch) ([]BranchFailure, error) {
	doneStatus, _ := st.BranchDone()
	next, _ := st.Outcome()
	var (
		mu     sync.Mutex
		done   []string
		failed []BranchFailure
	)
	todo := make([]Branch, 0, len(branches))
	for _, br := range branches {
		if br.Status == doneStatus {
			done = append(done, br.Name)
		} else {
			todo = append(todo, br)
		}
	}
	Each(len(todo), b.Cfg.Concurrency, func(i int) {
		br := todo[i]
		err := b.CallTarget(ctx, br.Target, participant.Request{GID: gid, Branch: br.Name, Op: op, Payload: br.Payload})
		if err != nil {
			err = b.onFail(ctx, gid, br.Name, op, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			done = append(done, br.Name)
		} else {
			failed = append(failed, BranchFailure{Branch: br.Name, Err: err})
		}
	})
	p := Progress{GID: gid, From: st, Done: done, Failed: failed}
	if len(failed) == 0 {
		p.Next = next
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	defer cancel()
	if err := b.Log.Record(rctx, tok, p); err != nil {
		return failed, err
	}
	return failed, nil
}

// BranchSpec is a participant branch as a protocol's caller describes it (tcc.Branch,
// twopc.Branch and threepc.Branch are coordinator.Branch, this type).
type BranchSpec struct {
	// Name identifies the branch within the transaction (the participant's barrier key with the gid).
	Name string
	// Participant is a participant.HTTP (its URL is stored) or one returned by Register (its name
	// is stored), so a recovering coordinator can call it.
	Participant participant.Participant
	// Payload is sent with every op of the branch; empty or JSON.
	Payload json.RawMessage
	// Timeout bounds each call of the branch's ops, the recovery's too (default: the call
	// timeout of coordinator.WithRetry); negative is refused.
	Timeout time.Duration
}

// Branch returns the record of the branch s of gid: where the recovery finds its participant,
// and its payload. A participant that cannot be recorded or a payload that is not JSON returns
// an error wrapping [ErrInvalidBranch] naming the branch and gid.
func (b *Base) Branch(gid string, s BranchSpec) (Branch, error) {
	t, err := b.Target(s.Participant)
	if err != nil {
		return Branch{}, b.Errorf("branch %q of %s: %w", s.Name, gid, err)
	}
	if len(s.Payload) > 0 && !json.Valid(s.Payload) {
		return Branch{}, b.Errorf("branch %q of %s: payload is not JSON: %w", s.Name, gid, ErrInvalidBranch)
	}
	if t, err = t.WithTimeout(s.Timeout); err != nil {
		return Branch{}, b.Errorf("branch %q of %s: %w", s.Name, gid, err)
	}
	return Branch{Name: s.Name, Target: t, Payload: s.Payload}, nil
}

// RecordRefusals records the refusals among errs (each a *BranchError wrapping
// participant.ErrRefused: a "no" vote, a refused try) on their branches of gid, for the operator:
// why the transaction rolled back ([Log.Refuse]). A failed write is only logged. It blocks for one
// write per refusal, bounded by ctx.
func (b *Base) RecordRefusals(ctx context.Context, gid string, errs []error) {
	for _, e := range errs {
		var be *BranchError
		if !errors.As(e, &be) || !errors.Is(e, participant.ErrRefused) {
			continue
		}
		if err := b.Log.Refuse(ctx, gid, be.Branch, be.Err); err != nil {
			b.Cfg.Logger.WarnContext(ctx, b.name+": record a refusal", slog.String("gid", gid), slog.String("branch", be.Branch), slog.Any("err", err))
		}
	}
}

// Abort records the starter's decision to abort gid (trying → cancelling; one already
// cancelling, by the leader's timeout or an agent, is fine) and carries it out on branches
// ([Base.PhaseTwo]). The decision is written with ctx's values but not its cancellation (bounded
// by [CleanupTimeout]), and rolling back is safe even when that write fails: only the starter
// decides to commit, and the leader aborts an undecided transaction at its timeout. It returns
// PhaseTwo's error.
func (b *Base) Abort(ctx context.Context, gid string, branches []Branch) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	defer cancel()
	if _, err := b.Log.Decide(dctx, gid, StatusTrying, StatusCancelling); err != nil && !errors.Is(err, ErrInvalidState) {
		b.Cfg.Logger.WarnContext(ctx, b.name+": could not record the abort; the leader will", slog.String("gid", gid), slog.Any("err", err))
	}
	return b.PhaseTwo(dctx, lock.Token{}, gid, StatusCancelling, branches)
}

// ReadBack reads gid's status after the starter's decision to commit failed with werr (the write
// may have gone through with its answer lost, or the leader's timeout or an agent may have
// aborted first), with ctx's values but not its cancellation. It returns the status when it is
// committing or committed (the decision stands), aborted = true when it is cancelling or
// cancelled, and otherwise an error joining werr and the read's.
func (b *Base) ReadBack(ctx context.Context, gid string, werr error) (st Status, aborted bool, err error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	defer cancel()
	cur, gerr := b.Status(rctx, gid)
	switch {
	case gerr == nil && (cur == StatusCancelling || cur == StatusCancelled):
		return cur, true, nil
	case gerr == nil && (cur == StatusConfirming || cur == StatusConfirmed):
		return cur, false, nil
	}
	return 0, false, errors.Join(werr, gerr)
}
