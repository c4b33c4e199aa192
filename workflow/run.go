package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/participant"
)

// How a workflow's records sit in the log's branch table: a row per step, its seq the step's
// position in the function, its target a participant's (a call) or local (Ref says which); the
// outcome is the row resultName.
const (
	resultName = "$result" // the function's output (payload) or why it rolled back (refusal)
	refStep    = "step"    // a local step: payload its result, refusal its error
	refSleep   = "sleep"   // a durable sleep: payload {"until": unix ms}
	refResult  = "result"

	kindStep  = "step"
	kindSleep = "sleep"
	kindCall  = "call"
)

// Why a run stops short without its function failing.
var (
	errReplayEnd = errors.New("workflow: replayed to the end of the log (compensating)")
	errSleeping  = errors.New("workflow: sleeping (the leader resumes it when due)")
)

// run is one drive of a workflow's function, by its starter (tok zero) or the leader.
type run struct {
	c         *Coordinator
	tok       lock.Token
	gid, name string
	status    coordinator.Status  // the status the writes condition on: running or compensating
	recs      map[int]core.Branch // the recorded steps by seq
	log       *slog.Logger

	mu        sync.Mutex
	next      int            // the next step's seq
	names     map[string]int // uses of each step name so far
	comps     []*comp        // compensations of the completed steps, in step order
	confirms  []*comp        // confirms of the tried steps (Try), in step order
	halt      error          // the function must stop: every step returns it
	rollback  error          // the deadline passed: compensate whatever the function returns
	failed    []core.BranchFailure
	recordErr error
}

// comp is the compensation of a completed step, or the confirm of a tried one.
type comp struct {
	rec   core.Branch
	local func(context.Context, []byte) error // nil: a participant's op
	op    participant.Op                      // the participant's op: compensate, cancel or confirm
	done  bool
}

// doneStatus is the status of a step whose op succeeded.
func doneStatus(op participant.Op) core.BranchStatus {
	switch op {
	case participant.OpCancel:
		return core.BranchCancelled
	case participant.OpConfirm:
		return core.BranchConfirmed
	}
	return core.BranchCompensated
}

func kindOf(t core.Target) string {
	switch {
	case t.Kind != core.TargetLocal:
		return kindCall
	case t.Ref == refSleep:
		return kindSleep
	}
	return kindStep
}

// slot gives the next step its name and seq, and its record when the log holds one. It returns
// an error when the step must not run: the run is halted, the replay diverged, the log ends
// while compensating, or the deadline passed.
func (r *run) slot(ctx context.Context, name, kind string) (core.Branch, *core.Branch, error) {
	if r.halt != nil {
		return core.Branch{}, nil, r.halt
	}
	r.names[name]++
	if n := r.names[name]; n > 1 {
		name = fmt.Sprintf("%s#%d", name, n)
	}
	b := core.Branch{Name: name, Seq: r.next}
	r.next++
	if rec, ok := r.recs[b.Seq]; ok {
		if rec.Name != name || kindOf(rec.Target) != kind {
			r.halt = fmt.Errorf("workflow %s: step %d: the replay asks for %s %q, the log holds %s %q: %w",
				r.gid, b.Seq, kind, name, kindOf(rec.Target), rec.Name, ErrNondeterministic)
			return b, nil, r.halt
		}
		return b, &rec, nil
	}
	if r.status != StatusRunning {
		r.halt = errReplayEnd
		return b, nil, r.halt
	}
	if err := r.expired(ctx); err != nil {
		return b, nil, err
	}
	return b, nil, nil
}

// expired returns nil while ctx (the workflow's deadline) lasts; once it ended, an error
// wrapping coordinator.ErrTimeout (and the run rolls back) or the halt (ctx's own end).
func (r *run) expired(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	cause := context.Cause(ctx)
	if errors.Is(cause, coordinator.ErrTimeout) {
		r.rollback = cause
		return fmt.Errorf("workflow %s: %w", r.gid, cause)
	}
	r.halt = fmt.Errorf("workflow %s: %w: %w", r.gid, coordinator.ErrIncomplete, cause)
	return r.halt
}

