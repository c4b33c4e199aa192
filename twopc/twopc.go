package twopc

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

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/prepared"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/participant"
)

// Coordinator runs two-phase commits over PostgreSQL databases (their own PREPARE TRANSACTION)
// and other participants (HTTP or in-process), and, with [Coordinator.Run], finishes on the
// elected leader those whose starter vanished. Any number of Coordinators (processes) may share
// one schema; each may start transactions; the leader among them recovers.
//
// Migrate, Register, Status and Flush are those of [coordinator.Base].
//
// Coordinator is safe for concurrent use by multiple goroutines.
type Coordinator struct {
	coordinator.Base
	b     *core.Base
	o     *options           // twopc's own settings
	ns    prepared.Namespace // names this coordinator's prepared transactions
	dbs   *prepared.Registry // the registered databases
	votes prepared.Votes     // their vote tables (WithVoteMarkers)
	// prepareTimedOut is the cause of phase one's ctx when the prepare timeout ends it (made once,
	// not per Commit).
	prepareTimedOut error
	stats           struct{ committed, aborted, resolved atomic.Int64 }
}

// New returns a Coordinator whose log lives in pool, configured by the options of package
// coordinator and this package's own (WithPrepareTimeout, WithInDoubtResolution,
// WithVoteMarkers). Its tables are "txkit_2pc_global" and "txkit_2pc_branch", and its default
// timeout is 30s. It does not touch the database: call Migrate ([coordinator.Base]), and
// [Coordinator.Close] when done. It returns an error wrapping [coordinator.ErrInvalidOption] when
// an option is unusable, among them a schema with a backslash or a control character (it names
// the prepared transactions).
//
// Give the log a pool of its own, not one of a registered database's: a transaction holds a
// connection of every enlisted database while Commit writes its decision, and when work waiting
// for row locks holds every other connection of that pool, the decision would wait for them and
// they for it.
func New(pool *pgxpool.Pool, opts ...coordinator.Option) (*Coordinator, error) {
	o := defaultOptions()
	b, err := core.NewBase(pool, core.Protocol{Name: "twopc", Kind: core.Kind2PC, Prefix: "txkit_2pc_", Timeout: 30 * time.Second, Own: o}, opts)
	if err != nil {
		return nil, err
	}
	ns, err := prepared.NewNamespace(b.Cfg.Schema, b.Cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("twopc: %w: %w", err, coordinator.ErrInvalidOption)
	}
	return &Coordinator{Base: b, b: b, o: o, ns: ns, votes: prepared.NewVotes(b.Cfg.Schema, b.Cfg.Prefix),
		prepareTimedOut: fmt.Errorf("twopc: prepare timeout %v", o.prepareTimeout),
		dbs:             prepared.NewRegistry("twopc", ns, phaseTwoConns, participant.OpCommit, b.Parts, ErrClosed)}, nil
}

// Stats returns the coordinator's counters ([coordinator.Stats]): Committed, Aborted, Failures
// (failed commits and aborts, retried), Violations and Resolved.
func (c *Coordinator) Stats() coordinator.Stats {
	s := c.b.Stats()
	s.Committed, s.Aborted, s.Resolved = c.stats.committed.Load(), c.stats.aborted.Load(), c.stats.resolved.Load()
	return s
}

// Begin returns a new global transaction. It writes nothing and does not block: the log learns of
// the transaction at [Global.Commit], when its branches are known. Until then nothing is
// prepared anywhere, and a coordinator that dies leaves only open database transactions, which
// PostgreSQL rolls back when their connections close. It takes ctx as every coordinator's Begin
// does (tcc's may write): a ctx already done returns an error wrapping its error. An invalid gid
// (see [coordinator.WithGID]), or a timeout not above the prepare timeout, returns an error
// wrapping [coordinator.ErrInvalidOption].
func (c *Coordinator) Begin(ctx context.Context, opts ...coordinator.BeginOption) (*Global, error) {
	o, err := c.b.Begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := prepared.CheckName("gid", o.GID); err != nil {
		return nil, fmt.Errorf("twopc: begin: %w: %w", err, coordinator.ErrInvalidOption)
	}
	if o.Timeout <= c.o.prepareTimeout {
		return nil, fmt.Errorf("twopc: begin %s: timeout %v not above the prepare timeout %v: %w", o.GID, o.Timeout, c.o.prepareTimeout, coordinator.ErrInvalidOption)
	}
	return &Global{c: c, gid: o.GID, timeout: o.Timeout, named: o.Named}, nil
}

