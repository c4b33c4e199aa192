package tcc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/participant"
)

// Coordinator starts TCC global transactions and, with [Coordinator.Run], finishes on the
// elected leader those whose starter vanished. Any number of Coordinators (processes) may share
// one schema; each may start transactions; the leader among them recovers.
//
// Migrate, Register, Status and Flush are those of [coordinator.Base].
//
// Coordinator is safe for concurrent use by multiple goroutines.
type Coordinator struct {
	coordinator.Base
	b *core.Base
}

// New returns a Coordinator whose log lives in pool, configured by the options of package
// coordinator (TCC has none of its own). It does not touch the database: call
// Migrate ([coordinator.Base]). It returns an error wrapping [coordinator.ErrInvalidOption] when an
// option is unusable.
func New(pool *pgxpool.Pool, opts ...coordinator.Option) (*Coordinator, error) {
	b, err := core.NewBase(pool, core.Protocol{Name: "tcc", Kind: core.KindTCC, Prefix: "txkit_", Timeout: time.Minute}, opts)
	if err != nil {
		return nil, err
	}
	return &Coordinator{Base: b, b: b}, nil
}

// Stats returns the coordinator's counters ([coordinator.Stats]): Violations counts refusals of
// a confirm or cancel (a participant broke the protocol: after a successful try, confirm and
// cancel must succeed eventually), Failures the failed confirms and cancels; both are retried.
// The other fields stay zero.
func (c *Coordinator) Stats() coordinator.Stats { return c.b.Stats() }

// Begin starts a new global transaction, trying, and returns it. The transaction's timeout
// ([coordinator.WithTimeout], default [coordinator.WithDefaultTimeout]) starts now: if it is
// neither committed nor rolled back by then, the leader cancels it.
//
// With a gid of its own making (a new UUIDv7, which nobody else holds), Begin writes nothing and
// does not block: the first [Global.Try] records the transaction together with its branch (a
// transaction without a branch has nothing to cancel, so nothing is lost if the process dies
// before), and until then [Coordinator.Status] of its gid returns an error wrapping
// [coordinator.ErrNotFound]. Given [coordinator.WithGID], Begin records the transaction at once
// — one write, ctx scoping only this call — so that a gid already used is refused here, with an
// error wrapping [coordinator.ErrExists] (and [coordinator.ErrInvalidState]): a retried start of
// the same key, which gets the first one's outcome from Attach ([coordinator.Base]). A ctx already done returns an error wrapping its
// error.
func (c *Coordinator) Begin(ctx context.Context, opts ...coordinator.BeginOption) (*Global, error) {
	o, err := c.b.Begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	g := &Global{c: c, gid: o.GID, timeout: o.Timeout, begun: time.Now(), first: make(chan struct{}, 1)}
	var given core.BeginConfig
	for _, opt := range opts {
		opt(&given)
	}
	if given.GID != "" {
		if err := c.b.Log.Create(ctx, o.GID, core.KindTCC, o.Timeout, nil); err != nil {
			return nil, fmt.Errorf("tcc: begin: %w", err)
		}
		g.recorded.Store(true)
	}
	return g, nil
}

// Branch is one participant's part in a global transaction: its name, participant and payload
// ([coordinator.Branch]).
type Branch = coordinator.Branch

// Global is a TCC global transaction begun by [Coordinator.Begin]. Try its branches, then Commit
// or Rollback. Global is safe for concurrent use: branches may be tried in parallel.
type Global struct {
	c        *Coordinator
	gid      string
	timeout  time.Duration
	begun    time.Time     // the timeout counts from here
	first    chan struct{} // held (sent to) while the transaction itself is being recorded
	recorded atomic.Bool   // the transaction is in the log
	mu       sync.Mutex
	seq      int
	branches []core.Branch
}

// GID returns the transaction's id.
func (g *Global) GID() string { return g.gid }

