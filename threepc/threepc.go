package threepc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/prepared"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/participant"
)

// Coordinator runs three-phase commits over PostgreSQL databases (their own PREPARE TRANSACTION)
// and other participants (HTTP or in-process, each behind an agent of package threepc/agent), and, with
// [Coordinator.Run], finishes on the elected leader those whose starter vanished. Any number of
// Coordinators (processes) may share one schema; each may start transactions; the leader among
// them recovers. It is also the decision log of the agents in consult-log mode
// ([Coordinator.Decide]).
//
// Migrate, Register, Status and Flush are those of [coordinator.Base].
//
// Coordinator is safe for concurrent use by multiple goroutines.
type Coordinator struct {
	coordinator.Base
	b     *core.Base
	o     *options // threepc's own settings
	ns    prepared.Namespace
	dbs   *prepared.Registry // the registered databases
	stats struct{ committed, aborted, agentAborts atomic.Int64 }
}

// New returns a Coordinator whose log lives in pool, configured by the options of package
// coordinator and this package's own ([WithTimeouts]). Its tables are "txkit_3pc_global" and
// "txkit_3pc_branch", and its default global timeout is 1m. It does not touch the database: call
// Migrate ([coordinator.Base]), and [Coordinator.Close] when done. It returns an error wrapping
// [coordinator.ErrInvalidOption] when an option is unusable — among them a participant timeout
// that is not between the phases' timeouts and the global timeout, and a schema with a backslash
// or a control character (it names the prepared transactions).
//
// Give the log a pool of its own, not one of a registered database's: a transaction holds a
// connection of every database it pre-committed while Commit writes its decision.
func New(pool *pgxpool.Pool, opts ...coordinator.Option) (*Coordinator, error) {
	o := defaultOptions()
	b, err := core.NewBase(pool, core.Protocol{Name: "threepc", Kind: core.Kind3PC, Prefix: "txkit_3pc_", Timeout: time.Minute, Own: o}, opts)
	if err != nil {
		return nil, err
	}
	ns, err := prepared.NewNamespace(b.Cfg.Schema, b.Cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("threepc: %w: %w", err, coordinator.ErrInvalidOption)
	}
	return &Coordinator{Base: b, b: b, o: o, ns: ns,
		dbs: prepared.NewRegistry("threepc", ns, phaseTwoConns, participant.OpDoCommit, b.Parts, ErrClosed)}, nil
}

// Stats returns the coordinator's counters ([coordinator.Stats]): Committed, Aborted, Failures
// (failed branch calls of phase two, retried), Violations and AgentAborts (undecided transactions
// whose abort [Coordinator.Decide] recorded for an agent).
func (c *Coordinator) Stats() coordinator.Stats {
	s := c.b.Stats()
	s.Committed, s.Aborted, s.AgentAborts = c.stats.committed.Load(), c.stats.aborted.Load(), c.stats.agentAborts.Load()
	return s
}

// Begin returns a new global transaction. It writes nothing and does not block. It takes ctx as
// every coordinator's Begin does (tcc's may write): a ctx already done returns an error wrapping
// its error. An invalid gid (see [coordinator.WithGID]; it names prepared transactions, so a
// backslash or a control character is refused too), or a timeout not above the participant
// timeout ([WithTimeouts]), returns an error wrapping [coordinator.ErrInvalidOption].
func (c *Coordinator) Begin(ctx context.Context, opts ...coordinator.BeginOption) (*Global, error) {
	o, err := c.b.Begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := prepared.CheckName("gid", o.GID); err != nil {
		return nil, fmt.Errorf("threepc: begin: %w: %w", err, coordinator.ErrInvalidOption)
	}
	if o.Timeout <= c.o.participantTimeout {
		return nil, fmt.Errorf("threepc: begin %s: timeout %v not above the participant timeout %v: %w", o.GID, o.Timeout, c.o.participantTimeout, coordinator.ErrInvalidOption)
	}
	return &Global{c: c, gid: o.GID, timeout: o.Timeout}, nil
}