func (r *run) local(ctx context.Context, name string, fn func(context.Context) ([]byte, error), compensate func(context.Context, []byte) error) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, rec, err := r.slot(ctx, name, kindStep)
	if err != nil {
		return nil, err
	}
	if rec != nil {
		if rec.Refusal != "" {
			return nil, &StepError{GID: r.gid, Step: rec.Name, Text: rec.Refusal}
		}
		r.registerLocal(*rec, compensate)
		return rec.Payload, nil
	}
	sctx, span := r.c.b.Tracer().Start(ctx, "workflow step", r.attrs(b.Name))
	res, ferr := fn(sctx)
	obs.EndSpan(span, ferr)
	b.Target, b.Status, b.Payload = core.Target{Kind: core.TargetLocal, Ref: refStep}, core.BranchSucceeded, res
	if ferr != nil {
		b.Payload, b.Refusal = nil, errText(ferr)
	}
	if err := r.putOutcome(ctx, b); err != nil {
		return nil, err
	}
	if ferr != nil {
		return nil, fmt.Errorf("workflow %s: step %s: %w", r.gid, b.Name, ferr)
	}
	r.registerLocal(b, compensate)
	return res, nil
}

func (r *run) registerLocal(rec core.Branch, compensate func(context.Context, []byte) error) {
	if compensate != nil {
		r.comps = append(r.comps, &comp{rec: rec, local: compensate, done: rec.Status == core.BranchCompensated})
	}
}

func (r *run) attrs(step string) trace.SpanStartOption {
	return trace.WithAttributes(attribute.String(core.AttrGID, r.gid), attribute.String(core.AttrBranch, step))
}

