package tcc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/participant"
)

// Status is the state of a global transaction: trying, then confirming → confirmed or
// cancelling → cancelled.
type Status = core.Status

// The statuses of a TCC transaction.
const (
	StatusTrying     = core.StatusTrying
	StatusConfirming = core.StatusConfirming
	StatusConfirmed  = core.StatusConfirmed
	StatusCancelling = core.StatusCancelling
	StatusCancelled  = core.StatusCancelled
)

// Coordinator starts TCC global transactions and, with [Coordinator.Run], finishes on the
// elected leader those whose starter vanished. Any number of Coordinators (processes) may share
// one schema; each may start transactions; the leader among them recovers.
//
// Coordinator is safe for concurrent use by multiple goroutines.
type Coordinator struct {
	b     *core.Base
	o     options
	stats struct{ violations, failures atomic.Int64 }
}

// New returns a Coordinator whose log lives in pool. It does not touch the database: call
// [Coordinator.Migrate]. It returns an error wrapping [ErrInvalidOption] when an option is
// unusable.
func New(pool *pgxpool.Pool, opts ...Option) (*Coordinator, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	b, err := core.NewBase(pool, o.Config)
	if err != nil {
		return nil, fmt.Errorf("tcc: %w", mapErr(err))
	}
	return &Coordinator{b: b, o: o}, nil
}

// Migrate creates the coordinator's tables (and the fence table) when they do not exist. It is
// idempotent and safe to run from several processes at once; ctx scopes only this call.
func (c *Coordinator) Migrate(ctx context.Context) error {
	if err := c.b.Log.Migrate(ctx); err != nil {
		return fmt.Errorf("tcc: %w", err)
	}
	return nil
}

// Register makes p the in-process participant called name, and returns the participant to use
// in [Branch.Participant]. The branch stores the name, so every Coordinator that may recover the
// transaction (the leader may be another process) must register the same name. Registering a
// name twice returns an error wrapping [ErrInvalidOption].
func (c *Coordinator) Register(name string, p participant.Participant) (participant.Participant, error) {
	h, err := c.b.Parts.Register(name, p)
	if err != nil {
		return nil, fmt.Errorf("tcc: %w", mapErr(err))
	}
	return h, nil
}

// Stats counts what a [Coordinator] saw.
type Stats struct {
	// Violations counts refusals of a confirm or cancel: a participant broke the protocol (after
	// a successful try, confirm and cancel must succeed eventually). They are retried.
	Violations int64
	// Failures counts failed confirms and cancels (retried).
	Failures int64
}

// Stats returns the coordinator's counters.
func (c *Coordinator) Stats() Stats {
	return Stats{Violations: c.stats.violations.Load(), Failures: c.stats.failures.Load()}
}

// Status returns gid's status, or an error wrapping [ErrNotFound].
func (c *Coordinator) Status(ctx context.Context, gid string) (Status, error) {
	st, err := c.b.Status(ctx, gid)
	if err != nil {
		return 0, fmt.Errorf("tcc: status: %w", mapErr(err))
	}
	return st, nil
}

// Begin records a new global transaction, trying, and returns it. It blocks for one write; ctx
// scopes only this call. The transaction's timeout ([WithTimeout], default
// [WithDefaultTimeout]) starts now: if it is neither committed nor rolled back by then, the leader
// cancels it. A gid already used returns an error wrapping [ErrInvalidState].
func (c *Coordinator) Begin(ctx context.Context, opts ...BeginOption) (*Global, error) {
	o := beginOptions{timeout: c.o.Timeout}
	for _, opt := range opts {
		opt(&o)
	}
	if o.gid == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("tcc: gid: %w", err)
		}
		o.gid = id.String()
	}
	if o.timeout <= 0 {
		return nil, fmt.Errorf("tcc: begin %s: timeout %v: %w", o.gid, o.timeout, ErrInvalidOption)
	}
	if err := c.b.Log.Create(ctx, o.gid, core.KindTCC, o.timeout, nil); err != nil {
		return nil, fmt.Errorf("tcc: begin: %w", mapErr(err))
	}
	return &Global{c: c, gid: o.gid}, nil
}

// Branch is one participant's part in a global transaction.
type Branch struct {
	// Name identifies the branch within the transaction (the participant's barrier key with the gid).
	Name string
	// Participant is a participant.HTTP (its URL is stored) or one returned by
	// [Coordinator.Register] (its name is stored), so a recovering coordinator can call it.
	Participant participant.Participant
	// Payload is sent with every op of the branch; empty or JSON.
	Payload json.RawMessage
}