// DBWork is a database branch's part of a transaction ([Global.Enlist]).
type DBWork struct {
	// CanCommit, if set, is the branch's vote at phase one: a check that executes nothing (does
	// this account exist and hold enough?). It runs in a READ ONLY transaction that is rolled
	// back. nil or an error wrapping [participant.ErrRefused] are a "yes" and a "no"; any other
	// error is a failure, which counts as a "no" too. The database must also be able to prepare
	// (max_prepared_transactions above zero), which phase one checks in the same transaction.
	CanCommit func(ctx context.Context, tx pgx.Tx) error
	// PreCommit is the branch's work, run at phase two in a transaction that is then prepared
	// (PREPARE TRANSACTION): executed, holding its row locks, not committed. Required.
	PreCommit func(ctx context.Context, tx pgx.Tx) error
}

// Branch is a participant other than a registered PostgreSQL database ([coordinator.Branch]): its
// ops are calls of [participant.Participant] with [participant.OpCanCommit],
// [participant.OpPreCommit], [participant.OpDoCommit] and [participant.OpAbort]. Behind it there
// should be an agent (package threepc/agent), which remembers pre-committed branches and acts when the
// coordinator falls silent.
type Branch = coordinator.Branch

// Global is a three-phase-commit transaction begun by [Coordinator.Begin]: enlist its branches,
// then Commit (or Abort, which before Commit has nothing to undo). Global is safe for concurrent
// use: branches may be enlisted in parallel.
type Global struct {
	c        *Coordinator
	gid      string
	timeout  time.Duration
	mu       sync.Mutex
	state    globalState
	branches []*branch
}

type globalState uint8

const (
	stateOpen       globalState = iota // enlisting
	stateCommitting                    // Commit called
	stateAborted                       // Abort called before Commit
)

// branch is an enlisted branch: a database's work, or a participant.
type branch struct {
	rec  core.Branch
	db   *prepared.Registered
	work DBWork
	p    participant.Participant
	conn *pgxpool.Conn // a database branch's connection, from its PreCommit until Commit returns
}

// GID returns the transaction's id.
func (g *Global) GID() string { return g.gid }

// Enlist adds the database registered as db (see [Coordinator.RegisterDB]) as a branch named db:
// w runs at [Global.Commit] — w.CanCommit at phase one, w.PreCommit at phase two — not now, so
// Enlist does not block. A database takes part once per transaction. The database
// branches' PreCommit work runs one after the other in the order they were enlisted (their
// PREPAREs then run at once), so that transactions that write rows in several databases take
// their locks in one order and cannot wait for each other in a cycle across the databases (a
// deadlock no database could see).
//
// A database that is not registered, one already enlisted or a nil w.PreCommit returns an error
// wrapping [coordinator.ErrInvalidBranch]; a transaction already committing or aborted returns
// one wrapping [coordinator.ErrInvalidState] — a branch cannot join a commit that has begun.
func (g *Global) Enlist(db string, w DBWork) error {
	d, err := g.c.dbs.Get(db)
	if err != nil {
		return fmt.Errorf("threepc: enlist %q in %s: %w", db, g.gid, err)
	}
	if w.PreCommit == nil {
		return fmt.Errorf("threepc: enlist %q in %s: nil PreCommit: %w", db, g.gid, coordinator.ErrInvalidBranch)
	}
	if n := len(g.c.ns.ID(g.gid, db)); n > prepared.MaxID {
		return fmt.Errorf("threepc: enlist %q in %s: prepared transaction id takes %d bytes, more than %d: %w",
			db, g.gid, n, prepared.MaxID, coordinator.ErrInvalidBranch)
	}
	return g.add(&branch{rec: core.Branch{Name: db, Target: d.Target}, db: d, work: w})
}

// EnlistParticipant adds a participant branch. It does not block. An empty name, one already
// enlisted, a name with a backslash or a control character, a payload that is not JSON or a
// participant that cannot be recorded returns an error wrapping [coordinator.ErrInvalidBranch]; a
// transaction already committing or aborted returns one wrapping [coordinator.ErrInvalidState].
func (g *Global) EnlistParticipant(b Branch) error {
	rec, err := g.c.b.Branch(g.gid, b)
	if err != nil {
		return err
	}
	if err := prepared.CheckName("branch", b.Name); err != nil {
		return fmt.Errorf("threepc: branch of %s: %w: %w", g.gid, err, coordinator.ErrInvalidBranch)
	}
	return g.add(&branch{rec: rec, p: b.Participant})
}