// call runs the participant step name: an action and its compensation, or (tcc) a try, its
// confirm once the function succeeded and its cancel on rollback.
func (r *run) call(ctx context.Context, name string, p participant.Participant, payload any, tcc bool) error {
	do, undo := participant.OpAction, participant.OpCompensate
	if tcc {
		do, undo = participant.OpTry, participant.OpCancel
	}
	var body []byte
	if payload != nil {
		var err error
		if body, err = encode("payload of step "+name, payload); err != nil {
			return fmt.Errorf("workflow %s: %w", r.gid, err)
		}
	}
	target, err := r.c.b.Target(p)
	if err != nil {
		return fmt.Errorf("workflow %s: step %s: %w", r.gid, name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b, rec, err := r.slot(ctx, name, kindCall)
	if rec == nil && b.Name != "" && (errors.Is(err, errReplayEnd) || errors.Is(err, coordinator.ErrTimeout)) {
		// Rolling back at a call the log does not hold: a run that died may have sent it, so it
		// is compensated (an empty compensation at worst: the barrier records it, and refuses
		// the call should it arrive later).
		b.Target, b.Payload = target, body
		r.comps = append(r.comps, &comp{rec: b, op: undo})
	}
	if err != nil {
		return err
	}
	if rec == nil {
		// Sent first, recorded once answered: a crash in between leaves no record, and the
		// replay sends it again with the same identity (gid, step, op), applied once by the
		// participant's barrier.
		b.Target, b.Payload, b.Status = target, body, core.BranchPending
		rec = &b
	}
	if rec.Status == core.BranchPending {
		if err := r.sendPending(ctx, rec, do, undo); err != nil {
			return err
		}
	}
	// A refused call is compensated too, as a saga's refused step is: an earlier attempt whose
	// answer was lost may have applied it before this one was refused (an empty compensation at
	// worst: the barrier finds no action to undo).
	r.comps = append(r.comps, &comp{rec: *rec, op: undo, done: rec.Status == core.BranchCompensated || rec.Status == core.BranchCancelled})
	if rec.Refusal != "" {
		return &coordinator.BranchError{GID: r.gid, Branch: rec.Name, Op: do,
			Err: fmt.Errorf("%s: %w", rec.Refusal, participant.ErrRefused)}
	}
	if tcc {
		r.confirms = append(r.confirms, &comp{rec: *rec, op: participant.OpConfirm, done: rec.Status == core.BranchConfirmed})
	}
	return nil
}

// sendPending sends do for the unanswered call rec and records its answer (a success or a
// refusal) in rec and the log. A call the run must not send now (compensating, or past the
// deadline) and one whose outcome stays unknown are compensated (an empty compensation at worst:
// it may have reached the participant), and their error returned.
func (r *run) sendPending(ctx context.Context, rec *core.Branch, do, undo participant.Op) error {
	if r.status != StatusRunning || r.expired(ctx) != nil {
		r.comps = append(r.comps, &comp{rec: *rec, op: undo})
		if r.halt == nil && r.status != StatusRunning {
			r.halt = errReplayEnd
		}
		if r.halt != nil {
			return r.halt
		}
		return fmt.Errorf("workflow %s: %w", r.gid, r.rollback)
	}
	err := r.send(ctx, *rec, do)
	switch {
	case err == nil:
		rec.Status = core.BranchSucceeded
	case errors.Is(err, participant.ErrRefused):
		rec.Status, rec.Refusal = core.BranchSucceeded, errText(err)
	default:
		r.comps = append(r.comps, &comp{rec: *rec, op: undo})
		if r.expired(ctx) != nil && r.halt == nil {
			return fmt.Errorf("workflow %s: step %s: %w", r.gid, rec.Name, r.rollback)
		}
		r.failed = append(r.failed, core.BranchFailure{Branch: rec.Name, Err: err})
		if r.halt == nil {
			r.halt = fmt.Errorf("workflow %s: %w: %w", r.gid, coordinator.ErrIncomplete,
				&coordinator.BranchError{GID: r.gid, Branch: rec.Name, Op: do, Err: err})
		}
		return r.halt
	}
	return r.putOutcome(ctx, *rec)
}

// send calls op on the participant of step rec ([core.Base.CallAttempts]): the starter up to 3
// times while it fails transiently, with backoff; the leader once per drive. A refused action
// returns at once; a refused compensation breaks the protocol: it is counted and retried like any
// failure.
func (r *run) send(ctx context.Context, rec core.Branch, op participant.Op) error {
	attempts := 3
	if !r.tok.IsZero() {
		attempts = 1
	}
	return r.c.b.CallAttempts(ctx, func() *slog.Logger { return r.log }, rec.Target, participant.Request{GID: r.gid, Branch: rec.Name, Op: op, Payload: rec.Payload}, attempts)
}

type sleepRecord struct {
	Until int64 `json:"until"` // unix ms
}

func (r *run) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, rec, err := r.slot(ctx, "sleep", kindSleep)
	if err != nil {
		return err
	}
	if rec == nil {
		b.Payload, _ = json.Marshal(sleepRecord{Until: time.Now().Add(d).UnixMilli()})
		b.Target, b.Status = core.Target{Kind: core.TargetLocal, Ref: refSleep}, core.BranchPending
		if err := r.put(ctx, b); err != nil {
			return err
		}
		rec = &b
	}
	if rec.Status != core.BranchPending {
		return nil
	}
	if r.status != StatusRunning {
		r.halt = errReplayEnd
		return r.halt
	}
	var s sleepRecord
	if err := json.Unmarshal(rec.Payload, &s); err != nil {
		r.halt = fmt.Errorf("workflow %s: sleep %s: unreadable record: %w: %w", r.gid, rec.Name, coordinator.ErrIncomplete, err)
		return r.halt
	}
	until := time.UnixMilli(s.Until)
	for {
		left := time.Until(until)
		if left <= 0 {
			rec.Status = core.BranchSucceeded
			return r.put(ctx, *rec)
		}
		if err := r.expired(ctx); err != nil {
			return err
		}
		if !r.tok.IsZero() {
			// The leader does not hold a drive for a sleep: the workflow is due again when it ends
			// (or at its deadline, when that comes first).
			if dl, ok := ctx.Deadline(); ok && dl.Before(until) {
				left = time.Until(dl)
			}
			if err := r.park(ctx, left); err != nil {
				return err
			}
			r.halt = errSleeping
			return r.halt
		}
		// The sleeping starter keeps the workflow for the sleep and a lease: the leader resumes it
		// only when the starter died.
		if err := r.park(ctx, left+r.c.b.Log.Lease()); err != nil {
			return err
		}
		t := time.NewTimer(left)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

func (r *run) park(ctx context.Context, after time.Duration) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.CleanupTimeout)
	defer cancel()
	if err := r.c.b.Log.Park(wctx, r.tok, r.gid, r.status, r.status, after, ""); err != nil {
		r.recordErr = err
		r.halt = fmt.Errorf("workflow %s: park: %w: %w", r.gid, coordinator.ErrIncomplete, err)
		return r.halt
	}
	return nil
}

// put records step b (the starter's write unbounded by ctx's end), or halts the run.
func (r *run) put(ctx context.Context, b core.Branch) error {
	return r.write(ctx, b, func(ctx context.Context) error { return r.c.b.Log.PutStep(ctx, r.tok, r.gid, r.status, b) })
}

// putOutcome records the outcome of step b before the function sees it, as put does; the
// starter's write does not wait for PostgreSQL's flush (Log.RecordStep: "The log" in
// docs/workflows.md says why that is safe).
func (r *run) putOutcome(ctx context.Context, b core.Branch) error {
	if !r.tok.IsZero() || r.status != StatusRunning {
		return r.put(ctx, b)
	}
	return r.write(ctx, b, func(ctx context.Context) error { return r.c.b.Log.RecordStep(ctx, r.gid, b) })
}

// write makes put's write of step b, or halts the run.
func (r *run) write(ctx context.Context, b core.Branch, put func(context.Context) error) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.CleanupTimeout)
	defer cancel()
	if err := put(wctx); err != nil {
		r.recordErr = err
		r.halt = fmt.Errorf("workflow %s: record step %s: %w: %w", r.gid, b.Name, coordinator.ErrIncomplete, err)
		return r.halt
	}
	return nil
}

