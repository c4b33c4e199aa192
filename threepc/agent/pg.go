package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/prepared"
	"github.com/txkit/txkit/threepc"
)

// PG is the participant side of three-phase commit for a PostgreSQL database whose branches are
// prepared transactions (threepc.Coordinator.RegisterDB): it runs beside the database — in the
// service that owns it, or a small process of its own — and ends the coordinator's prepared
// transactions that have waited longer than its timeout for DoCommit or abort, so that their row
// locks do not wait for a dead coordinator's recovery: COMMIT PREPARED in textbook mode, what the
// coordinator's log decided in consult-log mode (the default; package documentation). Several
// agents may watch one database (every replica of a service): ending a prepared transaction that
// another agent has just ended is success. PG is safe for concurrent use.
type PG struct {
	c     *threepc.Coordinator
	name  string
	pool  *pgxpool.Pool
	ns    prepared.Namespace // names c's prepared transactions
	o     options
	stats struct{ committed, rolledBack, fallbacks atomic.Int64 }
	wait  *outage // the decision log's, with its gauge and fallbacks counter
}

// NewPG returns the agent of the database behind db, registered with the coordinators as name
// (threepc.Coordinator.RegisterDB), for the prepared transactions of c, configured by opts: c's
// schema and table prefix name them, and c answers the consult-log questions, so it must be built
// on the log's pool — it needs no elector, no registered database and no Run. It does not touch
// the database. It registers its metrics on c's registerer (coordinator.WithTelemetry). A nil c
// or db, an invalid name, an unusable option (a log fallback below [MinLogFallback] or in textbook
// mode, [WithTable]) or a metric clash returns an error wrapping [ErrInvalidOption].
func NewPG(c *threepc.Coordinator, name string, db *pgxpool.Pool, opts ...Option) (*PG, error) {
	if c == nil || db == nil {
		return nil, fmt.Errorf("agent: nil coordinator or pool: %w", ErrInvalidOption)
	}
	// The coordinator's shared part is its core (c.Base's dynamic type), which holds its
	// configuration.
	base, ok := c.Base.(*core.Base)
	if !ok {
		return nil, fmt.Errorf("agent: a coordinator not made by threepc.New: %w", ErrInvalidOption)
	}
	if err := prepared.CheckName("database name", name); err != nil {
		return nil, fmt.Errorf("agent: %w: %w", err, ErrInvalidOption)
	}
	o := defaultOptions(DefaultPGTimeout)
	for _, opt := range opts {
		opt(&o)
	}
	if o.tableSet {
		return nil, fmt.Errorf("agent: WithTable applies to an Agent, not to the PG of %s: %w", name, ErrInvalidOption)
	}
	if err := o.validate(true); err != nil {
		return nil, err
	}
	ns, err := prepared.NewNamespace(base.Cfg.Schema, base.Cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("agent: %w: %w", err, ErrInvalidOption)
	}
	a := &PG{c: c, name: name, pool: db, ns: ns, o: o}
	if a.wait, err = newOutage(base.Cfg.Registerer, "3pc_pgagent", "database", name, "prepared 3PC transactions past the agent's timeout",
		o.fallback, o.now); err != nil {
		return nil, fmt.Errorf("agent: %w: %w", err, ErrInvalidOption)
	}
	a.wait.log, a.wait.waiting, a.wait.attrs = o.log, "prepared transactions past the timeout", []any{slog.String("database", name)}
	return a, nil
}

// PGPassResult is what one [PG.Pass] found and did.
type PGPassResult struct {
	Found      int // the coordinator's prepared transactions older than the timeout
	Committed  int // committed (textbook, or the log's decision)
	RolledBack int // rolled back (the log's decision)
	Fallbacks  int // of those committed, by the textbook rule after the log's outage passed WithTermination's fallback
	Waiting    int // left prepared because the decision log could not be reached
}

// PGStats counts what a [PG] did since it was made.
type PGStats struct {
	Committed, RolledBack, Fallbacks int64
}