// Try records branch b and the branches more, if any, in one write (with their participants, so
// that whoever finishes the transaction can call their confirm or cancel; a first Try records the
// transaction with them), then calls their tries: at most [coordinator.WithConcurrency] at once,
// none launched after one failed. It blocks for the write and the calls, bounded by ctx and the
// call timeout of [coordinator.WithRetry]. Branches given together cost one write.
//
// A nil error means every try succeeded. A refused try returns a *[coordinator.BranchError]
// wrapping [participant.ErrRefused] (several: their errors joined), after recording the rollback
// decision: call [Global.Rollback], which cancels every branch; if the caller does not, the leader
// does once the lease passes. Any other failure (transport, timeout, HTTP 500, a recovered panic
// of an in-process participant, whose error text starts "panic: ") is an unknown outcome: the
// transaction stays trying and the caller should call Rollback, or the leader cancels it at its
// timeout.
//
// An empty name, a payload that is not JSON, a participant that cannot be recorded, or a name
// already tried or given twice returns an error wrapping [coordinator.ErrInvalidBranch], and no
// branch of the call is recorded or tried. A transaction already decided (or cancelled by its
// timeout) returns [coordinator.ErrInvalidState] and calls nothing.
func (g *Global) Try(ctx context.Context, b Branch, more ...Branch) error {
	bs := append([]Branch{b}, more...)
	cbs := make([]core.Branch, len(bs))
	for i, b := range bs {
		cb, err := g.c.b.Branch(g.gid, b)
		if err != nil {
			return err
		}
		cbs[i] = cb
	}
	// The branches join the in-memory list before they are recorded, so a Rollback racing with
	// this Try cancels them: the record succeeds only before the decision (see core.Log.AddBranch).
	g.mu.Lock()
	for i := range cbs {
		cbs[i].Seq = g.seq
		g.seq++
	}
	g.branches = append(g.branches, cbs...)
	g.mu.Unlock()
	if err := g.record(ctx, cbs); err != nil {
		g.forget(cbs)
		return fmt.Errorf("tcc: try: %w", err)
	}
	errs := g.tries(ctx, bs, cbs)
	if len(errs) == 0 {
		return nil
	}
	berr := errors.Join(errs...)
	if errors.Is(berr, participant.ErrRefused) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.CleanupTimeout)
		defer cancel()
		// Why it rolls back, for the operator (admin, console, txkit tx show): lost only if this
		// write fails, which changes nothing else.
		g.c.b.RecordRefusals(cctx, g.gid, errs)
		if _, derr := g.c.b.Log.Decide(cctx, g.gid, core.StatusTrying, core.StatusCancelling); derr != nil {
			return errors.Join(berr, fmt.Errorf("tcc: record rollback of %s: %w", g.gid, derr))
		}
	}
	return berr
}

// tries calls the try of each of bs, recorded as cbs: at most Cfg.Concurrency at once, the caller's
// goroutine making its share (core.Each), calling none after a failure. It returns the failures,
// each a *coordinator.BranchError, in the order of bs.
func (g *Global) tries(ctx context.Context, bs []Branch, cbs []core.Branch) []error {
	out := make([]error, len(bs))
	var failed atomic.Bool
	core.Each(len(bs), g.c.b.Cfg.Concurrency, func(i int) {
		if failed.Load() {
			return
		}
		b := bs[i]
		err := g.c.b.CallFor(ctx, b.Participant, cbs[i].Target, participant.Request{GID: g.gid, Branch: b.Name, Op: participant.OpTry, Payload: b.Payload})
		if err != nil {
			out[i] = fmt.Errorf("tcc: %w", &coordinator.BranchError{GID: g.gid, Branch: b.Name, Op: participant.OpTry, Err: err})
			failed.Store(true)
		}
	})
	return slices.DeleteFunc(out, func(err error) bool { return err == nil })
}

// record records branches cbs: with the transaction itself when nothing is recorded yet, otherwise
// alone. Trys racing to be first wait for the one recording the transaction.
func (g *Global) record(ctx context.Context, cbs []core.Branch) error {
	if !g.recorded.Load() {
		select {
		case g.first <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { <-g.first }()
		if !g.recorded.Load() {
			err := g.c.b.Log.CreateIn(ctx, g.gid, core.KindTCC, core.StatusTrying, g.remaining(), nil, cbs...)
			if !errors.Is(err, core.ErrInvalidState) {
				g.recorded.Store(err == nil)
				return err
			}
			// Begin made the gid, so it is taken only by an earlier attempt of ours whose answer
			// was lost: the transaction is recorded (and perhaps cbs with it: then AddBranches
			// refuses their names, as for a lost answer of AddBranches itself).
			g.recorded.Store(true)
		}
	}
	return g.c.b.Log.AddBranches(ctx, g.gid, core.StatusTrying, cbs)
}

// remaining returns what is left of the timeout (at least a millisecond: a transaction recorded
// past it is cancelled by the leader's next pass).
func (g *Global) remaining() time.Duration {
	return max(g.timeout-time.Since(g.begun), time.Millisecond)
}

// forget removes branches that were not recorded (a Seq is unique within g).
func (g *Global) forget(cbs []core.Branch) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.branches = slices.DeleteFunc(g.branches, func(b core.Branch) bool {
		return slices.ContainsFunc(cbs, func(cb core.Branch) bool { return cb.Seq == b.Seq })
	})
}