// finish records the outcome row res and moves the workflow to next, in one write.
func (r *run) finish(ctx context.Context, next coordinator.Status, res core.Branch) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.CleanupTimeout)
	defer cancel()
	// Only once the function's last step has its row: its records are a prefix of the run's (a
	// crash of PostgreSQL loses the suffix of the starter's unflushed records, putOutcome), so
	// none is missing, and this commit makes them durable.
	if err := r.c.b.Log.FinishStep(wctx, r.tok, r.gid, r.status, next, r.next-1, res); err != nil {
		r.recordErr = err
		return fmt.Errorf("workflow %s: %w: %w", r.gid, coordinator.ErrIncomplete, err)
	}
	return nil
}

// record writes p (fenced with the run's token), not bounded by a cancelled ctx.
func (r *run) record(ctx context.Context, p core.Progress) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.CleanupTimeout)
	defer cancel()
	if err := r.c.b.Log.Record(wctx, r.tok, p); err != nil {
		r.recordErr = err
		return fmt.Errorf("workflow %s: %w: %w", r.gid, coordinator.ErrIncomplete, err)
	}
	return nil
}

// invoke calls the workflow's function; a panic halts the run (rescheduled with backoff).
func (r *run) invoke(ctx context.Context, fn workflowFunc, input []byte) (out []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			perr := &core.PanicError{Value: v}
			r.log.ErrorContext(ctx, "workflow: function panicked", slog.String("panic", fmt.Sprint(v)), slog.String("stack", string(debug.Stack())))
			r.mu.Lock()
			if r.halt == nil {
				r.halt = fmt.Errorf("workflow %s: %w: %w", r.gid, coordinator.ErrIncomplete, perr)
			}
			r.mu.Unlock()
		}
	}()
	return fn(wfContext{Context: ctx, r: r}, input)
}

// drive runs the workflow from its status — the function (a replay of what is recorded, then on),
// then its compensations when it failed — and returns how it ended, the output, and Start's error.
func (r *run) drive(ctx, deadline context.Context, fn workflowFunc, input []byte) (coordinator.Status, json.RawMessage, error) {
	var cause error
	switch r.status {
	case StatusRunning:
		out, ferr := r.invoke(deadline, fn, input)
		if st, stop, err := r.halted(ctx); stop {
			return st, nil, err
		}
		cause = r.rollback
		if cause == nil {
			cause = ferr
		}
		res := core.Branch{Name: resultName, Seq: -1, Target: core.Target{Kind: core.TargetLocal, Ref: refResult}, Status: core.BranchSucceeded}
		if cause == nil {
			if err := r.confirm(ctx); err != nil {
				return StatusRunning, nil, err
			}
			res.Payload = out
			if err := r.finish(ctx, StatusSucceeded, res); err != nil {
				return StatusRunning, nil, err
			}
			r.log.DebugContext(ctx, "workflow: succeeded")
			return StatusSucceeded, out, nil
		}
		res.Refusal = errText(cause)
		if err := r.put(ctx, res); err != nil {
			return StatusRunning, nil, err
		}
		p := core.Progress{GID: r.gid, From: StatusRunning, Next: StatusCompensating}
		if errors.Is(cause, coordinator.ErrTimeout) {
			p.Err = coordinator.ErrTimeout
		}
		if err := r.record(ctx, p); err != nil {
			return StatusRunning, nil, err
		}
		r.log.InfoContext(ctx, "workflow: compensating", slog.Any("err", cause))
		r.status = StatusCompensating
		cause = fmt.Errorf("workflow %s: %w: %w", r.gid, ErrCompensated, cause)
	case StatusCompensating:
		// Replay the function to learn the compensations of its completed steps.
		_, _ = r.invoke(ctx, fn, input)
		if errors.Is(r.halt, errReplayEnd) {
			r.halt = nil
		}
		if st, stop, err := r.halted(ctx); stop {
			return st, nil, err
		}
		cause = fmt.Errorf("workflow %s: %w", r.gid, ErrCompensated)
	default:
		return r.status, nil, fmt.Errorf("workflow %s is %s: %w", r.gid, r.status, coordinator.ErrInvalidState)
	}
	if err := r.compensate(ctx); err != nil {
		return StatusCompensating, nil, errors.Join(cause, err)
	}
	r.log.InfoContext(ctx, "workflow: compensated")
	return StatusCompensated, nil, cause
}

