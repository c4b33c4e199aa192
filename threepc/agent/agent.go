package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/barrierseam"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/threepc"
)

// threePCOps are the ops an [Agent] serves.
var threePCOps = []participant.Op{participant.OpCanCommit, participant.OpPreCommit, participant.OpDoCommit, participant.OpAbort}

// The states of a branch in the agent's table, and who ended it.
const (
	statePreCommitted = "precommitted"
	stateCommitted    = "committed"
	stateAborted      = "aborted"

	byCoordinator = "coordinator"
	byTimeout     = "timeout"

	indexSuffix = "_due"
)

// agentLease is how long a timed-out branch claimed by an agent is left to it: other agents pass
// it by meanwhile, and take it again after an agent died (or failed) before ending it. It outlasts
// a question to the decision log (askTimeout, 15 s).
const agentLease = 30 * time.Second

// errSettled: the branch an agent was about to end by its timeout was ended by the coordinator in
// the meantime; the agent's transaction is rolled back and nothing is counted.
var errSettled = errors.New("agent: branch already ended by the coordinator")

// Agent is the participant side of three-phase commit for an HTTP or in-process participant: it
// serves a branch's four 3PC ops through a [barrier.Barrier] and ends, alone, the pre-committed
// branches whose coordinator went silent.
//
// fn, given to [New], is the business code; it switches on req.Op and runs in the barrier's
// transaction: [participant.OpCanCommit] is a read-only check (a "no" wraps
// [participant.ErrRefused]; it writes nothing and is called every time it is asked),
// [participant.OpPreCommit] does the work reversibly (the agent then records the branch in its
// table in the same transaction), [participant.OpDoCommit] makes it final, [participant.OpAbort]
// undoes it (an abort before any PreCommit is an empty rollback and refuses that PreCommit for
// good). A DoCommit of a branch never pre-committed here is answered with
// [ErrUnknownTransaction]; a coordinator's op contradicting what the agent decided alone, with
// [ErrHeuristic].
//
// An Agent is safe for concurrent use by multiple goroutines, and several agents — the replicas
// of a participant service — may share one table: each timed-out branch is claimed by one of them.
type Agent struct {
	bar  *barrier.Barrier
	db   *barrierseam.Barrier // what the agent shares with bar: pool, schema, registerer, retention, transaction
	dec  Decider
	fn   barrierseam.Func
	o    options
	name string // schema-qualified, for messages
	ddl  string

	insert, settle, lookup, claim, release, purge string

	committed, aborted, fallbacks, heuristic atomic.Int64
	outage                                   *outage // the decision log's, with its gauge and fallbacks counter
}

// Stats counts what an [Agent] did since it was built.
type Stats struct {
	Committed int64 // branches committed alone after their timeout
	Aborted   int64 // branches aborted alone after their timeout (the decision log said abort)
	Fallbacks int64 // timeouts committed by the textbook rule after the log's outage passed WithTermination's fallback
	Heuristic int64 // coordinator ops refused with ErrHeuristic (each retry counts)
}

// PassResult is what one [Agent.Pass] did.
type PassResult struct {
	Found     int   // timed-out branches claimed
	Committed int   // of them, committed
	Aborted   int   // of them, aborted
	Settled   int   // of them, ended by the coordinator while the agent was deciding
	Fallbacks int   // of the committed, by the textbook rule after the log's outage passed WithTermination's fallback
	Waiting   int   // of them, left pre-committed because the decision log could not be reached
	Purged    int64 // rows of ended branches older than the barrier's retention, deleted
}