func (g *Global) add(br *branch) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != stateOpen {
		return fmt.Errorf("threepc: enlist %q in %s: commit already begun or transaction aborted: %w", br.rec.Name, g.gid, coordinator.ErrInvalidState)
	}
	for _, b := range g.branches {
		if b.rec.Name == br.rec.Name {
			return fmt.Errorf("threepc: enlist %q in %s: branch already enlisted: %w", br.rec.Name, g.gid, coordinator.ErrInvalidBranch)
		}
	}
	g.branches = append(g.branches, br)
	return nil
}

// Abort gives the transaction up before [Global.Commit]: nothing has been executed or recorded
// anywhere (branches run only at Commit), so it only makes a later Commit or Enlist fail. It does
// not block. After Commit began it returns an error wrapping [coordinator.ErrInvalidState]; a
// second Abort is nil.
func (g *Global) Abort(_ context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch g.state {
	case stateCommitting:
		return fmt.Errorf("threepc: abort %s: commit already begun: %w", g.gid, coordinator.ErrInvalidState)
	case stateOpen:
		g.state = stateAborted
		g.c.stats.aborted.Add(1)
	}
	return nil
}

// Commit runs the three phases: CanCommit (every branch votes within its timeout, [WithTimeouts]),
// the record of the transaction, PreCommit (within its timeout, at most
// [coordinator.WithConcurrency] participants at once), then the decision to commit and DoCommit
// everywhere. It blocks until DoCommit was tried everywhere; ctx bounds the calls, not the
// recording of their results.
//
// nil means committed everywhere. An error wrapping [ErrAborted]: the transaction aborted (also
// when a consult-log agent's abort beat the decision), the branches' errors joined as
// *[coordinator.BranchError]s (a "no" wraps [participant.ErrRefused], a timeout
// [ErrPhaseTimeout]). [coordinator.ErrIncomplete]: the decision is recorded but DoCommit did not
// finish everywhere; the leader (and the agents) finish it. [ErrInDoubt]: the decision could not
// be written or read back. [coordinator.ErrInvalidState]: Commit called twice, or after Abort. A
// transaction with no branch commits trivially and writes nothing. A gid already recorded aborts
// with an error wrapping [ErrAborted] and [coordinator.ErrExists] before any PreCommit, sending no
// abort to the branches (they are that transaction's); Attach ([coordinator.Base]) gives its
// outcome. The phases in detail:
// docs/coordinators.md.
func (g *Global) Commit(ctx context.Context) error {
	g.mu.Lock()
	if g.state != stateOpen {
		g.mu.Unlock()
		return fmt.Errorf("threepc: commit %s: already committed or aborted: %w", g.gid, coordinator.ErrInvalidState)
	}
	g.state = stateCommitting
	branches := g.branches
	g.mu.Unlock()
	if len(branches) == 0 {
		return nil
	}
	c := g.c
	defer func() {
		for _, br := range branches {
			if br.conn != nil {
				br.conn.Release()
			}
		}
	}()
	recs := make([]core.Branch, len(branches))
	for i, br := range branches {
		recs[i] = br.rec
	}
	// Phase one: CanCommit. Nothing is executed, nothing written.
	votes := g.phase(ctx, participant.OpCanCommit, c.o.canCommitTimeout, branches, g.canCommit, nil)
	if len(votes) == 0 {
		votes = g.hook(ctx, core.PhaseCanCommitted)
	}
	if len(votes) == 0 {
		if err := c.b.Log.Create(ctx, g.gid, core.Kind3PC, g.timeout, nil, recs...); errors.Is(err, core.ErrExists) {
			// Another start of the gid (coordinator.WithGID) recorded it first: its branches
			// carry the same gid, so they are not ours to abort; nothing of ours was executed.
			c.stats.aborted.Add(1)
			return fmt.Errorf("threepc: commit %s: record: %w: %w", g.gid, ErrAborted, err)
		} else if err != nil {
			votes = append(votes, fmt.Errorf("threepc: %s: record: %w", g.gid, err))
		}
	}
	if len(votes) > 0 {
		return g.abortUnrecorded(ctx, branches, votes)
	}
	// Phase two: PreCommit.
	votes = g.phase(ctx, participant.OpPreCommit, c.o.preCommitTimeout, branches, g.preCommit, g.work)
	conns := make(map[string]*pgxpool.Conn, len(branches))
	for _, br := range branches {
		if br.conn != nil {
			conns[br.rec.Name] = br.conn
		}
	}
	ctx = prepared.WithHeld(ctx, g.gid, conns)
	if len(votes) == 0 {
		votes = g.hook(ctx, core.PhasePreCommitted)
	}
	if len(votes) > 0 {
		return g.abort(ctx, recs, votes)
	}
	// Phase three: the decision, then DoCommit.
	st, err := c.b.Log.Decide(ctx, g.gid, core.StatusTrying, core.StatusConfirming)
	if err != nil {
		cur, aborted, rerr := c.b.ReadBack(ctx, g.gid, err)
		switch {
		case aborted:
			return g.abort(ctx, recs, []error{fmt.Errorf("threepc: %s: aborted by a participant's agent or the leader before the decision: %w", g.gid, err)})
		case rerr != nil:
			return fmt.Errorf("threepc: commit %s: decide: %w: %w", g.gid, ErrInDoubt, rerr)
		}
		st = cur // our write went through; its answer was lost
	}
	_ = g.hook(ctx, core.PhaseDecided)
	if !st.Final() {
		if err := c.b.PhaseTwo(ctx, lock.Token{}, g.gid, core.StatusConfirming, recs); err != nil {
			return err
		}
	}
	c.stats.committed.Add(1)
	return nil
}