// Branch is a participant other than a registered PostgreSQL database ([coordinator.Branch]): its
// prepare, commit and abort are calls of [participant.Participant] with [participant.OpPrepare],
// [participant.OpCommit] and [participant.OpAbort].
type Branch = coordinator.Branch

// Global is a two-phase-commit transaction begun by [Coordinator.Begin]: enlist its branches,
// then Commit or Abort. Global is safe for concurrent use: branches may be enlisted in parallel.
// A Global holds a connection of every enlisted database until it is aborted or its Commit
// returns.
type Global struct {
	c        *Coordinator
	gid      string
	timeout  time.Duration
	mu       sync.Mutex
	state    globalState
	branches []*branch
	voting   bool // Commit prepares with vote markers (WithVoteMarkers, databases only)
	named    bool // the caller gave the gid (coordinator.WithGID): Commit records it before preparing
}

type globalState uint8

const (
	stateOpen       globalState = iota // enlisting
	stateCommitting                    // Commit called
	stateAborted                       // Abort called before Commit
)

// branch is an enlisted branch: a database's open transaction, or a participant.
type branch struct {
	rec  core.Branch
	conn *pgxpool.Conn           // a database branch's connection, until Commit or Abort returns
	tx   pgx.Tx                  // its open transaction
	p    participant.Participant // a participant branch
	id   string                  // a database branch's prepared transaction id (made once, in Enlist)
}

// GID returns the transaction's id.
func (g *Global) GID() string { return g.gid }

// Enlist runs work in a new transaction of the database registered as db (see
// [Coordinator.RegisterDB]) and keeps that transaction open — holding one of the database's
// connections — until [Global.Commit] prepares it (PREPARE TRANSACTION) or [Global.Abort] rolls
// it back. Commit keeps the connection until the branch's COMMIT or ROLLBACK PREPARED, so phase
// two never waits for the pool. The branch is named db: a database takes part once per
// transaction. It blocks while work runs; ctx scopes the connection's acquisition and is passed
// to work.
//
// An error from work (or from beginning) rolls the database transaction back and returns the
// error: the branch is not enlisted, and the caller decides between Abort and committing the
// other branches. A database that is not registered, or one already enlisted, returns an error
// wrapping [coordinator.ErrInvalidBranch]; a transaction already committing or aborted returns
// [coordinator.ErrInvalidState].
func (g *Global) Enlist(ctx context.Context, db string, work func(ctx context.Context, tx pgx.Tx) error) error {
	d, err := g.c.dbs.Get(db)
	if err != nil {
		return fmt.Errorf("twopc: enlist %q in %s: %w", db, g.gid, err)
	}
	if work == nil {
		return fmt.Errorf("twopc: enlist %q in %s: nil work: %w", db, g.gid, coordinator.ErrInvalidBranch)
	}
	id := g.c.ns.ID(g.gid, db)
	if n := len(id); n > prepared.MaxID {
		return fmt.Errorf("twopc: enlist %q in %s: prepared transaction id takes %d bytes, more than %d: %w",
			db, g.gid, n, prepared.MaxID, coordinator.ErrInvalidBranch)
	}
	if g.c.o.votes {
		// The vote table, made on first use: a role that may not create it learns so here,
		// before any work (WithVoteMarkers).
		if err := g.c.ensureVotes(ctx, d); err != nil {
			return fmt.Errorf("twopc: enlist %q in %s: %w", db, g.gid, err)
		}
	}
	br := &branch{rec: core.Branch{Name: db, Target: d.Target}, id: id}
	if err := g.reserve(br); err != nil {
		return err
	}
	conn, err := d.Pool.Acquire(ctx)
	if err != nil {
		g.forget(br)
		return fmt.Errorf("twopc: enlist %q in %s: %w", db, g.gid, err)
	}
	// The branch's "begin" goes out with work's first statement, in its round trip (LazyTx): a
	// branch costs the round trips of its work, its PREPARE and its COMMIT PREPARED. A work that
	// sends nothing leaves it to the PREPARE, which opens the transaction by itself first.
	tx := pgutil.NewLazyTx(conn)
	ran := false
	defer func() {
		if !ran { // work panicked: undo before the panic goes on to the caller (as pgx.BeginFunc does)
			g.undoEnlist(ctx, br, conn, tx)
		}
	}()
	err = work(ctx, tx)
	ran = true
	if err != nil {
		g.undoEnlist(ctx, br, conn, tx)
		return fmt.Errorf("twopc: enlist %q in %s: %w", db, g.gid, err)
	}
	g.mu.Lock()
	br.conn, br.tx = conn, tx
	aborted := g.state != stateOpen
	g.mu.Unlock()
	if aborted { // Abort or Commit came while work ran: this branch is not part of them
		g.release(ctx, br)
		g.forget(br)
		return fmt.Errorf("twopc: enlist %q in %s: transaction ended while the work ran: %w", db, g.gid, coordinator.ErrInvalidState)
	}
	return nil
}