// New returns an Agent serving fn through bar and asking dec (a *threepc.Coordinator; nil only
// with [TerminationTextbook]) about timed-out branches, configured by opts. It does not touch the
// database: call [Agent.Migrate]. It registers its metrics on the barrier's registerer
// (barrier.WithTelemetry; see [Agent.Pass]). It returns an error wrapping [ErrInvalidOption]
// when bar or fn is nil, dec is nil in consult-log mode (the default), an option is unusable
// ([WithTermination]'s fallback below [MinLogFallback]) or a metric clashes.
func New(bar *barrier.Barrier, dec Decider, fn func(ctx context.Context, tx pgx.Tx, req participant.Request) error, opts ...Option) (*Agent, error) {
	if bar == nil {
		return nil, fmt.Errorf("agent: nil barrier: %w", ErrInvalidOption)
	}
	db := barrierseam.Of(bar)
	if fn == nil {
		return nil, fmt.Errorf("agent: nil function: %w", ErrInvalidOption)
	}
	if pgutil.IsNil(dec) {
		dec = nil
	}
	o := defaultOptions(DefaultTimeout)
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(dec != nil); err != nil {
		return nil, err
	}
	if err := o.validateTable(); err != nil {
		return nil, err
	}
	t, name := pgutil.Table(db.Schema, o.table)
	micros := func(n int64) string { return "interval '" + strconv.FormatInt(n, 10) + " microseconds'" }
	deadline := "clock_timestamp() + " + micros(o.timeout.Microseconds())
	schema := ""
	if db.Schema != "" {
		schema = `create schema if not exists ` + pgx.Identifier{db.Schema}.Sanitize() + `;`
	}
	a := &Agent{bar: bar, db: db, dec: dec, fn: fn, o: o, name: name}
	var err error
	if a.outage, err = newOutage(db.Registerer, "3pc_agent", "table", name, "pre-committed 3PC branches past the agent's timeout", o.fallback, o.now); err != nil {
		return nil, fmt.Errorf("agent: %w: %w", err, ErrInvalidOption)
	}
	a.outage.log, a.outage.waiting = o.log, "timed-out branches"
	a.ddl = `select pg_advisory_xact_lock(` + strconv.FormatInt(pgutil.MigrateLockKey("txkit/participant/agent/migrate:"+t), 10) + `);` +
		schema + `
create table if not exists ` + t + ` (
    gid        text        not null,
    branch     text        not null,
    payload    bytea,
    state      text        not null check (state in ('precommitted', 'committed', 'aborted')),
    decided_by text        check (decided_by in ('coordinator', 'timeout')),
    deadline   timestamptz not null,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    primary key (gid, branch)
);
create index if not exists ` + pgx.Identifier{o.table + indexSuffix}.Sanitize() + ` on ` + t + ` (deadline) where state = 'precommitted';`
	a.insert = `insert into ` + t + ` (gid, branch, payload, state, deadline) values ($1, $2, $3, '` + statePreCommitted + `', ` +
		deadline + `) on conflict (gid, branch) do nothing`
	a.settle = `update ` + t + ` set state = $3, decided_by = $4, updated_at = now() where gid = $1 and branch = $2 and state = '` +
		statePreCommitted + `'`
	a.lookup = `select state, coalesce(decided_by, '') from ` + t + ` where gid = $1 and branch = $2`
	// The claim moves the deadline on by the lease, so that other agents pass the row by while this
	// one decides it, and take it again if this one dies before ending it.
	a.claim = `update ` + t + ` a set deadline = now() + ` + micros(agentLease.Microseconds()) + ` from (select gid, branch from ` + t +
		` where state = '` + statePreCommitted + `' and deadline <= now() order by deadline limit $1 for update skip locked) d` +
		` where a.gid = d.gid and a.branch = d.branch returning a.gid, a.branch, a.payload`
	// A branch whose decision the log could not give is let go at once: the next pass asks again.
	a.release = `update ` + t + ` set deadline = now() where gid = $1 and branch = $2 and state = '` + statePreCommitted + `'`
	a.purge = `delete from ` + t + ` where ctid = any(array(select ctid from ` + t + ` where state <> '` + statePreCommitted +
		`' and updated_at < now() - ` + micros(db.Retention.Microseconds()) + ` limit $1 for update skip locked))`
	return a, nil
}

