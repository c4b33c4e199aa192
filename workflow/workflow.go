package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/lock"
)

// MaxRecordSize bounds, in bytes of JSON, what a workflow records: its input, each step's result
// and participant payload, its output. Larger is refused with an error wrapping [ErrTooLarge].
const MaxRecordSize = 256 << 10

// The statuses of a workflow ([Coordinator.Status]).
const (
	StatusRunning      = core.StatusRunning      // its function runs (or waits for the leader)
	StatusCompensating = core.StatusCompensating // it failed; compensations under way
	StatusSucceeded    = core.StatusSucceeded    // its function returned its output (final)
	StatusCompensated  = core.StatusCompensated  // it failed and every compensation ran (final)
	StatusStopped      = core.StatusStopped      // a replay diverged from the log: stopped for an operator
)

// Coordinator runs workflows and, with [Coordinator.Run], resumes on the elected leader those
// whose starter vanished. Any number of Coordinators (processes) may share one schema; each may
// start workflows; the leader among them resumes them.
//
// Migrate, Register (of in-process participants), Status, Attach and Flush are those of
// [coordinator.Base].
//
// Coordinator is safe for concurrent use by multiple goroutines.
type Coordinator struct {
	coordinator.Base
	b   *core.Base
	mu  sync.RWMutex
	fns map[string]workflowFunc
}

// workflowFunc is a registered function with its input and output as JSON.
type workflowFunc func(ctx Context, input []byte) ([]byte, error)

// New returns a Coordinator whose log lives in pool, configured by the options of package
// coordinator. Workflows' tables are "txkit_workflow_global" and "txkit_workflow_branch" (a row
// per step), and their default timeout is 5m. New does not touch the database: call Migrate
// ([coordinator.Base]). It returns an error wrapping [coordinator.ErrInvalidOption] when an
// option is unusable.
func New(pool *pgxpool.Pool, opts ...coordinator.Option) (*Coordinator, error) {
	b, err := core.NewBase(pool, core.Protocol{Name: "workflow", Kind: core.KindWorkflow, Prefix: "txkit_workflow_", Timeout: 5 * time.Minute}, opts)
	if err != nil {
		return nil, err
	}
	return &Coordinator{Base: b, b: b, fns: map[string]workflowFunc{}}, nil
}

// Stats returns the coordinator's counters ([coordinator.Stats]): Failures counts failed
// participant calls and compensations, Violations refused compensations; both are retried.
func (c *Coordinator) Stats() coordinator.Stats { return c.b.Stats() }

// Register makes fn the workflow called name in c: [Coordinator.Start] runs it, and the leader
// runs it again to resume a workflow of that name. In and Out are encoded as JSON. An empty name
// or one registered before returns an error wrapping [coordinator.ErrInvalidOption]. It does not
// block.
func Register[In, Out any](c *Coordinator, name string, fn func(ctx Context, in In) (Out, error)) error {
	if name == "" || fn == nil {
		return fmt.Errorf("workflow: register %q: empty name or nil function: %w", name, coordinator.ErrInvalidOption)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fns[name] != nil {
		return fmt.Errorf("workflow: register %q: registered before: %w", name, coordinator.ErrInvalidOption)
	}
	c.fns[name] = func(ctx Context, input []byte) ([]byte, error) {
		var in In
		if err := json.Unmarshal(input, &in); err != nil {
			return nil, fmt.Errorf("workflow %s: decode input: %w: %w", name, ErrEncoding, err)
		}
		out, err := fn(ctx, in)
		if err != nil {
			return nil, err
		}
		return encode("output", out)
	}
	return nil
}

// encode returns v as JSON, or an error wrapping ErrEncoding or ErrTooLarge naming what.
func encode(what string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", what, ErrEncoding, err)
	}
	if len(b) > MaxRecordSize {
		return nil, fmt.Errorf("%s: %d bytes, more than %d: %w", what, len(b), MaxRecordSize, ErrTooLarge)
	}
	return b, nil
}