// Global is a TCC global transaction begun by [Coordinator.Begin]. Try its branches, then Commit
// or Rollback. Global is safe for concurrent use: branches may be tried in parallel.
type Global struct {
	c        *Coordinator
	gid      string
	mu       sync.Mutex
	seq      int
	branches []core.Branch
}

// GID returns the transaction's id.
func (g *Global) GID() string { return g.gid }

// Try records branch b (with its participant, so its confirm or cancel can be called by whoever
// finishes the transaction), then calls its try. It blocks for one write and the call, bounded by
// ctx and [WithCallTimeout].
//
// A nil error means the try succeeded. A refused try returns a *[BranchError] wrapping
// [participant.ErrRefused], after recording the rollback decision: call [Global.Rollback], which
// cancels every branch (including the refused one: an empty rollback is the barrier's concern);
// if the caller does not, the leader does once the lease passes. Any other failure (transport,
// timeout, HTTP 500, or a panic in an in-process participant — recovered, logged with its stack and
// returned as an error whose text starts "panic: ") is an unknown outcome: the transaction stays trying and the caller should
// call Rollback; if it does not, the leader cancels the transaction at its timeout.
//
// An empty name, a payload that is not JSON or a participant that cannot be recorded returns an
// error wrapping [ErrInvalidBranch], as does a name already tried; a transaction already decided
// (or cancelled by its timeout) returns [ErrInvalidState] and calls nothing.
func (g *Global) Try(ctx context.Context, b Branch) error {
	target, err := g.c.targetOf(b.Participant)
	if err != nil {
		return fmt.Errorf("tcc: branch %q of %s: %w", b.Name, g.gid, err)
	}
	if len(b.Payload) > 0 && !json.Valid(b.Payload) {
		return fmt.Errorf("tcc: branch %q of %s: payload is not JSON: %w", b.Name, g.gid, ErrInvalidBranch)
	}
	// The branch joins the in-memory list before it is recorded, so a Rollback racing with this
	// Try cancels it: the record succeeds only before the decision (see core.Log.AddBranch).
	g.mu.Lock()
	cb := core.Branch{Name: b.Name, Seq: g.seq, Target: target, Payload: b.Payload}
	g.seq++
	g.branches = append(g.branches, cb)
	g.mu.Unlock()
	if err := g.c.b.Log.AddBranch(ctx, g.gid, core.StatusTrying, cb); err != nil {
		g.forget(cb)
		return fmt.Errorf("tcc: try: %w", mapErr(err))
	}
	err = g.c.b.Call(ctx, b.Participant, participant.Request{GID: g.gid, Branch: b.Name, Op: participant.OpTry, Payload: b.Payload})
	if err == nil {
		return nil
	}
	berr := &BranchError{GID: g.gid, Branch: b.Name, Op: participant.OpTry, Err: err}
	if errors.Is(err, participant.ErrRefused) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.CleanupTimeout)
		defer cancel()
		if _, derr := g.c.b.Log.Decide(cctx, g.gid, core.StatusTrying, core.StatusCancelling); derr != nil {
			return errors.Join(berr, fmt.Errorf("tcc: record rollback of %s: %w", g.gid, mapErr(derr)))
		}
	}
	return berr
}

// forget removes a branch that was not recorded (its Seq is unique within g).
func (g *Global) forget(cb core.Branch) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, b := range g.branches {
		if b.Seq == cb.Seq {
			g.branches = append(g.branches[:i], g.branches[i+1:]...)
			return
		}
	}
}

// targetOf says where the recovery finds p.
func (c *Coordinator) targetOf(p participant.Participant) (core.Target, error) {
	t, err := c.b.Parts.Target(p)
	if err != nil {
		return core.Target{}, mapErr(err)
	}
	return t, nil
}

