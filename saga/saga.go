package saga

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/participant"
)

// Coordinator runs sagas and, with [Coordinator.Run], finishes on the elected leader those whose
// starter vanished. Any number of Coordinators (processes) may share one schema; each may submit
// sagas; the leader among them recovers.
//
// Migrate, Register, Status and Flush are those of [coordinator.Base].
//
// Coordinator is safe for concurrent use by multiple goroutines.
type Coordinator struct {
	coordinator.Base
	b *core.Base
	o *options // saga's own settings
}

// New returns a Coordinator whose log lives in pool, configured by the options of package
// coordinator and [WithAttempts]. Sagas' tables are "txkit_saga_global" and "txkit_saga_branch",
// and their default timeout is 5m. New does
// not touch the database: call Migrate ([coordinator.Base]). It returns an error wrapping
// [coordinator.ErrInvalidOption] when an option is unusable.
func New(pool *pgxpool.Pool, opts ...coordinator.Option) (*Coordinator, error) {
	o := &options{attempts: 3}
	b, err := core.NewBase(pool, core.Protocol{Name: "saga", Kind: core.KindSaga, Prefix: "txkit_saga_", Timeout: 5 * time.Minute, Own: o}, opts)
	if err != nil {
		return nil, err
	}
	return &Coordinator{Base: b, b: b, o: o}, nil
}

// Stats returns the coordinator's counters ([coordinator.Stats]): Violations counts refused
// compensations (a participant broke the protocol: a compensation must succeed eventually),
// Failures the failed calls other than refused actions; both are retried. The other fields stay
// zero.
func (c *Coordinator) Stats() coordinator.Stats { return c.b.Stats() }

// Step is one step of a saga: an action, and the compensation that undoes it, both carried out by
// one participant (the requests' Op says which: [participant.OpAction], [participant.OpCompensate]).
type Step struct {
	// Name identifies the step within the saga (the participant's barrier key with the gid).
	Name string
	// Participant is a participant.HTTP (its URL is stored) or one returned by
	// Register (its name is stored), so a recovering coordinator can call it.
	Participant participant.Participant
	// Payload is sent with the action and the compensation; empty or JSON.
	Payload json.RawMessage
	// Timeout bounds each call of the step's action and compensation, the recovery's too
	// (default: the call timeout of coordinator.WithRetry); negative is refused.
	Timeout time.Duration
	// DependsOn names the steps whose actions must succeed before this one's starts, all added
	// before it. nil means the step added just before (a sequential saga); an empty, non-nil
	// slice means none: the step may start at once, alongside others ([coordinator.WithConcurrency]).
	DependsOn []string
}

// Saga is a saga being built by [Coordinator.Begin]: Add its steps, then Submit it. Saga is not
// safe for concurrent use: build and submit it from one goroutine.
type Saga struct {
	c         *Coordinator
	gid       string
	timeout   time.Duration
	steps     []*step
	byName    map[string]*step
	err       error // the first Add refused: Submit refuses too
	submitted bool
}

// step is a step as the log holds it.
type step struct {
	name    string
	seq     int
	target  core.Target
	payload []byte
	deps    []string
	status  core.BranchStatus
}

// Begin returns a new saga to build. It writes nothing and does not block: the saga is recorded
// by [Saga.Submit]. It takes ctx as every coordinator's Begin does (tcc's may write): a ctx
// already done returns an error wrapping its error. The saga's timeout is
// [coordinator.WithTimeout], default [coordinator.WithDefaultTimeout]; a non-positive one, or an
// invalid gid (see [coordinator.WithGID]), returns an error wrapping
// [coordinator.ErrInvalidOption].
func (c *Coordinator) Begin(ctx context.Context, opts ...coordinator.BeginOption) (*Saga, error) {
	o, err := c.b.Begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &Saga{c: c, gid: o.GID, timeout: o.Timeout, byName: map[string]*step{}}, nil
}

// GID returns the saga's id.
func (s *Saga) GID() string { return s.gid }

// Add appends st to the saga. It checks st at once and returns an error wrapping
// [coordinator.ErrInvalidBranch] for an empty or already used name, a DependsOn naming no step added before
// (which also rules out cycles), a payload that is not JSON, or a participant that is neither a
// participant.HTTP with a URL nor one returned by Register ([coordinator.Base]); a saga that refused a
// step refuses to be submitted. After Submit, Add returns [coordinator.ErrInvalidState]. It does not block.
func (s *Saga) Add(st Step) error {
	if err := s.add(st); err != nil {
		if s.err == nil {
			s.err = err
		}
		return err
	}
	return nil
}