// hook calls the hook at p and returns its error as the one vote against, if any.
func (g *Global) hook(ctx context.Context, p core.Phase) []error {
	if g.c.b.Cfg.PhaseHook == nil {
		return nil
	}
	if err := g.c.b.Cfg.PhaseHook(ctx, g.gid, p); err != nil {
		return []error{fmt.Errorf("threepc: %s: hook at %s: %w", g.gid, p, err)}
	}
	return nil
}

// phase runs one op on every branch within timeout, at most Concurrency calls at once, and
// returns the errors of the branches that did not succeed as *coordinator.BranchErrors. do runs a
// branch's op; ordered, when not nil, runs first on the database branches one after the other in
// enlistment order (in one of the slots), stopping at the first failure, and do then runs only on
// those it succeeded for: PreCommit's work takes its row locks in one order, and its PREPAREs
// (each an fsync) then run at once.
func (g *Global) phase(ctx context.Context, op participant.Op, timeout time.Duration, branches []*branch,
	do, ordered func(ctx context.Context, br *branch) error) []error {
	cause := fmt.Errorf("threepc: %s timeout %v: %w", op, timeout, ErrPhaseTimeout)
	pctx, cancel := context.WithTimeoutCause(ctx, timeout, cause)
	defer cancel()
	var (
		mu    sync.Mutex
		votes []error
	)
	vote := func(br *branch, err error) bool {
		if err == nil {
			return true
		}
		if pctx.Err() != nil && ctx.Err() == nil && !errors.Is(err, ErrPhaseTimeout) {
			err = fmt.Errorf("%w: %w", err, context.Cause(pctx))
		}
		mu.Lock()
		votes = append(votes, &coordinator.BranchError{GID: g.gid, Branch: br.rec.Name, Op: op, Err: err})
		mu.Unlock()
		return false
	}
	var eg errgroup.Group
	eg.SetLimit(g.c.b.Cfg.Concurrency)
	var dbs []*branch
	for _, br := range branches {
		if ordered != nil && br.db != nil {
			dbs = append(dbs, br)
			continue
		}
		eg.Go(func() error { vote(br, do(pctx, br)); return nil })
	}
	if len(dbs) > 0 {
		eg.Go(func() error {
			var ready []*branch
			for _, br := range dbs {
				if !vote(br, ordered(pctx, br)) {
					break // the transaction aborts: locking more rows would only make others wait
				}
				ready = append(ready, br)
			}
			var inner errgroup.Group
			for _, br := range ready {
				inner.Go(func() error { vote(br, do(pctx, br)); return nil })
			}
			return inner.Wait()
		})
	}
	_ = eg.Wait()
	return votes
}

