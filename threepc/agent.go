package threepc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/logwait"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/prepared"
	"github.com/txkit/txkit/participant"
)

// PGAgent is the participant side of three-phase commit for a PostgreSQL database whose branches
// are prepared transactions ([Coordinator.RegisterDB]). It runs beside the database and ends the
// coordinator's prepared transactions that waited longer than its timeout for DoCommit or abort,
// by its termination mode ([WithAgentTermination]): by default as the coordinator's log decides
// ([Coordinator.Decide]; never without the log unless [WithAgentLogFallback]), or by the textbook
// rule, COMMIT PREPARED. The modes and their risks: docs/coordinators.md.
//
// Several agents may watch one database (every replica of a service): ending a prepared
// transaction that another agent has just ended is success. PGAgent is safe for concurrent use.
type PGAgent struct {
	c     *Coordinator
	name  string
	pool  *pgxpool.Pool
	o     agentOptions
	stats struct{ committed, rolledBack, fallbacks atomic.Int64 }
	wait  *logwait.Wait // the decision log's outage, its gauge and fallbacks counter
}

type agentOptions struct {
	timeout  time.Duration
	mode     participant.Termination
	fallback time.Duration // WithAgentLogFallback; 0: never commit without the log
	poll     time.Duration
	log      *slog.Logger
	now      func() time.Time // the clock the log's outage is measured by (tests set it)
}

// AgentOption configures a [PGAgent].
type AgentOption func(*agentOptions)

// WithAgentTimeout sets how long a prepared transaction waits for the coordinator before the
// agent ends it (default 20s, the default of [WithParticipantTimeout]: give both the same value).
// It is measured by the database's clock from the PREPARE TRANSACTION.
func WithAgentTimeout(d time.Duration) AgentOption { return func(o *agentOptions) { o.timeout = d } }

// WithAgentTermination sets the termination mode (default [participant.TerminationConsultLog]).
func WithAgentTermination(m participant.Termination) AgentOption {
	return func(o *agentOptions) { o.mode = m }
}

// WithAgentLogFallback lets a consult-log agent commit a prepared transaction by the textbook
// rule once the decision log has been unreachable for after (at least
// [participant.MinLogFallback]; default: never, the transaction waits for the log). Such a commit
// may contradict the coordinator's abort. A shorter after, or the option in textbook mode, makes
// [NewPGAgent] return an error wrapping [coordinator.ErrInvalidOption].
func WithAgentLogFallback(after time.Duration) AgentOption {
	return func(o *agentOptions) { o.fallback = after }
}

// WithAgentPoll sets how often [PGAgent.Run] scans pg_prepared_xacts (default 500ms).
func WithAgentPoll(d time.Duration) AgentOption { return func(o *agentOptions) { o.poll = d } }

// WithAgentLogger sets the logger (default: discard). Keys: gid, branch, action.
func WithAgentLogger(l *slog.Logger) AgentOption { return func(o *agentOptions) { o.log = l } }