func (s *Saga) add(st Step) error {
	if s.submitted {
		return fmt.Errorf("saga: add %q to %s: already submitted: %w", st.Name, s.gid, coordinator.ErrInvalidState)
	}
	switch {
	case st.Name == "":
		return fmt.Errorf("saga: step %d of %s: empty name: %w", len(s.steps), s.gid, coordinator.ErrInvalidBranch)
	case s.byName[st.Name] != nil:
		return fmt.Errorf("saga: step %q of %s: name already used: %w", st.Name, s.gid, coordinator.ErrInvalidBranch)
	case len(st.Payload) > 0 && !json.Valid(st.Payload):
		return fmt.Errorf("saga: step %q of %s: payload is not JSON: %w", st.Name, s.gid, coordinator.ErrInvalidBranch)
	}
	target, err := s.c.b.Target(st.Participant)
	if err == nil {
		target, err = target.WithTimeout(st.Timeout)
	}
	if err != nil {
		return fmt.Errorf("saga: step %q of %s: %w", st.Name, s.gid, err)
	}
	var uniq []string // st's dependencies, each once (never the caller's slice)
	if st.DependsOn == nil {
		if len(s.steps) > 0 {
			uniq = []string{s.steps[len(s.steps)-1].name}
		}
	} else {
		var seen map[string]bool // past a few dependencies; below, uniq is searched
		if len(st.DependsOn) > 8 {
			seen = make(map[string]bool, len(st.DependsOn))
		}
		for _, d := range st.DependsOn {
			if s.byName[d] == nil {
				return fmt.Errorf("saga: step %q of %s: depends on %q, which is not a step added before it: %w", st.Name, s.gid, d, coordinator.ErrInvalidBranch)
			}
			if seen != nil && !seen[d] || seen == nil && !slices.Contains(uniq, d) {
				if seen != nil {
					seen[d] = true
				}
				uniq = append(uniq, d)
			}
		}
	}
	stp := &step{name: st.Name, seq: len(s.steps), target: target, payload: st.Payload, deps: uniq, status: core.BranchPending}
	s.steps = append(s.steps, stp)
	s.byName[st.Name] = stp
	return nil
}

// meta is the saga's own payload in the log: the dependencies, so a recovering coordinator
// runs (and compensates) the steps in the same order.
type meta struct {
	Deps map[string][]string `json:"deps,omitempty"`
}