// Stats returns the agent's counters; Fallbacks is also txkit_3pc_pgagent_fallbacks_total{database}.
func (a *PG) Stats() PGStats {
	return PGStats{Committed: a.stats.committed.Load(), RolledBack: a.stats.rolledBack.Load(), Fallbacks: a.stats.fallbacks.Load()}
}

// Pass scans the database once and ends every prepared transaction of the coordinator's branches
// on this database older than the timeout, as the termination mode says. It blocks until each was
// tried or ctx ends; failures are joined and returned after the others were done (the next pass
// tries them again). In consult-log mode a question the log does not answer within 15 seconds, or
// answers with an error, finds it unreachable: the pass asks no more and leaves the remaining
// transactions prepared, counted in [PGPassResult.Waiting] (not an error), until the log answers or
// its outage has lasted [WithTermination]'s fallback.
func (a *PG) Pass(ctx context.Context) (PGPassResult, error) {
	var res PGPassResult
	found, err := prepared.Scan(ctx, a.pool, a.ns, a.o.timeout)
	if err != nil {
		return res, fmt.Errorf("agent: %w", err)
	}
	var errs []error
	logDown := false // a question to the log failed in this pass: ask no more
	for _, p := range found {
		if p.Branch != a.name { // another registered database's: they may share a server database
			continue
		}
		res.Found++
		out, fallback := threepc.OutcomeCommit, false
		if a.o.mode == TerminationConsultLog {
			var derr error
			out, derr = a.wait.decide(ctx, a.c, p.GID, &logDown)
			switch {
			case derr != nil && ctx.Err() != nil:
				return res, errors.Join(append(errs, ctx.Err())...)
			case derr != nil && a.wait.fallbackDue():
				out, fallback = threepc.OutcomeCommit, true
				a.o.log.WarnContext(ctx, "agent: the decision log has been unreachable longer than the fallback; committing by the textbook rule",
					slog.String("gid", p.GID), slog.String("branch", p.Branch), slog.Duration("fallback", a.o.fallback), slog.Any("err", derr))
			case derr != nil:
				res.Waiting++
				continue
			}
		}
		verb := prepared.Commit
		if out == threepc.OutcomeAbort {
			verb = prepared.Rollback
		}
		if err := prepared.Finish(ctx, a.pool, verb, p.ID); errors.Is(err, prepared.ErrBusy) {
			continue // another agent is ending it; the next pass finds it gone, or tries again
		} else if err != nil {
			errs = append(errs, fmt.Errorf("agent: database %s: %w", a.name, err))
			continue
		}
		if out == threepc.OutcomeAbort {
			res.RolledBack++
			a.stats.rolledBack.Add(1)
		} else {
			res.Committed++
			a.stats.committed.Add(1)
		}
		if fallback {
			res.Fallbacks++
			a.stats.fallbacks.Add(1)
			a.wait.fellBack()
		}
		a.o.log.InfoContext(ctx, "agent: ended a prepared transaction the coordinator left", slog.String("gid", p.GID),
			slog.String("branch", p.Branch), slog.String("action", out.String()), slog.String("mode", a.o.mode.String()),
			slog.Duration("waited", time.Since(p.At)))
	}
	if res.Waiting == 0 {
		a.wait.over(ctx)
	}
	return res, errors.Join(errs...)
}

// Run calls Pass every poll interval ([WithTimeout]) until ctx ends, logging failures. It needs
// no leadership: every replica may run it. It blocks; when ctx ends it waits for a pass in flight
// and returns nil.
func (a *PG) Run(ctx context.Context) error {
	err := pgutil.RunSchedule(ctx, fmt.Sprintf("@every %v", a.o.poll), a.o.log, func(ctx context.Context) {
		if _, err := a.Pass(ctx); err != nil && ctx.Err() == nil {
			a.o.log.ErrorContext(ctx, "agent: pass failed", slog.Any("err", err))
		}
	})
	if err != nil {
		return fmt.Errorf("agent: %w: %w", err, ErrInvalidOption)
	}
	return nil
}