// Migrate creates the barrier's table (barrier.Barrier.Migrate) and the agent's — and the
// barrier's schema, if one was set — when they do not exist. It is idempotent and safe to run from
// several processes at once. It blocks until PostgreSQL answers; ctx scopes only this call.
func (a *Agent) Migrate(ctx context.Context) error {
	if err := a.bar.Migrate(ctx); err != nil {
		return err
	}
	if err := pgutil.MigrateOnce(ctx, a.db.Pool, a.db.Schema, a.ddl, nil); err != nil {
		return fmt.Errorf("agent: migrate %s: %w", a.name, err)
	}
	return nil
}

// Handler returns the barrier's handler (barrier.Barrier.Handler) of the agent's business code,
// restricted to the four 3PC ops — or to those of ops among them: authenticated as the barrier
// says, every other op answered 400. Besides the barrier's answers it answers 409 ([ErrHeuristic])
// to an op contradicting what the agent decided alone, and 400 ([ErrUnknownTransaction]) to a
// DoCommit of a branch never pre-committed here. The handler is safe for concurrent use.
func (a *Agent) Handler(ops ...participant.Op) http.Handler {
	allowed := threePCOps
	if len(ops) > 0 {
		allowed = slices.DeleteFunc(slices.Clone(ops), func(op participant.Op) bool { return !slices.Contains(threePCOps, op) })
	}
	return a.bar.Handler(a.serve(byCoordinator), barrier.WithAllowedOps(allowed...))
}

// Participant returns the in-process participant of the agent (barrier.Barrier.Participant),
// serving the four 3PC ops; another op returns an error wrapping [participant.ErrBadRequest]. Do
// blocks until its transaction ends; ctx scopes the whole call. It is safe for concurrent use.
func (a *Agent) Participant() participant.Participant {
	return a.bar.Participant(a.serve(byCoordinator))
}

// Stats returns the agent's counters. It is safe for concurrent use.
func (a *Agent) Stats() Stats {
	return Stats{Committed: a.committed.Load(), Aborted: a.aborted.Load(), Fallbacks: a.fallbacks.Load(), Heuristic: a.heuristic.Load()}
}