// record is a workflow's own payload in the log: its name and input.
type record struct {
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// Outcome is what a workflow ended with.
type Outcome struct {
	GID    string
	Status coordinator.Status // StatusSucceeded, StatusCompensated, or another when unfinished
	Output json.RawMessage    // the function's output (StatusSucceeded), JSON
}

// Decode decodes the output into v (a pointer), or returns an error wrapping [ErrEncoding].
func (o *Outcome) Decode(v any) error {
	if err := json.Unmarshal(o.Output, v); err != nil {
		return fmt.Errorf("workflow %s: decode output: %w: %w", o.GID, ErrEncoding, err)
	}
	return nil
}

// Start records a new workflow running the function registered as name with input, runs it in
// this goroutine — each step recorded before the function sees its outcome — and returns its
// outcome. The gid is [coordinator.WithGID] (default a new UUIDv7) and the deadline
// [coordinator.WithTimeout] (default [coordinator.WithDefaultTimeout], 5m): a workflow still
// running at it is compensated. ctx bounds the run, not the recording of what happened. The
// Outcome (nil only when nothing was recorded, below) carries the gid whatever the error.
//
//   - nil: the function returned; Output holds its result.
//   - [ErrCompensated], with the function's error (a refusal is a *[coordinator.BranchError]
//     wrapping participant.ErrRefused) or [coordinator.ErrTimeout]: the compensations ran; with
//     [coordinator.ErrIncomplete] too when some failed (the leader retries them).
//   - [coordinator.ErrIncomplete]: a participant call kept failing, a step panicked, a write
//     failed or ctx ended: the leader resumes the workflow (see [Coordinator.Wait]).
//   - [ErrNondeterministic]: the workflow is stopped for an operator.
//   - [ErrNotRegistered], [ErrEncoding] or [ErrTooLarge] for the input, or an error wrapping
//     [coordinator.ErrInvalidOption] for an option: nothing recorded, a nil Outcome. A gid
//     already used wraps [coordinator.ErrExists]: Wait gives that workflow's outcome.
func (c *Coordinator) Start(ctx context.Context, name string, input any, opts ...coordinator.BeginOption) (_ *Outcome, err error) {
	fn := c.lookup(name)
	if fn == nil {
		return nil, fmt.Errorf("workflow: start %q: %w", name, ErrNotRegistered)
	}
	in, err := encode("input", input)
	if err != nil {
		return nil, fmt.Errorf("workflow: start %q: %w", name, err)
	}
	o, err := c.b.Begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	payload, err := json.Marshal(record{Name: name, Input: in})
	if err != nil {
		return nil, fmt.Errorf("workflow: start %q: %w: %w", name, ErrEncoding, err)
	}
	out := &Outcome{GID: o.GID, Status: StatusRunning}
	ctx, span := c.b.Tracer().Start(ctx, "workflow "+name, trace.WithAttributes(attribute.String(core.AttrGID, o.GID)))
	defer func() { obs.EndSpan(span, err) }()
	if err := c.b.Log.Create(ctx, o.GID, core.KindWorkflow, o.Timeout, payload); err != nil {
		return out, fmt.Errorf("workflow: start %q: %w", name, err)
	}
	r := c.newRun(lock.Token{}, o.GID, name, StatusRunning, nil)
	deadline, cancel := context.WithTimeoutCause(ctx, o.Timeout, coordinator.ErrTimeout)
	defer cancel()
	out.Status, out.Output, err = r.drive(ctx, deadline, fn, in)
	return out, err
}

func (c *Coordinator) lookup(name string) workflowFunc {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.fns[name]
}

// Wait waits until gid's workflow ends — succeeded, compensated or stopped — and returns its
// outcome, with the error [Coordinator.Start] would have returned (the function's error as text
// only). It reads the log with delays from 10ms doubling to 500ms. An unknown gid returns an
// error wrapping [coordinator.ErrNotFound]; ctx ending first the outcome last read with an error
// wrapping [coordinator.ErrIncomplete] and ctx's error.
func (c *Coordinator) Wait(ctx context.Context, gid string) (*Outcome, error) {
	delay := 10 * time.Millisecond
	for {
		t, err := c.b.Log.Get(ctx, gid)
		if err != nil && (ctx.Err() == nil || errors.Is(err, coordinator.ErrNotFound)) {
			return nil, fmt.Errorf("workflow: wait: %w", err)
		}
		if err == nil && (t.Status.Final() || t.Status == StatusStopped) {
			return outcomeOf(t)
		}
		tm := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			tm.Stop()
			o := &Outcome{GID: gid}
			if t != nil {
				o.Status = t.Status
			}
			return o, fmt.Errorf("workflow: wait %s: %w: %w", gid, coordinator.ErrIncomplete, context.Cause(ctx))
		case <-tm.C:
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// outcomeOf reads the outcome of a finished or stopped workflow from its log rows.
func outcomeOf(t *core.Transaction) (*Outcome, error) {
	o := &Outcome{GID: t.GID, Status: t.Status}
	var res *core.Branch
	for i := range t.Branches {
		if t.Branches[i].Name == resultName {
			res = &t.Branches[i]
		}
	}
	switch t.Status {
	case StatusSucceeded:
		if res != nil {
			o.Output = res.Payload
		}
		return o, nil
	case StatusStopped:
		return o, fmt.Errorf("workflow %s: stopped: %s: %w", t.GID, t.LastError, ErrNondeterministic)
	}
	why := "rolled back"
	if res != nil && res.Refusal != "" {
		why = res.Refusal
	}
	return o, fmt.Errorf("workflow %s: %s: %w", t.GID, why, ErrCompensated)
}

// Run resumes, while this coordinator leads the election of [coordinator.WithElector], the
// workflows whose starter vanished, whose participant calls failed or whose durable sleep is
// over: it runs their function again (recorded steps return their records), or compensates them
// once their timeout has passed (by PostgreSQL's clock). It also deletes finished workflows past
// the retention. It blocks until ctx ends, then returns nil after every goroutine it started has
// exited. It returns an error wrapping [coordinator.ErrInvalidOption] without an elector,
// [coordinator.ErrRunning] when another Run is running, and one wrapping [lock.ErrClosed] when the
// elector's session is closed.
func (c *Coordinator) Run(ctx context.Context) error {
	return c.b.Run(ctx, core.DriverFunc(c.resume))
}

// resume is the recovery's driver: a drive records its own failures (rescheduled), so only an
// unreadable or unregistered workflow, or a failed recording, is returned (rescheduled with
// backoff by the core).
func (c *Coordinator) resume(ctx context.Context, tok lock.Token, t *core.Transaction) error {
	var rec record
	if err := json.Unmarshal(t.Payload, &rec); err != nil {
		return fmt.Errorf("workflow: %s: unreadable record: %w", t.GID, err)
	}
	fn := c.lookup(rec.Name)
	if fn == nil {
		return fmt.Errorf("workflow: %s: %q: %w", t.GID, rec.Name, ErrNotRegistered)
	}
	r := c.newRun(tok, t.GID, rec.Name, t.Status, t.Branches)
	deadline := ctx
	if t.Status == StatusRunning {
		// The claim set updated_at to PostgreSQL's now(): compare it, not our clock, with the timeout.
		var cancel context.CancelFunc
		deadline, cancel = context.WithTimeoutCause(ctx, t.TimeoutAt.Sub(t.UpdatedAt), coordinator.ErrTimeout)
		defer cancel()
	}
	_, _, err := r.drive(ctx, deadline, fn, rec.Input)
	if r.recordErr != nil {
		return r.recordErr
	}
	if errors.Is(err, ErrNotRegistered) {
		return err
	}
	return nil
}

func (c *Coordinator) newRun(tok lock.Token, gid, name string, st coordinator.Status, recs []core.Branch) *run {
	r := &run{c: c, tok: tok, gid: gid, name: name, status: st, names: map[string]int{}, recs: map[int]core.Branch{},
		log: c.b.Cfg.Logger.With(slog.String("gid", gid), slog.String("workflow", name))}
	if !tok.IsZero() {
		r.log = r.log.With(slog.String("token", tok.String()))
	}
	for _, b := range recs {
		if b.Name == resultName {
			continue
		}
		r.recs[b.Seq] = b
	}
	return r
}