// halted ends a run whose function was halted: stopped when the replay diverged, left parked
// when sleeping, rescheduled with backoff otherwise.
func (r *run) halted(ctx context.Context) (coordinator.Status, bool, error) {
	switch {
	case r.halt == nil:
		return 0, false, nil
	case errors.Is(r.halt, ErrNondeterministic):
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.CleanupTimeout)
		defer cancel()
		r.log.ErrorContext(ctx, "workflow: stopped for an operator", slog.Any("err", r.halt))
		if err := r.c.b.Log.Park(wctx, r.tok, r.gid, r.status, StatusStopped, -1, r.halt.Error()); err != nil {
			r.recordErr = err
			return r.status, true, errors.Join(r.halt, err)
		}
		return StatusStopped, true, r.halt
	case errors.Is(r.halt, errSleeping):
		return r.status, true, fmt.Errorf("workflow %s: %w: %w", r.gid, coordinator.ErrIncomplete, r.halt)
	}
	if r.recordErr == nil {
		_ = r.record(ctx, core.Progress{GID: r.gid, From: r.status, Failed: r.failed, Err: r.halt})
	}
	return r.status, true, r.halt
}

// compensate runs the compensations not yet done, the last step's first, each recorded once
// done, then records the workflow compensated. A failure is recorded and rescheduled.
func (r *run) compensate(ctx context.Context) error {
	for i := len(r.comps) - 1; i >= 0; i-- {
		c := r.comps[i]
		if c.done {
			continue
		}
		var err error
		if c.local != nil {
			err = r.compensateLocal(ctx, c)
		} else {
			err = r.send(ctx, c.rec, c.op)
		}
		if err != nil {
			be := &coordinator.BranchError{GID: r.gid, Branch: c.rec.Name, Op: participant.OpCompensate, Err: err}
			if c.local == nil {
				be.Op = c.op
			}
			if rerr := r.record(ctx, core.Progress{GID: r.gid, From: StatusCompensating,
				Failed: []core.BranchFailure{{Branch: c.rec.Name, Err: err}}}); rerr != nil {
				return errors.Join(be, rerr)
			}
			return fmt.Errorf("workflow %s: compensate: %w: %w", r.gid, coordinator.ErrIncomplete, be)
		}
		c.rec.Status, c.done = doneStatus(c.op), true
		if err := r.put(ctx, c.rec); err != nil {
			return err
		}
	}
	return r.record(ctx, core.Progress{GID: r.gid, From: StatusCompensating, Next: StatusCompensated})
}

// confirm calls the confirms of the tried steps not yet confirmed, in step order, each recorded
// once done; a failure is recorded and the workflow rescheduled (the leader's replay confirms
// the rest: the function, deterministic, succeeds again).
func (r *run) confirm(ctx context.Context) error {
	for _, c := range r.confirms {
		if c.done {
			continue
		}
		if err := r.send(ctx, c.rec, participant.OpConfirm); err != nil {
			be := &coordinator.BranchError{GID: r.gid, Branch: c.rec.Name, Op: participant.OpConfirm, Err: err}
			if rerr := r.record(ctx, core.Progress{GID: r.gid, From: StatusRunning,
				Failed: []core.BranchFailure{{Branch: c.rec.Name, Err: err}}}); rerr != nil {
				return errors.Join(be, rerr)
			}
			return fmt.Errorf("workflow %s: confirm: %w: %w", r.gid, coordinator.ErrIncomplete, be)
		}
		c.rec.Status, c.done = core.BranchConfirmed, true
		if err := r.put(ctx, c.rec); err != nil {
			return err
		}
	}
	return nil
}

// compensateLocal runs a local step's compensation in a span; a panic is its failure.
func (r *run) compensateLocal(ctx context.Context, c *comp) (err error) {
	ctx, span := r.c.b.Tracer().Start(ctx, "workflow compensate", r.attrs(c.rec.Name))
	defer func() {
		if v := recover(); v != nil {
			r.log.ErrorContext(ctx, "workflow: compensation panicked", slog.String("step", c.rec.Name),
				slog.String("panic", fmt.Sprint(v)), slog.String("stack", string(debug.Stack())))
			err = &core.PanicError{Value: v}
		}
		if err != nil {
			r.c.b.Failures.Add(1)
			r.log.WarnContext(ctx, "workflow: compensation failed", slog.String("step", c.rec.Name), slog.Any("err", err))
		}
		obs.EndSpan(span, err)
	}()
	return c.local(ctx, c.rec.Payload)
}

// errText is err's text as a step's recorded error.
func errText(err error) string {
	if s := err.Error(); s != "" {
		return s
	}
	return "error"
}