// Run ends timed-out branches, one [Agent.Pass] every poll interval ([WithTimeout]; skipping a
// pass while the previous one still runs), until ctx ends. It blocks; when ctx ends it cancels the pass in flight
// (ctx scopes the work too), waits for it and returns nil. Every replica of a participant service
// may run it on the same table: no leadership is needed.
func (a *Agent) Run(ctx context.Context) error {
	err := pgutil.RunSchedule(ctx, "@every "+a.o.poll.String(), a.o.log, func(ctx context.Context) {
		if _, err := a.Pass(ctx); err != nil && ctx.Err() == nil {
			a.o.log.ErrorContext(ctx, "agent: pass failed", slog.Any("err", err))
		}
	})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

// Pass claims the pre-committed branches whose timeout has passed, batch after batch, and ends
// each by the termination mode, through the barrier in a transaction of its own with the op the
// coordinator would send (participant.OpDoCommit or OpAbort); a branch the coordinator ends
// meanwhile is left as it ended it. It then deletes the rows of ended branches older than the
// barrier's retention. A claimed branch is left to this agent for 30 seconds; one that could not
// be ended is claimed again after that, and its error is returned, joined with the others, once
// the pass has gone through every claimed branch.
//
// In consult-log mode a question the log does not answer within 15 seconds, or answers with an
// error, finds it unreachable: the pass asks no more and lets the claimed branches go, counted in
// [PassResult.Waiting] (not an error), and txkit_3pc_agent_log_wait_seconds{table} says how long
// they have waited; once that outage has lasted [WithTermination]'s fallback they are committed by the
// textbook rule, counted in [PassResult.Fallbacks] and txkit_3pc_agent_fallbacks_total{table}.
//
// Pass blocks until done or ctx ends; ctx scopes the work. It is safe for concurrent use, also by
// agents in other processes sharing the table.
func (a *Agent) Pass(ctx context.Context) (PassResult, error) {
	var p PassResult
	var errs []error
	logDown := false // a question to the log failed in this pass: ask no more
	for {
		due, err := a.claimDue(ctx)
		if err != nil {
			return p, errors.Join(append(errs, err)...)
		}
		p.Found += len(due)
		for _, r := range due {
			if ctx.Err() != nil {
				return p, errors.Join(append(errs, ctx.Err())...)
			}
			if err := a.end(ctx, r, &p, &logDown); err != nil {
				errs = append(errs, err)
			}
		}
		// Branches let go for the log are due again at once: leave them to the next pass.
		if len(due) < a.o.batch || p.Waiting > 0 {
			break
		}
	}
	if p.Waiting == 0 {
		a.outage.over(ctx)
	}
	n, err := a.db.Pool.Exec(ctx, a.purge, a.o.batch)
	if err != nil {
		errs = append(errs, fmt.Errorf("agent: purge %s: %w", a.name, err))
	} else {
		p.Purged = n.RowsAffected()
	}
	return p, errors.Join(errs...)
}

func (a *Agent) claimDue(ctx context.Context) ([]participant.Request, error) {
	rows, err := a.db.Pool.Query(ctx, a.claim, a.o.batch)
	if err != nil {
		return nil, fmt.Errorf("agent: claim timed-out branches in %s: %w", a.name, err)
	}
	due, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (participant.Request, error) {
		var r participant.Request
		var payload []byte
		err := row.Scan(&r.GID, &r.Branch, &payload)
		if len(payload) > 0 {
			r.Payload = payload
		}
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("agent: claim timed-out branches in %s: %w", a.name, err)
	}
	return due, nil
}

// end decides the timed-out branch r and applies the decision; logDown says that a question to
// the log failed earlier in this pass, and is set when this one does.
func (a *Agent) end(ctx context.Context, r participant.Request, p *PassResult, logDown *bool) error {
	attrs := []any{slog.String("gid", r.GID), slog.String("branch", r.Branch), slog.String("mode", a.o.mode.String())}
	outcome := threepc.OutcomeCommit
	fallback := false
	if a.o.mode == TerminationConsultLog {
		o, err := a.outage.decide(ctx, a.dec, r.GID, logDown)
		switch {
		case err != nil && ctx.Err() != nil:
			return fmt.Errorf("agent: decide %s/%s: %w", r.GID, r.Branch, err)
		case err != nil && a.outage.fallbackDue():
			a.o.log.WarnContext(ctx, "agent: the decision log has been unreachable longer than the fallback; committing by the textbook rule",
				append(attrs, slog.Duration("fallback", a.o.fallback), slog.Any("err", err))...)
			fallback = true
		case err != nil:
			p.Waiting++
			if _, rerr := a.db.Pool.Exec(ctx, a.release, r.GID, r.Branch); rerr != nil {
				return fmt.Errorf("agent: let %s/%s go after the decision log failed: %w", r.GID, r.Branch, rerr)
			}
			return nil
		case o == threepc.OutcomeCommit || o == threepc.OutcomeAbort:
			outcome = o
		default:
			return fmt.Errorf("agent: decide %s/%s: the decision log answered %s", r.GID, r.Branch, o)
		}
	}
	r.Op = participant.OpDoCommit
	if outcome == threepc.OutcomeAbort {
		r.Op = participant.OpAbort
	}
	var ran bool
	serve := a.serve(byTimeout)
	err := a.db.Do(ctx, r, func(ctx context.Context, tx pgx.Tx, req participant.Request) error {
		ran = true
		return serve(ctx, tx, req)
	})
	switch {
	case errors.Is(err, errSettled) || (err == nil && !ran):
		p.Settled++
		a.o.log.InfoContext(ctx, "agent: 3pc branch ended by its coordinator while its timeout was being handled",
			append(attrs, slog.String("wanted", outcome.String()))...)
		return nil
	case err != nil:
		return fmt.Errorf("agent: %s %s/%s after its timeout: %w", r.Op, r.GID, r.Branch, err)
	case outcome == threepc.OutcomeCommit:
		p.Committed++
		a.committed.Add(1)
		if fallback {
			p.Fallbacks++
			a.fallbacks.Add(1)
			a.outage.fellBack()
		}
	default:
		p.Aborted++
		a.aborted.Add(1)
	}
	a.o.log.InfoContext(ctx, "agent: 3pc branch ended alone after its timeout", append(attrs, slog.String("outcome", outcome.String()))...)
	return nil
}

// serve returns the function the barrier runs for a 3PC op, which keeps the agent's table in step
// with fn; by says who sent the op (the coordinator, or the agent's timeout).
func (a *Agent) serve(by string) func(ctx context.Context, tx pgx.Tx, req participant.Request) error {
	return func(ctx context.Context, tx pgx.Tx, req participant.Request) error {
		switch req.Op {
		case participant.OpCanCommit:
			return a.fn(ctx, tx, req)
		case participant.OpPreCommit:
			if err := a.fn(ctx, tx, req); err != nil {
				return err
			}
			// After the work, so that the timeout runs from (nearly) the commit.
			tag, err := tx.Exec(ctx, a.insert, req.GID, req.Branch, []byte(req.Payload))
			if err != nil {
				return fmt.Errorf("record the precommit in %s: %w", a.name, err)
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("precommit for gid %s branch %s, which %s already holds: %w", req.GID, req.Branch, a.name, participant.ErrRefused)
			}
			return nil
		case participant.OpDoCommit, participant.OpAbort:
			state := stateCommitted
			if req.Op == participant.OpAbort {
				state = stateAborted
			}
			tag, err := tx.Exec(ctx, a.settle, req.GID, req.Branch, state, by)
			if err != nil {
				return fmt.Errorf("record the %s in %s: %w", req.Op, a.name, err)
			}
			if tag.RowsAffected() == 0 {
				return a.settled(ctx, tx, req, state, by)
			}
			return a.fn(ctx, tx, req)
		}
		return fmt.Errorf("op %s is not a three-phase commit op: %w", req.Op, participant.ErrBadRequest)
	}
}

// settled answers an op (DoCommit or abort) for a branch that is not pre-committed: a duplicate, a
// branch never pre-committed here, or one ended the other way.
func (a *Agent) settled(ctx context.Context, tx pgx.Tx, req participant.Request, want, by string) error {
	var state, decidedBy string
	err := tx.QueryRow(ctx, a.lookup, req.GID, req.Branch).Scan(&state, &decidedBy)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s for gid %s branch %s that was never pre-committed here: %w", req.Op, req.GID, req.Branch, ErrUnknownTransaction)
	case err != nil:
		return fmt.Errorf("look up the branch in %s: %w", a.name, err)
	case by == byTimeout:
		return errSettled // the coordinator ended it first: its decision stands
	case state == want:
		return nil // a duplicate
	case decidedBy == byTimeout:
		a.heuristic.Add(1)
		a.o.log.ErrorContext(ctx, "agent: 3pc coordinator's decision contradicts the one this agent took alone after its timeout",
			slog.String("gid", req.GID), slog.String("branch", req.Branch), slog.String("op", req.Op.String()), slog.String("state", state))
		return fmt.Errorf("%s for gid %s branch %s that this participant %s alone after its timeout: %w", req.Op, req.GID, req.Branch, state, ErrHeuristic)
	}
	return fmt.Errorf("%s for gid %s branch %s that the coordinator already %s: %w", req.Op, req.GID, req.Branch, state, participant.ErrRefused)
}
