package twopc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/prepared"
)

// RegisterDB makes the PostgreSQL database behind pool a participant called name, for
// [Global.Enlist]; the server needs max_prepared_transactions above zero. Every Coordinator that
// may recover a transaction must register the same name for the same database, and coordinators
// with different logs must differ in schema: prepared transactions are named after it and the
// protocol's table prefix. It does no I/O; the small pool phase two uses (2 connections)
// connects when used and [Coordinator.Close] closes it.
//
// An empty name, one with a backslash or a control character or longer than 199 bytes, a nil
// pool or a name registered twice returns an error wrapping [coordinator.ErrInvalidOption]; after
// [Coordinator.Close], one wrapping [ErrClosed].
func (c *Coordinator) RegisterDB(name string, pool *pgxpool.Pool) error {
	return c.dbs.Register(name, pool)
}

// Close closes the pools the coordinator made for phase two and the resolver (one per
// [Coordinator.RegisterDB]); the caller's pools stay open. Call it after [Coordinator.Run] has
// returned and every [Global.Commit] and [Coordinator.ResolveInDoubt] has: a phase two or a scan
// that needs one of these pools afterwards fails (the leader retries it). It does not block on the
// network; calling it again does nothing and returns nil.
func (c *Coordinator) Close() error {
	c.dbs.Close()
	return nil
}

// InDoubt counts what one [Coordinator.ResolveInDoubt] pass found and did.
type InDoubt struct {
	Found      int // this coordinator's prepared transactions older than the grace
	Committed  int // committed: their transaction decided to commit
	RolledBack int // rolled back: decided to abort, or not in the log (presumed abort)
	Undecided  int // left alone: still in phase one (its timeout aborts it) or voting (the leader settles it)
	Swept      int // vote rows deleted (WithVoteMarkers): their transaction is finished
}

// ResolveInDoubt scans pg_prepared_xacts of every registered database for this coordinator's
// prepared transactions older than the grace of [WithInDoubtResolution] and ends each as the log
// says: COMMIT PREPARED when its transaction decided to commit, ROLLBACK PREPARED when it decided
// to abort or is not in the log at all — presumed abort: a transaction of databases only is
// recorded when it decides to commit, and deleted only long after phase two. Before rolling back
// one the log does not know, it records the gid as aborting, so a starter that was about to
// decide finds the abort instead of committing half a transaction. Transactions recorded and
// still in phase one (those with participant branches) are left to their timeout, and voting
// ones ([WithVoteMarkers]) to the leader, which settles them from the votes. With vote markers it
// also deletes the vote rows of finished transactions older than the grace. So no prepared
// transaction, and none of the row locks it holds, outlives a failover. It scans and ends them
// through each database's phase-two pool (see [Coordinator.RegisterDB]), so it does not wait
// while work holds every connection of the registered pool. The leader runs it on a schedule ([Coordinator.Run]); operators may run it any
// time: it only carries out decisions already recorded. It blocks until every
// database was scanned or ctx ends; failures are joined and returned after the others were done.
func (c *Coordinator) ResolveInDoubt(ctx context.Context) (InDoubt, error) {
	dbs := c.dbs.All()
	var (
		res  InDoubt
		errs []error
	)
	for _, d := range dbs {
		if err := c.resolveDB(ctx, d, &res); err != nil {
			errs = append(errs, err)
		}
		if c.o.votes {
			n, err := c.sweepVotes(ctx, d)
			res.Swept += n
			if err != nil {
				errs = append(errs, fmt.Errorf("twopc: database %s: sweep the vote table: %w", d.Name, err))
			}
		}
	}
	c.stats.resolved.Add(int64(res.Committed + res.RolledBack))
	return res, errors.Join(errs...)
}

func (c *Coordinator) resolveDB(ctx context.Context, d *prepared.Registered, res *InDoubt) error {
	found, err := prepared.Scan(ctx, d.P2, c.ns, c.o.resolveGrace)
	if err != nil {
		return fmt.Errorf("twopc: database %s: %w", d.Name, err)
	}
	var errs []error
	for _, p := range found {
		gid, id := p.GID, p.ID
		if p.Branch != d.Name || !c.b.Owns(gid) { // another registered database's (they may share a server database), another log shard's
			continue
		}
		res.Found++
		st, err := c.b.Status(ctx, gid)
		if errors.Is(err, core.ErrNotFound) {
			// Presumed abort. Record the abort first: the starter may still be about to insert
			// its decision to commit, and the unique gid lets only one of the two in.
			// The tiny timeout makes the record due at once: the leader's next tick finishes it.
			err = c.b.Log.CreateIn(ctx, gid, core.Kind2PC, core.StatusCancelling, time.Millisecond, nil,
				core.Branch{Name: d.Name, Target: d.Target})
			if err == nil || errors.Is(err, core.ErrInvalidState) {
				st, err = c.b.Status(ctx, gid)
			}
		}
		var verb prepared.Verb
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("twopc: in-doubt %s: %w", id, err))
			continue
		case st == core.StatusConfirming || st == core.StatusConfirmed:
			verb = prepared.Commit
		case st == core.StatusCancelling || st == core.StatusCancelled:
			verb = prepared.Rollback
		default:
			res.Undecided++
			continue
		}
		if err := c.dbs.Finish(ctx, d.P2, d, verb, id); err != nil {
			errs = append(errs, err)
			continue
		}
		if verb == prepared.Commit {
			res.Committed++
		} else {
			res.RolledBack++
		}
		c.b.Cfg.Logger.InfoContext(ctx, "twopc: resolved an in-doubt prepared transaction", slog.String("gid", gid),
			slog.String("database", d.Name), slog.String("action", strings.TrimSpace(string(verb))))
	}
	return errors.Join(errs...)
}
