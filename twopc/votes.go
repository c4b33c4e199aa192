package twopc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/prepared"
	"github.com/txkit/txkit/lock"
)

// voteWait bounds how long the leader waits for a branch's own transaction to release its vote
// row before it calls the vote undecided and tries again later.
const voteWait = 2 * time.Second

// ensureVotes creates d's vote table when it is not there yet (once per database and process:
// later calls cost an atomic load). A role that may not create it gets an error that says what
// to do, wrapping coordinator.ErrInvalidOption.
func (c *Coordinator) ensureVotes(ctx context.Context, d *prepared.Registered) error {
	err := c.votes.Ensure(ctx, d.DB)
	if err == nil {
		return nil // after the first success, an atomic load and no allocation: it runs per branch
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" { // insufficient_privilege
		return fmt.Errorf("database %s: vote markers (on by default) need the table %s there, which this role may not create "+
			"(create it once with a role that may, or turn vote markers off: twopc.WithVoteMarkers(false)): %w: %w",
			d.Name, c.votes.Table(), err, coordinator.ErrInvalidOption)
	}
	return fmt.Errorf("database %s: %w", d.Name, err)
}

// commitVoting is Commit with vote markers ([WithVoteMarkers]) of a transaction whose branches are
// all databases: the record (voting, with the branches) is written while the branches insert
// their votes and prepare (before, for a gid given with coordinator.WithGID); if both went through, phase two begins at once; otherwise Commit
// withdraws. Two rounds of flushes where Commit otherwise makes three.
func (g *Global) commitVoting(ctx context.Context, branches []*branch, recs []core.Branch) error {
	c := g.c
	for _, br := range branches {
		d, err := c.dbs.Get(br.rec.Name)
		if err == nil {
			err = c.ensureVotes(ctx, d) // done by Enlist already, unless it failed since
		}
		if err != nil {
			c.stats.aborted.Add(1) // Commit's deferred release rolls every branch back
			return fmt.Errorf("twopc: commit %s: %w: %w", g.gid, ErrAborted, err)
		}
	}
	g.voting = true
	var (
		recErr   error
		recorded chan error // the record's outcome when it is written beside the prepares
	)
	if g.named {
		// A gid of the caller's is claimed before anything is prepared: a second start of it
		// prepares nothing (its prepared transactions would bear the first's names).
		recErr = c.b.Log.CreateIn(ctx, g.gid, core.Kind2PC, core.StatusVoting, g.timeout, nil, recs...)
		if errors.Is(recErr, core.ErrExists) {
			c.stats.aborted.Add(1) // Commit's deferred release rolls every branch back
			return fmt.Errorf("twopc: commit %s: record: %w: %w", g.gid, ErrAborted, recErr)
		}
	} else {
		recorded = make(chan error, 1)
		go func() {
			recorded <- c.b.Log.CreateIn(ctx, g.gid, core.Kind2PC, core.StatusVoting, g.timeout, nil, recs...)
		}()
	}
	votes := g.prepare(ctx, branches)
	if recorded != nil {
		recErr = <-recorded
	}
	ctx = g.held(ctx, branches)
	if errors.Is(recErr, core.ErrInvalidState) {
		// The gid is taken — by the in-doubt resolver's abort of a branch it found prepared and
		// unknown, or by an earlier transaction — so this transaction is not recorded, and no one
		// can commit it: roll back whatever prepared.
		return g.abort(ctx, recs, false, append(votes, fmt.Errorf("record: %w", recErr)))
	}
	if recErr == nil && len(votes) == 0 && c.b.Cfg.PhaseHook != nil {
		if err := c.b.Cfg.PhaseHook(ctx, g.gid, core.PhasePrepared); err != nil {
			votes = append(votes, fmt.Errorf("twopc: %s: hook at %s: %w", g.gid, core.PhasePrepared, err))
		}
	}
	if recErr != nil || len(votes) > 0 {
		if recErr != nil {
			votes = append(votes, fmt.Errorf("record: %w", recErr))
		}
		return g.withdraw(ctx, recs, votes)
	}
	if c.b.Cfg.PhaseHook != nil {
		_ = c.b.Cfg.PhaseHook(ctx, g.gid, core.PhaseDecided)
	}
	if err := c.commitDBs(ctx, g.gid, core.StatusVoting, recs); err != nil {
		return err
	}
	c.stats.committed.Add(1)
	return nil
}