// EnlistParticipant adds a participant branch, prepared at [Global.Commit]. It does not block. An
// empty name, one already enlisted, a payload that is not JSON or a participant that cannot be
// recorded, or a name with a backslash or a control character, returns an error wrapping
// [coordinator.ErrInvalidBranch]; a transaction already committing or aborted returns [coordinator.ErrInvalidState].
func (g *Global) EnlistParticipant(b Branch) error {
	rec, err := g.c.b.Branch(g.gid, b)
	if err != nil {
		return err
	}
	if err := prepared.CheckName("branch", b.Name); err != nil {
		return fmt.Errorf("twopc: branch of %s: %w: %w", g.gid, err, coordinator.ErrInvalidBranch)
	}
	return g.reserve(&branch{rec: rec, p: b.Participant})
}

// reserve adds br to the branches, refusing a duplicate name or a transaction no longer open.
func (g *Global) reserve(br *branch) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != stateOpen {
		return fmt.Errorf("twopc: enlist %q in %s: %w", br.rec.Name, g.gid, coordinator.ErrInvalidState)
	}
	for _, b := range g.branches {
		if b.rec.Name == br.rec.Name {
			return fmt.Errorf("twopc: enlist %q in %s: already enlisted: %w", br.rec.Name, g.gid, coordinator.ErrInvalidBranch)
		}
	}
	br.rec.Seq = len(g.branches)
	g.branches = append(g.branches, br)
	return nil
}

func (g *Global) forget(br *branch) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, b := range g.branches {
		if b == br {
			g.branches = append(g.branches[:i], g.branches[i+1:]...)
			return
		}
	}
}

// undoEnlist ends an Enlist whose work failed or panicked: its transaction (if begun) is rolled
// back, its connection released and its branch forgotten.
func (g *Global) undoEnlist(ctx context.Context, br *branch, conn *pgxpool.Conn, tx pgx.Tx) {
	if tx != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.CleanupTimeout)
		_ = tx.Rollback(rctx)
		cancel()
	}
	conn.Release()
	g.forget(br)
}

// release rolls back a database branch's open transaction (if still open) and returns its
// connection to the pool.
func (g *Global) release(ctx context.Context, br *branch) {
	if br.conn == nil {
		return
	}
	if br.tx != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.CleanupTimeout)
		_ = br.tx.Rollback(rctx)
		cancel()
	}
	br.conn.Release()
	br.conn, br.tx = nil, nil
}

// Abort rolls back a transaction that has not been committed: every enlisted database's open
// transaction is rolled back and nothing is written to the log (presumed abort: nothing was
// prepared). Aborting twice is harmless; aborting after [Global.Commit] was called returns an
// error wrapping [coordinator.ErrInvalidState] (Commit aborts by itself when phase one fails).
func (g *Global) Abort(ctx context.Context) error {
	g.mu.Lock()
	switch g.state {
	case stateAborted:
		g.mu.Unlock()
		return nil
	case stateCommitting:
		g.mu.Unlock()
		return fmt.Errorf("twopc: abort %s: commit already called: %w", g.gid, coordinator.ErrInvalidState)
	}
	g.state = stateAborted
	branches := g.branches
	g.mu.Unlock()
	for _, br := range branches {
		g.release(ctx, br)
	}
	g.c.stats.aborted.Add(1)
	return nil
}