// NewPGAgent returns the agent of the database behind db, registered with the coordinators as
// name ([Coordinator.RegisterDB]), for the prepared transactions of c: c's schema and table prefix
// name them, and c answers the consult-log questions, so it must be built on the log's pool — it
// needs no elector, no registered database and no Run. It does not touch the database. It
// registers its metrics on c's registerer ([coordinator.WithRegisterer]). A nil c or db, an
// invalid name, an unusable option (a timeout or poll not above zero, an unknown mode, a log
// fallback below [participant.MinLogFallback] or in textbook mode) or a metric clash returns an
// error wrapping [coordinator.ErrInvalidOption].
func NewPGAgent(c *Coordinator, name string, db *pgxpool.Pool, opts ...AgentOption) (*PGAgent, error) {
	if c == nil || db == nil {
		return nil, fmt.Errorf("threepc: agent: nil coordinator or pool: %w", coordinator.ErrInvalidOption)
	}
	if err := prepared.CheckName("database name", name); err != nil {
		return nil, fmt.Errorf("threepc: agent: %w: %w", err, coordinator.ErrInvalidOption)
	}
	o := agentOptions{timeout: 20 * time.Second, mode: participant.TerminationConsultLog, poll: 500 * time.Millisecond,
		log: slog.New(slog.DiscardHandler), now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case o.timeout <= 0:
		return nil, fmt.Errorf("threepc: agent: timeout %v: %w", o.timeout, coordinator.ErrInvalidOption)
	case o.poll <= 0:
		return nil, fmt.Errorf("threepc: agent: poll %v: %w", o.poll, coordinator.ErrInvalidOption)
	case o.mode != participant.TerminationTextbook && o.mode != participant.TerminationConsultLog:
		return nil, fmt.Errorf("threepc: agent: termination mode %v: %w", o.mode, coordinator.ErrInvalidOption)
	case o.log == nil:
		return nil, fmt.Errorf("threepc: agent: nil logger: %w", coordinator.ErrInvalidOption)
	case o.fallback != 0 && o.mode != participant.TerminationConsultLog:
		return nil, fmt.Errorf("threepc: agent: WithAgentLogFallback applies to termination mode %s only, not %s: %w",
			participant.TerminationConsultLog, o.mode, coordinator.ErrInvalidOption)
	case o.fallback != 0 && o.fallback < participant.MinLogFallback:
		return nil, fmt.Errorf("threepc: agent: log fallback after %v: below the minimum outage of %v (participant.MinLogFallback), which a PostgreSQL failover could reach and make the agent commit alone: %w",
			o.fallback, participant.MinLogFallback, coordinator.ErrInvalidOption)
	}
	a := &PGAgent{c: c, name: name, pool: db, o: o}
	var err error
	if a.wait, err = logwait.New(c.b.Cfg.Registerer, "3pc_pgagent", "database", name, "prepared 3PC transactions past the agent's timeout",
		o.fallback, o.now); err != nil {
		return nil, fmt.Errorf("threepc: agent: %w: %w", err, coordinator.ErrInvalidOption)
	}
	return a, nil
}

// AgentPass is what one [PGAgent.Pass] found and did.
type AgentPass struct {
	Found      int // the coordinator's prepared transactions older than the timeout
	Committed  int // committed (textbook, or the log's decision)
	RolledBack int // rolled back (the log's decision)
	Fallbacks  int // of those committed, by the textbook rule after the log's outage passed WithAgentLogFallback
	Waiting    int // left prepared because the decision log could not be reached
}

// AgentStats counts what a [PGAgent] did since it was made.
type AgentStats struct {
	Committed, RolledBack, Fallbacks int64
}

// Stats returns the agent's counters; Fallbacks is also txkit_3pc_pgagent_fallbacks_total{database}.
func (a *PGAgent) Stats() AgentStats {
	return AgentStats{Committed: a.stats.committed.Load(), RolledBack: a.stats.rolledBack.Load(), Fallbacks: a.stats.fallbacks.Load()}
}