// encodeMeta returns the JSON of the steps' meta (the steps with dependencies, in step order),
// written by hand where every name is plain ASCII: json.Marshal of the map allocates for its
// reflection and its sorted keys, on every saga (issue 33).
func encodeMeta(steps []*step) ([]byte, error) {
	plain := func(n string) bool {
		for i := range len(n) {
			if c := n[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				return false
			}
		}
		return true
	}
	size := len(`{"deps":{}}`)
	for _, st := range steps {
		if len(st.deps) == 0 {
			continue
		}
		if !plain(st.name) || slices.ContainsFunc(st.deps, func(d string) bool { return !plain(d) }) {
			m := meta{Deps: map[string][]string{}}
			for _, st := range steps {
				if len(st.deps) > 0 {
					m.Deps[st.name] = st.deps
				}
			}
			return json.Marshal(m)
		}
		size += len(st.name) + 6
		for _, d := range st.deps {
			size += len(d) + 3
		}
	}
	b := make([]byte, 0, size)
	b = append(b, `{"deps":{`...)
	first := true
	for _, st := range steps {
		if len(st.deps) == 0 {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(append(append(b, '"'), st.name...), `":[`...)
		for i, d := range st.deps {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(append(append(b, '"'), d...), '"')
		}
		b = append(b, ']')
	}
	if first {
		return []byte(`{}`), nil // as json.Marshal writes a meta without dependencies (omitempty)
	}
	return append(b, "}}"...), nil
}

// Submit records the saga and all its steps in one write, runs the actions in dependency order
// (at most [coordinator.WithConcurrency] at once) and records the outcome. It blocks until the saga
// ends or stalls; ctx bounds the calls, not the recording of their outcomes.
//
//   - nil: every action succeeded.
//   - [participant.ErrRefused] (a *[coordinator.BranchError] for the refused action): the saga was
//     compensated; with [coordinator.ErrIncomplete] too when some compensations failed (the
//     leader retries them until they succeed).
//   - [coordinator.ErrTimeout]: the timeout passed while actions ran; compensated as above.
//   - [coordinator.ErrIncomplete] alone: an action kept failing transiently ([WithAttempts]),
//     panicked (recovered, recorded as "panic: <value>") or ctx ended; the leader carries on,
//     forward until the timeout, then compensating.
//   - [coordinator.ErrInvalidBranch]: bad steps ([Saga.Add] refused one) or none; nothing recorded.
//   - [coordinator.ErrInvalidState]: a gid already used (then also [coordinator.ErrExists]: no
//     action was called; Attach of [coordinator.Base] gives that saga's outcome), or a second Submit.
//
// Which steps are compensated, in what order: docs/coordinators.md.
func (s *Saga) Submit(ctx context.Context) error {
	switch {
	case s.submitted:
		return fmt.Errorf("saga: submit %s: already submitted: %w", s.gid, coordinator.ErrInvalidState)
	case s.err != nil:
		return fmt.Errorf("saga: submit %s: a step was refused: %w", s.gid, s.err)
	case len(s.steps) == 0:
		return fmt.Errorf("saga: submit %s: no step: %w", s.gid, coordinator.ErrInvalidBranch)
	}
	branches := make([]core.Branch, len(s.steps))
	for i, st := range s.steps {
		branches[i] = core.Branch{Name: st.name, Seq: st.seq, Target: st.target, Payload: st.payload}
	}
	payload, err := encodeMeta(s.steps)
	if err != nil {
		return fmt.Errorf("saga: submit %s: %w", s.gid, err)
	}
	if err := s.c.b.Log.Create(ctx, s.gid, core.KindSaga, s.timeout, payload, branches...); err != nil {
		return fmt.Errorf("saga: submit: %w", err)
	}
	s.submitted = true
	d := &driver{c: s.c, gid: s.gid, steps: s.steps, byName: s.byName, attempts: s.c.o.attempts,
		exact: true, recorded: time.Now()}
	deadline, cancel := context.WithTimeoutCause(ctx, s.timeout, coordinator.ErrTimeout)
	defer cancel()
	return d.run(ctx, deadline, core.StatusRunning)
}

// Run recovers, while this coordinator leads the election of [coordinator.WithElector], the sagas whose
// starter vanished or whose calls failed: a running saga is driven forward, or compensated once
// its timeout has passed (by PostgreSQL's clock); a compensating saga is compensated. It also
// deletes finished sagas past the retention. It blocks until ctx ends, then returns nil after
// every goroutine it started has exited. It returns an error wrapping [coordinator.ErrInvalidOption] without
// an elector, [coordinator.ErrRunning] when another Run is running, and one wrapping [lock.ErrClosed] when
// the elector's session is closed.
func (c *Coordinator) Run(ctx context.Context) error {
	return c.b.Run(ctx, core.DriverFunc(c.recoverOne))
}

// recoverOne is the recovery's driver. Failures of calls are recorded (and rescheduled) by the
// drive, so only a failed recording, or an unreadable saga (dependencies that are not JSON or
// name no step of it), is returned: the core reschedules it with backoff.
func (c *Coordinator) recoverOne(ctx context.Context, tok lock.Token, t *core.Transaction) error {
	var m meta
	if len(t.Payload) > 0 {
		if err := json.Unmarshal(t.Payload, &m); err != nil {
			return fmt.Errorf("saga: %s: unreadable dependencies: %w", t.GID, err)
		}
	}
	d := &driver{c: c, tok: tok, gid: t.GID, byName: map[string]*step{}, attempts: 1, recorded: time.Now()}
	for _, b := range t.Branches {
		st := &step{name: b.Name, seq: b.Seq, target: b.Target, payload: b.Payload, deps: m.Deps[b.Name], status: b.Status}
		d.steps = append(d.steps, st)
		d.byName[b.Name] = st
	}
	sort.SliceStable(d.steps, func(i, j int) bool { return d.steps[i].seq < d.steps[j].seq })
	for _, st := range d.steps {
		for _, dep := range st.deps {
			if d.byName[dep] == nil {
				// Submit never writes this; a log row written otherwise must not crash the leader.
				return fmt.Errorf("saga: %s: step %q depends on %q, which is not a step of the saga: %w",
					t.GID, st.name, dep, coordinator.ErrInvalidState)
			}
		}
	}
	from := t.Status
	deadline := ctx
	if from == core.StatusRunning {
		// The claim set updated_at to PostgreSQL's now(): compare it, not our clock, with the timeout.
		if !t.TimeoutAt.After(t.UpdatedAt) {
			deadline = canceled(ctx, coordinator.ErrTimeout)
		} else {
			var cancel context.CancelFunc
			deadline, cancel = context.WithTimeoutCause(ctx, t.TimeoutAt.Sub(t.UpdatedAt), coordinator.ErrTimeout)
			defer cancel()
		}
	}
	err := d.run(ctx, deadline, from)
	if d.recordErr != nil {
		return d.recordErr
	}
	if errors.Is(err, coordinator.ErrInvalidState) {
		return err
	}
	return nil // the outcome, or the failures, are recorded
}

// canceled returns a context already cancelled with cause, as a child of ctx.
func canceled(ctx context.Context, cause error) context.Context {
	c, cancel := context.WithCancelCause(ctx)
	cancel(cause)
	return c
}

// driver drives one saga, for its starter (tok zero) or the leader.
type driver struct {
	c        *Coordinator
	tok      lock.Token
	gid      string
	steps    []*step // in seq order
	byName   map[string]*step
	attempts int // calls per op before the failure is recorded
	// log is the saga's logger (its gid, and the leader's token), made by logger on first use:
	// With formats the attributes, a cost a saga that logs nothing need not pay (issue 33).
	log     *slog.Logger
	logOnce sync.Once
	// completed ranks the steps whose action succeeded in this drive, by completion.
	completed map[string]int
	recordErr error // the last recording that failed, for the recovery to report
	// exact: the driver has seen the saga from its start (Submit), so a pending step whose
	// dependencies did not all succeed never ran. A recovering driver cannot know it: steps'
	// successes are recorded only when the saga moves on (or the lease needs renewing), so any
	// pending step may have run before the starter died.
	exact    bool
	recorded time.Time // the last record this driver wrote (renewing its lease)
}

// run drives the saga from status st: forward while running (its actions launched while
// deadline lasts), then compensating if an action was refused or the deadline passed.
func (d *driver) run(ctx, deadline context.Context, st coordinator.Status) error {
	var cause error
	if st == core.StatusRunning {
		var moved bool
		var err error
		moved, cause, err = d.forward(ctx, deadline)
		if !moved {
			return err
		}
	}
	if st != core.StatusRunning && st != core.StatusCompensating {
		return fmt.Errorf("saga: %s is %s: %w", d.gid, st, coordinator.ErrInvalidState)
	}
	if err := d.compensate(ctx); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

// forward runs the pending actions. It returns moved=true when the saga must now be compensated
// (cause says why: the refusal or the timeout), or moved=false with Submit's result otherwise.
func (d *driver) forward(ctx, deadline context.Context) (moved bool, cause, err error) {
	nodes := d.pendingNodes()
	var refused *core.BranchFailure
	res := walk(deadline, d.c.b.Cfg.Concurrency, nodes,
		func(ctx context.Context, name string) error {
			return d.call(ctx, d.byName[name], participant.OpAction)
		},
		func(error) bool { return true }, // stop launching at the first failure
		func(done []string) error {
			// Successes are recorded when the saga moves on; in between, only to renew the lease
			// before it runs out. Re-sending an action after a crash is harmless (participants
			// are idempotent), and compensation treats unrecorded steps as possibly run.
			if time.Since(d.recorded) < d.c.b.Log.Lease()/2 {
				return nil
			}
			return d.record(ctx, core.Progress{GID: d.gid, From: core.StatusRunning, Done: done, Renew: true})
		})
	d.completed = map[string]int{}
	for i, name := range res.done {
		d.byName[name].status = core.BranchSucceeded
		d.completed[name] = i
	}
	for i, f := range res.failed {
		if errors.Is(f.Err, participant.ErrRefused) {
			refused = &res.failed[i]
			break
		}
	}
	timedOut := ctx.Err() == nil && errors.Is(context.Cause(deadline), coordinator.ErrTimeout)
	p := core.Progress{GID: d.gid, From: core.StatusRunning, Done: res.done, Failed: res.failed}
	switch {
	case len(res.done) == len(nodes):
		p.Next = core.StatusSucceeded
	case refused != nil:
		p.Next = core.StatusCompensating
		cause = fmt.Errorf("saga: %w", &coordinator.BranchError{GID: d.gid, Branch: refused.Branch, Op: participant.OpAction, Err: refused.Err})
	case timedOut:
		p.Next, p.Err = core.StatusCompensating, coordinator.ErrTimeout
		cause = fmt.Errorf("saga: %s: %w", d.gid, coordinator.ErrTimeout)
	default:
		p.Err = res.stopErr
		if p.Err == nil && ctx.Err() != nil {
			p.Err = context.Cause(ctx)
		}
	}
	if err := d.record(ctx, p); err != nil {
		return false, nil, fmt.Errorf("saga: %s: %w", d.gid, err)
	}
	switch p.Next {
	case core.StatusSucceeded:
		if d.c.b.Cfg.Logger.Enabled(ctx, slog.LevelDebug) {
			d.logger().DebugContext(ctx, "saga: succeeded")
		}
		return false, nil, nil
	case core.StatusCompensating:
		d.logger().InfoContext(ctx, "saga: compensating", slog.Any("err", cause))
		return true, cause, nil
	}
	errs := []error{coordinator.ErrIncomplete}
	for _, f := range res.failed {
		errs = append(errs, &coordinator.BranchError{GID: d.gid, Branch: f.Branch, Op: participant.OpAction, Err: f.Err})
	}
	if p.Err != nil {
		errs = append(errs, p.Err)
	}
	return false, nil, fmt.Errorf("saga: %s: %w", d.gid, errors.Join(errs...))
}

// pendingNodes is the walk's graph of the steps still pending, each blocked by its dependencies
// that have not succeeded.
func (d *driver) pendingNodes() []node {
	nodes := make([]node, 0, len(d.steps))
	for _, st := range d.steps {
		if st.status != core.BranchPending {
			continue
		}
		n := node{name: st.name, prio: -st.seq, blockers: st.deps} // the walk does not change them
		if slices.ContainsFunc(st.deps, func(dep string) bool { return d.byName[dep].status == core.BranchSucceeded }) {
			n.blockers = nil
			for _, dep := range st.deps {
				if d.byName[dep].status != core.BranchSucceeded {
					n.blockers = append(n.blockers, dep)
				}
			}
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// compensate calls the compensations of the steps to undo, reverse order, and records the outcome.
//
// The steps to undo are those whose action succeeded, and those still pending whose action may
// have run. For the starter (exact), that is a pending step whose dependencies all succeeded
// (refused, failed, timed out, or in flight when it stopped): one past them never started. A
// recovering driver cannot know what an earlier drive ran without recording it, so it undoes
// every pending step; for one that never ran that is an empty compensation. A compensation starts only after those of the steps that
// depend on it; among the ready ones the last completed goes first (unknown outcomes before all,
// then the completions of this drive, then earlier ones by step order).
func (d *driver) compensate(ctx context.Context) error {
	undo := map[string]bool{}
	for _, st := range d.steps {
		switch st.status {
		case core.BranchSucceeded, core.BranchCompensated:
			undo[st.name] = true
		case core.BranchPending:
			ran := true
			for _, dep := range st.deps {
				if !d.exact {
					break // a recovering driver cannot tell: undo it (an empty compensation at worst)
				}
				if s := d.byName[dep].status; s != core.BranchSucceeded && s != core.BranchCompensated {
					ran = false
				}
			}
			undo[st.name] = ran
		}
	}
	dependents := map[string][]string{}
	for _, st := range d.steps {
		for _, dep := range st.deps {
			dependents[dep] = append(dependents[dep], st.name)
		}
	}
	n := len(d.steps)
	var nodes []node
	var already []string
	for _, st := range d.steps {
		if !undo[st.name] {
			continue
		}
		if st.status == core.BranchCompensated {
			already = append(already, st.name)
			continue
		}
		nd := node{name: st.name, prio: st.seq}
		if st.status == core.BranchPending {
			nd.prio = 3*n + st.seq
		} else if i, ok := d.completed[st.name]; ok {
			nd.prio = n + i
		}
		for _, dep := range dependents[st.name] {
			if undo[dep] && d.byName[dep].status != core.BranchCompensated {
				nd.blockers = append(nd.blockers, dep)
			}
		}
		nodes = append(nodes, nd)
	}
	res := walk(ctx, d.c.b.Cfg.Concurrency, nodes,
		func(ctx context.Context, name string) error {
			return d.call(ctx, d.byName[name], participant.OpCompensate)
		}, nil, nil)
	p := core.Progress{GID: d.gid, From: core.StatusCompensating, Done: append(already, res.done...), Failed: res.failed}
	if len(res.done) == len(nodes) {
		p.Next = core.StatusCompensated
	} else if len(res.failed) == 0 {
		p.Err = context.Cause(ctx)
	}
	if err := d.record(ctx, p); err != nil {
		return fmt.Errorf("saga: %s: %w", d.gid, err)
	}
	if p.Next != 0 {
		d.logger().InfoContext(ctx, "saga: compensated")
		return nil
	}
	errs := []error{coordinator.ErrIncomplete}
	for _, f := range res.failed {
		errs = append(errs, &coordinator.BranchError{GID: d.gid, Branch: f.Branch, Op: participant.OpCompensate, Err: f.Err})
	}
	if p.Err != nil {
		errs = append(errs, p.Err)
	}
	return fmt.Errorf("saga: compensate %s: %w", d.gid, errors.Join(errs...))
}

// logger returns the saga's logger, made on the first call (calls run on several goroutines).
func (d *driver) logger() *slog.Logger {
	d.logOnce.Do(func() {
		if d.tok.IsZero() {
			d.log = d.c.b.Cfg.Logger.With(slog.String("gid", d.gid))
		} else {
			d.log = d.c.b.Cfg.Logger.With(slog.String("gid", d.gid), slog.String("token", d.tok.String()))
		}
	})
	return d.log
}

// record writes p (fenced with the driver's token), not bounded by a cancelled ctx.
func (d *driver) record(ctx context.Context, p core.Progress) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.CleanupTimeout)
	defer cancel()
	err := d.c.b.Log.Record(rctx, d.tok, p)
	d.recorded = time.Now()
	if err != nil {
		d.recordErr = err
	}
	return err
}

// call calls op on st's participant up to d.attempts times while it fails transiently, waiting
// with backoff in between ([core.Base.CallAttempts]). A refused action returns at once; a refused
// compensation breaks the protocol: it is counted and retried like any failure.
func (d *driver) call(ctx context.Context, st *step, op participant.Op) error {
	return d.c.b.CallAttempts(ctx, d.logger, st.target, participant.Request{GID: d.gid, Branch: st.name, Op: op, Payload: st.payload}, d.attempts)
}

// node is one call of a walk.
type node struct {
	name     string
	blockers []string // nodes of the walk that must succeed first
	prio     int      // among ready nodes, the higher starts first
}

type walkResult struct {
	done    []string // in completion order
	failed  []core.BranchFailure
	stopErr error // the checkpoint's failure
}

// walk calls do on every node once its blockers have succeeded, at most limit at once, until
// none is left to start: a node whose blocker failed never starts. It stops starting nodes when
// ctx ends or stop approves a failure, and returns after every call it started has returned.
// checkpoint, when set, is given the successes not yet checkpointed before a node that depends
// on one of them starts; when it fails, walk stops starting nodes.
func walk(ctx context.Context, limit int, nodes []node, do func(context.Context, string) error,
	stop func(error) bool, checkpoint func([]string) error) walkResult {
	type outcome struct {
		i   int
		err error
	}
	var w walker
	w.init(nodes)
	var results chan outcome // made for the first call on a goroutine of its own
	running, stopped := 0, false
	for {
		if !stopped && ctx.Err() == nil && len(w.ready) > 0 && running < limit {
			if len(w.ready) > 1 {
				slices.SortStableFunc(w.ready, func(i, j int) int { return cmp.Compare(nodes[j].prio, nodes[i].prio) })
			}
			k := min(limit-running, len(w.ready))
			if checkpoint != nil && w.needsCheckpoint(k) {
				if err := w.save(checkpoint); err != nil {
					w.res.stopErr, stopped = err, true
					continue
				}
			}
			if k == 1 && running == 0 {
				// A lone call (every step of a sequential saga) runs on this goroutine: with
				// nothing else in flight there is no other outcome to react to meanwhile, and a
				// goroutine of its own would cost its start and the growth of a fresh stack to
				// the depth of an HTTP or gRPC call.
				i := w.ready[0]
				w.ready = w.ready[1:]
				w.outcome(i, do(ctx, nodes[i].name), stop, &stopped)
				continue
			}
			if results == nil {
				results = make(chan outcome, len(nodes))
			}
			for _, i := range w.ready[:k] {
				running++
				go func() { results <- outcome{i, do(ctx, nodes[i].name)} }()
			}
			w.ready = w.ready[k:]
		}
		if running == 0 {
			if len(w.res.done) == 0 {
				w.res.done = nil // none: as the log's statements take it (NULL, not an empty array)
			}
			return w.res
		}
		o := <-results
		running--
		w.outcome(o.i, o.err, stop, &stopped)
	}
}

// outcome records the outcome of node i's call: a failure (stopped set when stop approves it) or
// a success.
func (w *walker) outcome(i int, err error, stop func(error) bool, stopped *bool) {
	if err != nil {
		w.res.failed = append(w.res.failed, core.BranchFailure{Branch: w.nodes[i].name, Err: err})
		if stop != nil && stop(err) {
			*stopped = true
		}
		return
	}
	w.succeeded(i)
}

// walker is the graph state of one walk; it is used by walk's goroutine only. Nodes are named by
// their index in nodes; a walk allocates a few slices, not a map per kind of state (issue 33).
type walker struct {
	nodes []node
	state []nodeState
	deps  []int // the nodes each node blocks: node i's are deps[state[i].from:state[i].to]
	ready []int // nodes whose blockers all succeeded, not started yet
	saved int   // res.done[:saved] are checkpointed
	res   walkResult
}

type nodeState struct {
	waiting  int // blockers not yet succeeded
	from, to int
}

func (w *walker) init(nodes []node) {
	w.nodes = nodes
	w.state = make([]nodeState, len(nodes))
	w.ready = make([]int, 0, len(nodes))
	w.res.done = make([]string, 0, len(nodes))
	// A blocker that names no node of the walk never succeeds: its node never starts.
	index := func(name string) int { return slices.IndexFunc(nodes, func(n node) bool { return n.name == name }) }
	if len(nodes) > 8 {
		m := make(map[string]int, len(nodes))
		for i, n := range nodes {
			m[n.name] = i
		}
		index = func(name string) int {
			if i, ok := m[name]; ok {
				return i
			}
			return -1
		}
	}
	edges := 0
	for i, n := range nodes {
		w.state[i].waiting = len(n.blockers)
		edges += len(n.blockers)
		if len(n.blockers) == 0 {
			w.ready = append(w.ready, i)
		}
	}
	if edges == 0 {
		return
	}
	// Count each node's dependents, lay their lists out in deps, then fill them in node order.
	blockers := make([]int, 0, edges) // the index of every blocker, -1: none of the walk
	for _, n := range nodes {
		for _, b := range n.blockers {
			j := index(b)
			blockers = append(blockers, j)
			if j >= 0 {
				w.state[j].to++
			}
		}
	}
	at := 0
	for j := range w.state {
		w.state[j].from, at = at, at+w.state[j].to
		w.state[j].to = w.state[j].from
	}
	w.deps = make([]int, at)
	e := 0
	for i, n := range nodes {
		for range n.blockers {
			if j := blockers[e]; j >= 0 {
				w.deps[w.state[j].to] = i
				w.state[j].to++
			}
			e++
		}
	}
}

// needsCheckpoint reports whether one of the next k ready nodes depends on a success not yet
// checkpointed.
func (w *walker) needsCheckpoint(k int) bool {
	if w.saved == len(w.res.done) {
		return false
	}
	for _, i := range w.ready[:k] {
		for _, b := range w.nodes[i].blockers {
			if slices.Contains(w.res.done[w.saved:], b) {
				return true
			}
		}
	}
	return false
}

// save gives checkpoint the successes not yet checkpointed, in completion order; once it
// succeeds they are checkpointed.
func (w *walker) save(checkpoint func([]string) error) error {
	n := len(w.res.done)
	if err := checkpoint(w.res.done[w.saved:n:n]); err != nil {
		return err
	}
	w.saved = n
	return nil
}

// succeeded records node i's success and readies the nodes it was the last blocker of.
func (w *walker) succeeded(i int) {
	w.res.done = append(w.res.done, w.nodes[i].name)
	for _, dn := range w.deps[w.state[i].from:w.state[i].to] {
		if w.state[dn].waiting--; w.state[dn].waiting == 0 {
			w.ready = append(w.ready, dn)
		}
	}
}