// withdraw ends a voting transaction whose starter saw a vote other than yes (or could not record
// it): it records the abort, which the leader's settlement and this exclude each other on, then
// rolls every branch back. When the leader settled first — every branch had voted yes, the vote
// seen failing here included — the transaction commits instead. When neither can be known it
// returns ErrInDoubt and leaves the branches prepared: the leader settles them from the votes.
func (g *Global) withdraw(ctx context.Context, recs []core.Branch, votes []error) error {
	c := g.c
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), core.CleanupTimeout)
	defer cancel()
	st, err := c.b.Log.Decide(dctx, g.gid, core.StatusVoting, core.StatusCancelling)
	switch {
	case errors.Is(err, core.ErrNotFound):
		// The record never went in; if its insert is still on its way, the leader finds every
		// branch rolled back and aborts it.
		return g.abort(ctx, recs, false, votes)
	case err == nil:
		c.stats.aborted.Add(1)
		c.b.RecordRefusals(dctx, g.gid, votes)
		cause := fmt.Errorf("twopc: %s: %w: %w", g.gid, ErrAborted, errors.Join(votes...))
		if perr := c.b.PhaseTwo(dctx, lock.Token{}, g.gid, core.StatusCancelling, recs); perr != nil {
			return errors.Join(cause, perr)
		}
		return cause
	case st == core.StatusConfirming || st == core.StatusConfirmed:
		c.b.Cfg.Logger.WarnContext(ctx, "twopc: the leader settled the transaction as committed before the starter could withdraw",
			slog.String("gid", g.gid), slog.Any("votes", errors.Join(votes...)))
		if st == core.StatusConfirming {
			if err := c.b.PhaseTwo(ctx, lock.Token{}, g.gid, core.StatusConfirming, recs); err != nil {
				return err
			}
		}
		c.stats.committed.Add(1)
		return nil
	}
	return fmt.Errorf("twopc: commit %s: withdraw: %w: %w", g.gid, ErrInDoubt, errors.Join(append(votes, err)...))
}

// settle is the leader's drive of a transaction still voting after its starter's lease: it reads
// every branch's vote in its database ([prepared.Votes.Vote]: prepared or committed is yes; one
// that is neither is made a no for good by its tombstone), records the outcome — committing when
// every branch voted yes, aborting at the first no — fenced with tok, and carries it out. A vote
// that cannot be known yet (the branch's transaction is between its vote and its PREPARE), or a
// database that is not registered here, returns an error: the transaction is tried again later.
func (c *Coordinator) settle(ctx context.Context, tok lock.Token, t *core.Transaction) error {
	next := core.StatusConfirming
	for _, br := range t.Branches {
		d, err := c.dbs.Get(br.Name)
		if err != nil {
			return fmt.Errorf("twopc: settle %s: %w", t.GID, err)
		}
		if err := c.votes.Ensure(ctx, d.DB); err != nil {
			return fmt.Errorf("twopc: settle %s: database %s: %w", t.GID, d.Name, err)
		}
		yes, err := c.votes.Vote(ctx, d.DB, c.ns.ID(t.GID, br.Name), voteWait)
		if err != nil {
			return fmt.Errorf("twopc: settle %s: database %s: %w", t.GID, d.Name, err)
		}
		if !yes {
			next = core.StatusCancelling
			break
		}
	}
	if err := c.b.Log.Record(ctx, tok, core.Progress{GID: t.GID, From: core.StatusVoting, Next: next}); err != nil {
		return err
	}
	c.b.Cfg.Logger.InfoContext(ctx, "twopc: settled a voting transaction from its votes", slog.String("gid", t.GID),
		slog.String("decision", next.String()))
	if err := c.b.PhaseTwo(ctx, tok, t.GID, next, t.Branches); !errors.Is(err, core.ErrIncomplete) {
		return err
	}
	return nil
}

// voteScan is how many old vote rows one query of the sweep reads, and voteBatch how many of them
// one look-up in the log and one delete take. The table's only index is its primary key, so a
// query is a pass over the table (whose size is a few in-doubt graces of transfers): a large page
// makes it one pass per sweep in the steady state.
const (
	voteScan  = 20000
	voteBatch = 2000
)

// sweepVotes deletes from d's vote table the rows older than the in-doubt grace whose
// transaction is finished or gone from the log: no one reads them any more. (A tombstone must
// outlive the starter's phase one, which the prepare timeout bounds, and the grace is above it.)
// It reads them a page at a time in id order, on the table's primary key, and goes on past the
// pages of open transactions' rows, which stay.
func (c *Coordinator) sweepVotes(ctx context.Context, d *prepared.Registered) (int, error) {
	if err := c.votes.Ensure(ctx, d.DB); err != nil {
		return 0, err
	}
	total := 0
	after := "" // pages past the rows of open transactions, which stay
	for {
		page, err := c.votes.Old(ctx, d.DB, max(c.o.resolveGrace, c.o.prepareTimeout), after, c.o.voteScan)
		if err != nil || len(page) == 0 {
			return total, err
		}
		after = page[len(page)-1]
		for ids := range slices.Chunk(page, voteBatch) {
			n, err := c.sweepBatch(ctx, d, ids)
			total += n
			if err != nil {
				return total, err
			}
		}
		if len(page) < c.o.voteScan {
			return total, nil
		}
	}
}

// sweepBatch deletes the rows of ids whose transaction is finished or gone from the log.
func (c *Coordinator) sweepBatch(ctx context.Context, d *prepared.Registered, ids []string) (int, error) {
	gidOf := make(map[string]string, len(ids))
	gids := make([]string, 0, len(ids))
	for _, id := range ids {
		if gid, _, ok := c.ns.Parse(id); ok && c.b.Owns(gid) { // another log shard's are its to sweep
			gidOf[id] = gid
			gids = append(gids, gid)
		}
	}
	open, err := c.b.Log.Unfinished(ctx, gids)
	if err != nil {
		return 0, err
	}
	del := make([]string, 0, len(ids))
	for id, gid := range gidOf {
		if !open[gid] {
			del = append(del, id)
		}
	}
	if len(del) == 0 {
		return 0, nil
	}
	n, err := c.votes.Delete(ctx, d.DB, del)
	return int(n), err
}