// Commit runs the two phases: every branch prepares (at most [coordinator.WithConcurrency] at
// once, within [WithPrepareTimeout]); if all voted yes, the decision to commit is written and
// phase two runs on every branch, otherwise every branch is rolled back. It blocks until phase two
// has been tried on every branch; ctx bounds the calls, not the recording of their results.
//
// nil means committed everywhere. An error wrapping [ErrAborted]: the transaction aborted (a
// branch voted no, wrapping [participant.ErrRefused], failed, or phase one timed out), its branch
// errors joined as *[coordinator.BranchError]s. [coordinator.ErrIncomplete]: the decision to commit
// is recorded but phase two did not finish everywhere; the leader finishes it. [ErrInDoubt]: the
// decision could not be written or read back; the leader settles it (Status tells which way).
// [coordinator.ErrInvalidState]: Commit called twice, or after Abort. A transaction with no branch
// commits trivially and writes nothing. A gid given with [coordinator.WithGID] is recorded before
// anything is prepared (presumed abort's saved write is for gids Begin made; with vote markers the
// voting record comes before the PREPAREs), so that a gid already
// used aborts at once with an error wrapping [coordinator.ErrExists] too, before any prepare; Attach
// ([coordinator.Base]) gives that transaction's outcome. What is written when (presumed abort, vote markers) and
// why phase two never waits for a connection: docs/coordinators.md.
func (g *Global) Commit(ctx context.Context) error {
	g.mu.Lock()
	if g.state != stateOpen {
		g.mu.Unlock()
		return fmt.Errorf("twopc: commit %s: already committed or aborted: %w", g.gid, coordinator.ErrInvalidState)
	}
	g.state = stateCommitting
	// An Enlist still running its work is not part of the commit: it finds the transaction
	// committing when its work returns, rolls its work back and returns coordinator.ErrInvalidState.
	branches := make([]*branch, 0, len(g.branches))
	for _, br := range g.branches {
		if br.p != nil || br.tx != nil {
			branches = append(branches, br)
		}
	}
	g.mu.Unlock()
	if len(branches) == 0 {
		return nil
	}
	defer func() {
		for _, br := range branches {
			g.release(ctx, br)
		}
	}()
	c := g.c
	recs := make([]core.Branch, len(branches))
	onlyDBs := true
	for i, br := range branches {
		recs[i] = br.rec
		onlyDBs = onlyDBs && br.p == nil
	}
	if onlyDBs && c.o.votes {
		return g.commitVoting(ctx, branches, recs)
	}
	// A gid of the caller's (a business key) is claimed before anything is prepared: a second
	// start of it is refused here (coordinator.ErrExists), not by a clash of prepared
	// transactions' names. Presumed abort's saved write is for gids of the coordinator's making.
	presumed := onlyDBs && !g.named
	if !presumed {
		if err := c.b.Log.Create(ctx, g.gid, core.Kind2PC, g.timeout, nil, recs...); err != nil {
			c.stats.aborted.Add(1) // the deferred release rolls every branch back
			return fmt.Errorf("twopc: commit %s: record: %w: %w", g.gid, ErrAborted, err)
		}
	}
	votes := g.prepare(ctx, branches)
	ctx = g.held(ctx, branches)
	if len(votes) == 0 && c.b.Cfg.PhaseHook != nil {
		if err := c.b.Cfg.PhaseHook(ctx, g.gid, core.PhasePrepared); err != nil {
			votes = append(votes, fmt.Errorf("twopc: %s: hook at %s: %w", g.gid, core.PhasePrepared, err))
		}
	}
	if len(votes) > 0 {
		return g.abort(ctx, recs, !presumed, votes)
	}
	st, err := g.decide(ctx, recs, presumed)
	if err != nil {
		if errors.Is(err, ErrAborted) {
			return g.abort(ctx, recs, true, []error{err})
		}
		return err
	}
	if c.b.Cfg.PhaseHook != nil {
		_ = c.b.Cfg.PhaseHook(ctx, g.gid, core.PhaseDecided)
	}
	if !st.Final() {
		if presumed {
			err = c.commitDBs(ctx, g.gid, core.StatusConfirming, recs)
		} else {
			err = c.b.PhaseTwo(ctx, lock.Token{}, g.gid, core.StatusConfirming, recs)
		}
		if err != nil {
			return err
		}
	}
	c.stats.committed.Add(1)
	return nil
}