// Commit records the decision to confirm, then calls every branch's confirm (at most
// [coordinator.WithConcurrency] at once) and records the outcome. It blocks until then; ctx bounds the calls,
// not the recording of their results.
//
// nil means every branch confirmed. An error wrapping [coordinator.ErrIncomplete] means the decision is
// recorded but some confirms failed (or ctx ended): the leader retries them until they succeed.
// A confirm (or cancel) that panics in an in-process participant is such a failure: the panic is
// recovered, logged with its stack, and recorded as the branch's last error ("panic: <value>"),
// here and in the leader's recovery alike.
// A transaction no longer trying — rolled back, refused, or cancelled by its timeout — returns an
// error wrapping [coordinator.ErrInvalidState] and confirms nothing. Committing twice is harmless. Call
// Commit only after every Try has returned nil: a Try still running has no known outcome.
func (g *Global) Commit(ctx context.Context) error {
	return g.finish(ctx, core.StatusConfirming)
}

// Rollback records the decision to cancel, then calls every recorded branch's cancel — also those
// whose try failed, timed out or was refused: their outcome is unknown, and the participant's
// barrier makes a cancel without a try an empty rollback — and records the outcome. Errors as for
// [Global.Commit]; a committed transaction returns [coordinator.ErrInvalidState]. Rollback may run while Trys
// are in flight: a branch being recorded is either cancelled or refused the record.
func (g *Global) Rollback(ctx context.Context) error {
	return g.finish(ctx, core.StatusCancelling)
}

func (g *Global) finish(ctx context.Context, to coordinator.Status) error {
	if !g.recorded.Load() {
		if done, err := g.finishUnrecorded(ctx, to); done {
			return err
		}
	}
	cur, err := g.c.b.Log.Decide(ctx, g.gid, core.StatusTrying, to)
	if err != nil {
		return fmt.Errorf("tcc: %s: %w", to, err)
	}
	if cur.Final() {
		return nil // decided and carried out already (a second Commit or Rollback)
	}
	g.mu.Lock()
	branches := append([]core.Branch(nil), g.branches...)
	g.mu.Unlock()
	return g.c.b.PhaseTwo(ctx, lock.Token{}, g.gid, to, branches)
}

// finishUnrecorded records the decision to of a transaction no Try recorded, together with the
// transaction, and finishes it (there is no branch to call): two writes. It reports false, having
// done nothing, when the transaction turns out to be recorded (by a Try it waited for, or by an
// earlier attempt whose answer was lost): the caller decides as usual.
func (g *Global) finishUnrecorded(ctx context.Context, to coordinator.Status) (bool, error) {
	select {
	case g.first <- struct{}{}:
	case <-ctx.Done():
		return true, fmt.Errorf("tcc: %s: %w", to, ctx.Err())
	}
	defer func() { <-g.first }()
	if g.recorded.Load() {
		return false, nil
	}
	err := g.c.b.Log.CreateIn(ctx, g.gid, core.KindTCC, to, g.remaining(), nil)
	if errors.Is(err, core.ErrInvalidState) {
		g.recorded.Store(true)
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("tcc: %s: %w", to, err)
	}
	g.recorded.Store(true)
	return true, g.c.b.PhaseTwo(ctx, lock.Token{}, g.gid, to, nil)
}

// Run recovers, while this coordinator leads the election of [coordinator.WithElector], the transactions whose
// starter vanished or whose confirms/cancels failed, and cancels those left trying past their
// timeout; it also deletes finished transactions past the retention. It blocks until ctx ends,
// then returns nil after every goroutine it started has exited. It returns an error wrapping
// [coordinator.ErrInvalidOption] without an elector, [coordinator.ErrRunning] when another Run is running, and one
// wrapping [lock.ErrClosed] when the elector's session is closed.
func (c *Coordinator) Run(ctx context.Context) error {
	return c.b.Run(ctx, c.b.PhaseTwoDriver())
}