// Commit records the decision to confirm, then calls every branch's confirm (at most
// [WithConcurrency] at once) and records the outcome. It blocks until then; ctx bounds the calls,
// not the recording of their results.
//
// nil means every branch confirmed. An error wrapping [ErrIncomplete] means the decision is
// recorded but some confirms failed (or ctx ended): the leader retries them until they succeed.
// A confirm (or cancel) that panics in an in-process participant is such a failure: the panic is
// recovered, logged with its stack, and recorded as the branch's last error ("panic: <value>"),
// here and in the leader's recovery alike.
// A transaction no longer trying — rolled back, refused, or cancelled by its timeout — returns an
// error wrapping [ErrInvalidState] and confirms nothing. Committing twice is harmless. Call
// Commit only after every Try has returned nil: a Try still running has no known outcome.
func (g *Global) Commit(ctx context.Context) error {
	return g.finish(ctx, core.StatusConfirming)
}

// Rollback records the decision to cancel, then calls every recorded branch's cancel — also those
// whose try failed, timed out or was refused: their outcome is unknown, and the participant's
// barrier makes a cancel without a try an empty rollback — and records the outcome. Errors as for
// [Global.Commit]; a committed transaction returns [ErrInvalidState]. Rollback may run while Trys
// are in flight: a branch being recorded is either cancelled or refused the record.
func (g *Global) Rollback(ctx context.Context) error {
	return g.finish(ctx, core.StatusCancelling)
}

func (g *Global) finish(ctx context.Context, to Status) error {
	cur, err := g.c.b.Log.Decide(ctx, g.gid, core.StatusTrying, to)
	if err != nil {
		return fmt.Errorf("tcc: %s: %w", to, mapErr(err))
	}
	if cur.Final() {
		return nil // decided and carried out already (a second Commit or Rollback)
	}
	g.mu.Lock()
	branches := append([]core.Branch(nil), g.branches...)
	g.mu.Unlock()
	return g.c.drive(ctx, lock.Token{}, g.gid, to, branches)
}

// drive calls the op of status st on every branch not yet done and records the outcome (fenced
// with tok when tok is a leader's). It returns nil when every branch is done, an error wrapping
// ErrIncomplete when some failed (recorded, retried later), or the recording's error.
func (c *Coordinator) drive(ctx context.Context, tok lock.Token, gid string, st Status, branches []core.Branch) error {
	op := participant.OpConfirm
	if st == core.StatusCancelling {
		op = participant.OpCancel
	}
	failed, err := c.b.PhaseTwo(ctx, tok, gid, st, op, branches, func(name string, err error) error {
		c.stats.failures.Add(1)
		lvl := slog.LevelWarn
		if errors.Is(err, participant.ErrRefused) {
			c.stats.violations.Add(1)
			lvl = slog.LevelError
			err = fmt.Errorf("protocol violation, %s refused (retrying): %w", op, err)
		}
		c.o.Logger.Log(ctx, lvl, "tcc: branch op failed; retrying later", slog.String("gid", gid),
			slog.String("branch", name), slog.String("op", op.String()), slog.Any("err", err))
		return err
	})
	if err != nil {
		return fmt.Errorf("tcc: %s %s: %w", op, gid, mapErr(err))
	}
	if len(failed) > 0 {
		errs := make([]error, len(failed))
		for i, f := range failed {
			errs[i] = &BranchError{GID: gid, Branch: f.Branch, Op: op, Err: f.Err}
		}
		return fmt.Errorf("tcc: %s %s: %w: %w", op, gid, ErrIncomplete, errors.Join(errs...))
	}
	return nil
}

// Run recovers, while this coordinator leads the election of [WithElector], the transactions whose
// starter vanished or whose confirms/cancels failed, and cancels those left trying past their
// timeout; it also deletes finished transactions past the retention. It blocks until ctx ends,
// then returns nil after every goroutine it started has exited. It returns an error wrapping
// [ErrInvalidOption] without an elector, [ErrRunning] when another Run is running, and one
// wrapping [lock.ErrClosed] when the elector's session is closed.
func (c *Coordinator) Run(ctx context.Context) error {
	if err := c.b.Run(ctx, core.KindTCC, core.DriverFunc(c.recoverOne)); err != nil {
		return fmt.Errorf("tcc: run: %w", mapErr(err))
	}
	return nil
}

// recoverOne is the recovery's driver: finish t's confirms or cancels. Failed branches are
// recorded (and rescheduled) by drive, so only a failed recording is returned.
func (c *Coordinator) recoverOne(ctx context.Context, tok lock.Token, t *core.Transaction) error {
	err := c.drive(ctx, tok, t.GID, t.Status, t.Branches)
	if errors.Is(err, ErrIncomplete) {
		return nil
	}
	return err
}