// decide writes the decision to commit: an insert of the decided transaction under presumed
// abort (nothing was written before), else the update of its record. It returns
// the status the transaction is in, an error wrapping ErrAborted when the leader or the resolver
// aborted it first, or one wrapping ErrInDoubt when the outcome cannot be known here.
func (g *Global) decide(ctx context.Context, recs []core.Branch, presumed bool) (coordinator.Status, error) {
	c := g.c
	var err error
	if presumed {
		err = c.b.Log.CreateIn(ctx, g.gid, core.Kind2PC, core.StatusConfirming, g.timeout, nil, recs...)
		if err == nil {
			return core.StatusConfirming, nil
		}
	} else {
		var st coordinator.Status
		if st, err = c.b.Log.Decide(ctx, g.gid, core.StatusTrying, core.StatusConfirming); err == nil {
			return st, nil
		}
	}
	cur, aborted, rerr := c.b.ReadBack(ctx, g.gid, err)
	switch {
	case aborted:
		return cur, fmt.Errorf("twopc: %s: aborted by the leader before the decision: %w: %w", g.gid, ErrAborted, err)
	case rerr != nil:
		return 0, fmt.Errorf("twopc: commit %s: decide: %w: %w", g.gid, ErrInDoubt, rerr)
	}
	return cur, nil // our write went through; its answer was lost
}

// held returns ctx carrying the connections the database branches prepared on, on which their
// phase two runs (either way).
func (g *Global) held(ctx context.Context, branches []*branch) context.Context {
	conns := make(map[string]*pgxpool.Conn, len(branches))
	for _, br := range branches {
		if br.conn != nil {
			conns[br.rec.Name] = br.conn
		}
	}
	return prepared.WithHeld(ctx, g.gid, conns)
}

// commitDBs is phase two of a transaction whose branches are all databases, decided to commit
// (from: confirming) or whose branches all voted yes (from: voting): the COMMIT PREPAREDs and
// the record of the outcome run at once. A commit that fails is left to the in-doubt resolver,
// which commits every prepared transaction of a committed gid, or to the leader.
func (c *Coordinator) commitDBs(ctx context.Context, gid string, from coordinator.Status, recs []core.Branch) error {
	names := make([]string, len(recs))
	for i, r := range recs {
		names[i] = r.Name
	}
	outcome := core.Progress{GID: gid, From: from, Done: names, Next: core.StatusConfirmed}
	var (
		recErr  error
		written chan error // the record's outcome when it is written beside the commits
	)
	if c.b.Log.Defers(from, outcome.Next) {
		// Deferred (the default): Record queues the write, detached from ctx, and returns at once;
		// no goroutine needed to overlap it with the commits.
		recErr = c.b.Log.Record(ctx, lock.Token{}, outcome)
	} else {
		written = make(chan error, 1)
		go func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.CleanupTimeout)
			defer cancel()
			written <- c.b.Log.Record(rctx, lock.Token{}, outcome)
		}()
	}
	fails := &branchErrors{}
	core.Each(len(recs), c.b.Cfg.Concurrency, func(i int) {
		r := recs[i]
		if err := c.b.CallTarget(ctx, r.Target, participant.Request{GID: gid, Branch: r.Name, Op: participant.OpCommit}); err != nil {
			c.b.Failures.Add(1)
			c.b.Cfg.Logger.WarnContext(ctx, "twopc: commit prepared failed; the in-doubt resolver will", slog.String("gid", gid),
				slog.String("branch", r.Name), slog.Any("err", err))
			fails.add(&coordinator.BranchError{GID: gid, Branch: r.Name, Op: participant.OpCommit, Err: err})
		}
	})
	failed := fails.errs
	if written != nil {
		recErr = <-written
	}
	if recErr != nil {
		// The commits are done or left to the resolver; without the record the leader finishes
		// the transaction when the lease passes.
		failed = append(failed, fmt.Errorf("twopc: record the outcome of %s: %w", gid, recErr))
	}
	if len(failed) > 0 {
		return fmt.Errorf("twopc: commit %s: %w: %w", gid, coordinator.ErrIncomplete, errors.Join(failed...))
	}
	return nil
}