// canCommit is one branch's vote: a participant's call, or a database's check in a read-only
// transaction that is rolled back (and the database's ability to prepare, checked once).
func (g *Global) canCommit(ctx context.Context, br *branch) error {
	if br.p != nil {
		return g.c.b.CallFor(ctx, br.p, br.rec.Target, participant.Request{GID: g.gid, Branch: br.rec.Name, Op: participant.OpCanCommit, Payload: br.rec.Payload})
	}
	if err := br.db.CheckPrepare(ctx); err != nil {
		return err
	}
	if br.work.CanCommit == nil {
		return nil
	}
	tx, err := br.db.Pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.CleanupTimeout)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	return br.work.CanCommit(ctx, tx)
}

// preCommit is one branch's PreCommit: a participant's call, or a database branch's PREPARE
// TRANSACTION after its work (work) ran; the connection is kept for its phase two.
func (g *Global) preCommit(ctx context.Context, br *branch) error {
	if br.p != nil {
		return g.c.b.CallFor(ctx, br.p, br.rec.Target, participant.Request{GID: g.gid, Branch: br.rec.Name, Op: participant.OpPreCommit, Payload: br.rec.Payload})
	}
	_, err := br.conn.Exec(ctx, "PREPARE TRANSACTION "+prepared.Quote(g.c.ns.ID(g.gid, br.rec.Name)))
	if err != nil {
		g.release(ctx, br)
		return err
	}
	// PREPARE TRANSACTION ended the session's transaction: the connection is idle again, and kept
	// for the branch's COMMIT or ROLLBACK PREPARED (Commit releases it).
	return nil
}

// work runs a database branch's PreCommit work in a new transaction on a connection of its pool,
// which it keeps in br.conn, the transaction open, for preCommit's PREPARE TRANSACTION. On a
// failure (or a panic in the work) it rolls back and releases the connection.
func (g *Global) work(ctx context.Context, br *branch) error {
	conn, err := br.db.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	ok := false
	br.conn = conn
	defer func() {
		if !ok {
			g.release(ctx, br)
		}
	}()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	if err := br.work.PreCommit(ctx, tx); err != nil {
		return err
	}
	ok = true
	return nil
}

// release rolls back whatever br's connection has open and gives it back to the pool (closing it
// when the rollback fails: the pool then drops it).
func (g *Global) release(ctx context.Context, br *branch) {
	conn := br.conn
	if conn == nil {
		return
	}
	br.conn = nil
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.CleanupTimeout)
	defer cancel()
	if _, err := conn.Exec(rctx, "ROLLBACK"); err != nil {
		_ = conn.Conn().Close(rctx)
	}
	conn.Release()
}

// abortUnrecorded aborts a transaction that was never recorded (refused at CanCommit, or its
// record failed): nothing was executed anywhere. Participant branches still get an abort, so that
// a PreCommit still on its way (a retry) is refused by their barrier.
func (g *Global) abortUnrecorded(ctx context.Context, branches []*branch, votes []error) error {
	c := g.c
	c.stats.aborted.Add(1)
	cause := fmt.Errorf("threepc: %s: %w: %w", g.gid, ErrAborted, errors.Join(votes...))
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.CleanupTimeout)
	defer cancel()
	var errs []error
	for _, br := range branches {
		if br.p == nil {
			continue
		}
		if err := c.b.CallFor(dctx, br.p, br.rec.Target, participant.Request{GID: g.gid, Branch: br.rec.Name, Op: participant.OpAbort, Payload: br.rec.Payload}); err != nil {
			errs = append(errs, &coordinator.BranchError{GID: g.gid, Branch: br.rec.Name, Op: participant.OpAbort, Err: err})
		}
	}
	return errors.Join(append([]error{cause}, errs...)...)
}

