package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/lock"
)

// The writes of a workflow (package workflow), whose steps are recorded one at a time as its
// function runs instead of all at once when it begins.

// PutStep records b — a workflow's step, with its status, payload (the step's result or
// request), LastError and Refusal (the step's recorded error) — inserting or replacing its row,
// while gid is in status want, and renews the driver's lease on gid. A non-zero tok (a leader's)
// passes the fence first; a starter's write (zero tok) shares commits with the log's other writes
// ([WithGroupCommit]). gid no longer in want returns an error wrapping [ErrInvalidState] (a
// leader took it over, or it was stopped); nothing is written then. One statement, in a
// transaction with the fence check when fenced.
func (l *Log) PutStep(ctx context.Context, tok lock.Token, gid string, want Status, b Branch) error {
	return l.putStep(ctx, tok, gid, want, 0, -1, false, b)
}

// RecordStep is a starter's [Log.PutStep] of the outcome of step b of its running workflow,
// made only while the step before it (seq b.Seq-1) has its row, and committed without waiting
// for PostgreSQL to flush it to disk: every reader sees it once RecordStep returns, but a crash
// or failover of PostgreSQL may lose it, with every write committed after it (docs/workflows.md,
// "The log", says why a workflow may lose it). A step before it without its row (lost so) returns
// an error wrapping [ErrInvalidState], and nothing is written.
func (l *Log) RecordStep(ctx context.Context, gid string, b Branch) error {
	return l.putStep(ctx, lock.Token{}, gid, StatusRunning, 0, b.Seq-1, true, b)
}

// FinishStep is [Log.PutStep] that also moves gid from want to next (a workflow's outcome and
// its status in one statement), made only while the step at seq last has its row (none when
// last < 0): its commit, waiting for the flush, makes the records of the steps before durable.
// A final next counts in txkit_coordinator_transactions_finished_total, as [Log.Record] does.
func (l *Log) FinishStep(ctx context.Context, tok lock.Token, gid string, want, next Status, last int, b Branch) error {
	if !want.CanBecome(next) {
		return fmt.Errorf("core: finish %s: %s → %s: %w", gid, want, next, ErrInvalidState)
	}
	if err := l.putStep(ctx, tok, gid, want, next, last, false, b); err != nil {
		return err
	}
	if next.Final() {
		l.m.finished(next)
	}
	return nil
}

// putStep writes b while gid is in want and, with prev >= 0, the step at seq prev has its row.
func (l *Log) putStep(ctx context.Context, tok lock.Token, gid string, want, next Status, prev int, async bool, b Branch) error {
	switch {
	case b.Name == "":
		return fmt.Errorf("core: step of %s: empty name: %w", gid, ErrInvalidBranch)
	case b.Target.Ref == "" || !b.Target.Kind.valid():
		return fmt.Errorf("core: step %s of %s: target %s %q: %w", b.Name, gid, b.Target.Kind, b.Target.Ref, ErrInvalidBranch)
	}
	var to string
	if next != 0 {
		to = next.String()
	}
	args := []any{gid, want.String(), b.Name, int32(b.Seq), b.Target.Kind.String(), b.Target.Ref, b.Payload, b.Status.String(),
		boundText(b.LastError), boundText(b.Refusal),
		l.o.lease.Seconds(), encodeCallOptions(b.Target), to, int32(max(prev, -1))}
	var ok bool
	var err error
	if tok.IsZero() {
		ok, err = l.write(ctx, &write{kind: writeStep, gid: gid, args: args, async: async})
	} else {
		ok, err = l.fencedExec(ctx, tok, gid, l.q["put_step"], append(args, false))
	}
	if err != nil {
		return fmt.Errorf("core: step %s of %s: %w", b.Name, gid, err)
	}
	if ok {
		return nil
	}
	if cur, err := l.status(ctx, gid); err == nil && cur == want && prev >= 0 {
		return fmt.Errorf("core: step %s of %s: the row of step %d is missing (lost in a crash or failover of PostgreSQL): %w",
			b.Name, gid, prev, ErrInvalidState)
	}
	return l.notIn(ctx, gid, want)
}

// Park moves gid from status from to status to (the same, or [StatusStopped]) and makes it due
// for the leader after `after` — never (a century later) when after is negative (stopped for an operator) — with
// reason, when not empty, as its last error. A non-zero tok passes the fence first. gid no longer
// in from returns an error wrapping [ErrInvalidState]. One statement.
func (l *Log) Park(ctx context.Context, tok lock.Token, gid string, from, to Status, after time.Duration, reason string) error {
	if from != to && !from.CanBecome(to) {
		return fmt.Errorf("core: park %s: %s → %s: %w", gid, from, to, ErrInvalidState)
	}
	secs := after.Seconds()
	if after < 0 {
		secs = -1
	}
	ok, err := l.fencedExec(ctx, tok, gid, l.q["park"], []any{gid, from.String(), to.String(), secs, boundText(reason)})
	if err != nil {
		return fmt.Errorf("core: park %s: %w", gid, err)
	}
	if !ok {
		return l.notIn(ctx, gid, from)
	}
	return nil
}

// Tracer returns the coordinator's tracer (the one its branch calls and recovery drives use).
func (b *Base) Tracer() trace.Tracer { return b.tr }

// fencedExec runs q (returning a row when it changed one) on its own, or after the fence with a
// leader's tok in one transaction, and reports whether it returned a row.
func (l *Log) fencedExec(ctx context.Context, tok lock.Token, gid, q string, args []any) (bool, error) {
	var ok bool
	run := func(db interface {
		Query(context.Context, string, ...any) (pgx.Rows, error)
	}) error {
		rows, err := db.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		ok = rows.Next()
		rows.Close()
		return rows.Err()
	}
	if tok.IsZero() {
		return ok, unknownOutcome(run(l.pool))
	}
	// The check, q and the commit in one round trip (leader.CommitFenced).
	return ok, unknownOutcome(leader.CommitFenced(ctx, l.pool, l.fence, l.resourceOf(gid), tok, func(b *pgx.Batch) {
		b.Queue(q, args...).Query(func(rows pgx.Rows) error {
			ok = rows.Next()
			return nil
		})
	}))
}

// notIn returns the error of a write conditioned on gid being in want that found it otherwise.
func (l *Log) notIn(ctx context.Context, gid string, want Status) error {
	cur, err := l.status(ctx, gid)
	if err != nil {
		return err
	}
	return fmt.Errorf("core: %s is %s, not %s: %w", gid, cur, want, ErrInvalidState)
}

// boundText is s cleaned and bounded as the log stores error texts.
func boundText(s string) string {
	if s == "" {
		return ""
	}
	return pgutil.ErrorText(errors.New(s), maxErrorLen)
}