// prepare runs phase one and returns the errors of the branches that did not vote yes.
func (g *Global) prepare(ctx context.Context, branches []*branch) []error {
	c := g.c
	pctx, cancel := context.WithTimeoutCause(ctx, c.o.prepareTimeout, c.prepareTimedOut)
	defer cancel()
	votes := &branchErrors{}
	core.Each(len(branches), c.b.Cfg.Concurrency, func(i int) {
		br := branches[i]
		err := g.prepareOne(pctx, br)
		if err != nil {
			if cause := context.Cause(pctx); cause != nil && pctx.Err() != nil && ctx.Err() == nil {
				err = fmt.Errorf("%w: %w", err, cause)
			}
			votes.add(&coordinator.BranchError{GID: g.gid, Branch: br.rec.Name, Op: participant.OpPrepare, Err: err})
		}
	})
	return votes.errs
}

// branchErrors collects the errors of a phase's concurrent branch calls (one allocation for the
// list and its lock).
type branchErrors struct {
	mu   sync.Mutex
	errs []error
}

func (b *branchErrors) add(err error) {
	b.mu.Lock()
	b.errs = append(b.errs, err)
	b.mu.Unlock()
}

func (g *Global) prepareOne(ctx context.Context, br *branch) error {
	if br.p != nil {
		return g.c.b.CallFor(ctx, br.p, br.rec.Target, participant.Request{GID: g.gid, Branch: br.rec.Name, Op: participant.OpPrepare, Payload: br.rec.Payload})
	}
	var q string
	if g.voting {
		q = g.c.votes.PrepareSQL(br.id)
	} else {
		q = prepared.QuoteAfter("PREPARE TRANSACTION ", br.id)
	}
	_, err := br.tx.Exec(ctx, q)
	if err != nil {
		g.release(ctx, br) // rolls back what PREPARE left open; a lost connection rolled it back already
		return err
	}
	// PREPARE TRANSACTION ended the session's transaction: the connection is idle again, and
	// kept for the branch's COMMIT or ROLLBACK PREPARED (Commit releases it).
	br.tx = nil
	return nil
}

// abort rolls every branch back; votes are the reasons. A transaction that is recorded gets the
// decision to abort first; one that is not (only databases, undecided) needs no record: its
// prepared transactions are rolled back here, or by the resolver if this process dies.
func (g *Global) abort(ctx context.Context, recs []core.Branch, recorded bool, votes []error) error {
	c := g.c
	cause := fmt.Errorf("twopc: %s: %w: %w", g.gid, ErrAborted, errors.Join(votes...))
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.CleanupTimeout)
	defer cancel()
	c.stats.aborted.Add(1)
	if !recorded {
		var errs []error
		for _, r := range recs {
			if err := c.b.CallTarget(dctx, r.Target, participant.Request{GID: g.gid, Branch: r.Name, Op: participant.OpAbort}); err != nil {
				errs = append(errs, &coordinator.BranchError{GID: g.gid, Branch: r.Name, Op: participant.OpAbort, Err: err})
			}
		}
		return errors.Join(append([]error{cause}, errs...)...)
	}
	c.b.RecordRefusals(dctx, g.gid, votes)
	if err := c.b.Abort(ctx, g.gid, recs); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

// Run recovers, while this coordinator leads the election of [coordinator.WithElector]: it finishes phase
// two of every decided transaction whose starter vanished or whose commits/aborts failed, aborts
// those left undecided past their timeout (presumed abort), resolves every in-doubt prepared
// transaction of the registered databases from the log ([Coordinator.ResolveInDoubt], on the
// schedule of [WithInDoubtResolution]) and deletes finished transactions past the retention. It
// blocks until ctx ends, then returns nil after every goroutine it started has exited. It returns
// an error wrapping [coordinator.ErrInvalidOption] without an elector, [coordinator.ErrRunning] when another Run is
// running, and one wrapping [lock.ErrClosed] when the elector's session is closed.
func (c *Coordinator) Run(ctx context.Context) error {
	for _, d := range c.dbs.All() {
		c.b.CheckSyncStandby(ctx, d.Pool, "votes")
	}
	phaseTwo := c.b.PhaseTwoDriver()
	return c.b.Run(ctx, core.DriverFunc(func(ctx context.Context, tok lock.Token, t *core.Transaction) error {
		if t.Status == core.StatusVoting {
			return c.settle(ctx, tok, t)
		}
		return phaseTwo.Drive(ctx, tok, t)
	}),
		core.WithLeaderJob("in-doubt", c.o.resolveSpec, func(ctx context.Context, _ lock.Token) error {
			_, err := c.ResolveInDoubt(ctx)
			return err
		}))
}