// Pass scans the database once and ends every prepared transaction of the coordinator's branches
// on this database older than the timeout, as the termination mode says. It blocks until each was
// tried or ctx ends; failures are joined and returned after the others were done (the next pass
// tries them again). In consult-log mode a question the log does not answer within 15 seconds, or
// answers with an error, finds it unreachable: the pass asks no more and leaves the remaining
// transactions prepared, counted in [AgentPass.Waiting] (not an error), until the log answers or
// its outage has lasted [WithAgentLogFallback].
func (a *PGAgent) Pass(ctx context.Context) (AgentPass, error) {
	var res AgentPass
	found, err := prepared.Scan(ctx, a.pool, a.c.ns, a.o.timeout)
	if err != nil {
		return res, fmt.Errorf("threepc: agent: %w", err)
	}
	var errs []error
	logDown := false // a question to the log failed in this pass: ask no more
	for _, p := range found {
		if p.Branch != a.name { // another registered database's: they may share a server database
			continue
		}
		res.Found++
		out, fallback := participant.OutcomeCommit, false
		if a.o.mode == participant.TerminationConsultLog {
			var derr error
			out, derr = a.decide(ctx, p.GID, &logDown)
			switch {
			case derr != nil && ctx.Err() != nil:
				return res, errors.Join(append(errs, ctx.Err())...)
			case derr != nil && a.wait.FallbackDue():
				out, fallback = participant.OutcomeCommit, true
				a.o.log.WarnContext(ctx, "threepc: agent: the decision log has been unreachable longer than the fallback; committing by the textbook rule",
					slog.String("gid", p.GID), slog.String("branch", p.Branch), slog.Duration("fallback", a.o.fallback), slog.Any("err", derr))
			case derr != nil:
				res.Waiting++
				continue
			}
		}
		verb := prepared.Commit
		if out == participant.OutcomeAbort {
			verb = prepared.Rollback
		}
		if err := prepared.Finish(ctx, a.pool, verb, p.ID); errors.Is(err, prepared.ErrBusy) {
			continue // another agent is ending it; the next pass finds it gone, or tries again
		} else if err != nil {
			errs = append(errs, fmt.Errorf("threepc: agent: database %s: %w", a.name, err))
			continue
		}
		if out == participant.OutcomeAbort {
			res.RolledBack++
			a.stats.rolledBack.Add(1)
		} else {
			res.Committed++
			a.stats.committed.Add(1)
		}
		if fallback {
			res.Fallbacks++
			a.stats.fallbacks.Add(1)
			a.wait.Fallback()
		}
		a.o.log.InfoContext(ctx, "threepc: agent ended a prepared transaction the coordinator left", slog.String("gid", p.GID),
			slog.String("branch", p.Branch), slog.String("action", out.String()), slog.String("mode", a.o.mode.String()),
			slog.Duration("waited", time.Since(p.At)))
	}
	if res.Waiting == 0 {
		a.outageOver(ctx)
	}
	return res, errors.Join(errs...)
}

// decide asks the decision log about gid, unless a question failed earlier in this pass
// (*logDown); a failure sets *logDown.
func (a *PGAgent) decide(ctx context.Context, gid string, logDown *bool) (participant.Outcome, error) {
	var out participant.Outcome
	began, err := a.wait.Ask(ctx, logDown, func(ctx context.Context) (err error) {
		out, err = a.c.Decide(ctx, gid)
		return err
	})
	if began {
		a.o.log.WarnContext(ctx, "threepc: agent cannot reach the decision log; prepared transactions past the timeout wait for it",
			slog.String("database", a.name), slog.Any("err", err))
	}
	if err != nil {
		return 0, err
	}
	a.outageOver(ctx)
	return out, nil
}

// outageOver ends the log's outage, logging it if one was under way: the log answered, or
// nothing waits for it any more.
func (a *PGAgent) outageOver(ctx context.Context) {
	if lasted, ok := a.wait.End(); ok {
		a.o.log.InfoContext(ctx, "threepc: agent: no prepared transaction waits for the decision log any more",
			slog.String("database", a.name), slog.Duration("waited", lasted))
	}
}

// Run calls Pass every poll interval ([WithAgentPoll]) until ctx ends, logging failures. It needs
// no leadership: every replica may run it. It blocks; when ctx ends it waits for a pass in flight
// and returns nil.
func (a *PGAgent) Run(ctx context.Context) error {
	err := pgutil.RunSchedule(ctx, fmt.Sprintf("@every %v", a.o.poll), a.o.log, func(ctx context.Context) {
		if _, err := a.Pass(ctx); err != nil && ctx.Err() == nil {
			a.o.log.ErrorContext(ctx, "threepc: agent pass failed", slog.Any("err", err))
		}
	})
	if err != nil {
		return fmt.Errorf("threepc: agent: %w: %w", err, coordinator.ErrInvalidOption)
	}
	return nil
}