// abort records the decision to abort (unless an agent or the leader did) and rolls every branch
// back; votes are the reasons.
func (g *Global) abort(ctx context.Context, recs []core.Branch, votes []error) error {
	c := g.c
	c.stats.aborted.Add(1)
	cause := fmt.Errorf("threepc: %s: %w: %w", g.gid, ErrAborted, errors.Join(votes...))
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.CleanupTimeout)
	c.b.RecordRefusals(rctx, g.gid, votes) // why it aborted, for the operator
	cancel()
	if err := c.b.Abort(ctx, g.gid, recs); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

// Decide is the coordinator's answer to a participant's agent whose pre-committed branch of gid
// heard nothing within its timeout, in consult-log mode (agent.Decider): what the log
// says, and for a transaction still undecided the abort it records on the spot.
//
//   - committing or committed: [OutcomeCommit];
//   - aborting or aborted: [OutcomeAbort];
//   - not in the log: OutcomeAbort — presumed abort is sound because [Global.Commit] records a
//     transaction before any of its PreCommits, and the log keeps it far longer than any agent's
//     timeout (retention);
//   - still pre-committing: it records the abort (pre-committing → aborting), the same
//     conditional write as the starter's decision to commit, so exactly one of the two wins, and
//     answers with the decision that stands. The starter, if alive, then finds the abort and
//     rolls every branch back; if not, the other branches' agents find it too, and the leader
//     finishes it once the lease ([coordinator.WithLease]) has passed.
//
// An error means the log could not be read or written: the agent leaves the branch waiting and
// asks again (agent.WithTermination's fallback). It blocks for one or two statements; ctx bounds them. Any process may call it: a
// Coordinator built with New on the log's pool and schema needs no elector, registered database
// or Run to answer.
func (c *Coordinator) Decide(ctx context.Context, gid string) (Outcome, error) {
	st, err := c.b.Status(ctx, gid)
	if errors.Is(err, core.ErrNotFound) {
		return OutcomeAbort, nil
	}
	if err != nil {
		return 0, err
	}
	if st == core.StatusTrying {
		var wrote bool
		st, wrote, err = c.b.Log.DecideWrote(ctx, gid, core.StatusTrying, core.StatusCancelling)
		switch {
		case err == nil && wrote:
			c.stats.agentAborts.Add(1)
			c.b.Cfg.Logger.InfoContext(ctx, "threepc: recorded the abort of an undecided transaction for a participant's agent", slog.String("gid", gid))
		case err == nil: // another agent recorded the same abort first
		case errors.Is(err, core.ErrInvalidState): // the starter decided first: st is its decision
		default:
			return 0, fmt.Errorf("threepc: decide %s: %w", gid, err)
		}
	}
	switch st {
	case core.StatusConfirming, core.StatusConfirmed:
		return OutcomeCommit, nil
	case core.StatusCancelling, core.StatusCancelled:
		return OutcomeAbort, nil
	}
	return 0, fmt.Errorf("threepc: decide %s: unexpected status %s: %w", gid, st, coordinator.ErrInvalidState)
}

// Run recovers, while this coordinator leads the election of [coordinator.WithElector]: it
// carries out the phase two of every decided transaction whose starter vanished or whose calls
// failed, aborts those still undecided after their global timeout, and deletes finished
// transactions past the retention. It blocks until ctx ends, then returns nil after every
// goroutine it started has exited. It returns an error wrapping [coordinator.ErrInvalidOption]
// without an elector, [coordinator.ErrRunning] when another Run is running, and one wrapping
// [lock.ErrClosed] when the elector's session is closed.
func (c *Coordinator) Run(ctx context.Context) error {
	for _, d := range c.dbs.All() {
		c.b.CheckSyncStandby(ctx, d.Pool, "votes")
	}
	return c.b.Run(ctx, c.b.PhaseTwoDriver())
}
