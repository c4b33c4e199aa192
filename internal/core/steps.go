package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/lock"
)

// The writes of a workflow (package workflow), whose steps are recorded one at a time as its
// function runs instead of all at once when it begins.

// PutStep records b — a workflow's step, with its status, payload (the step's result or
// request), LastError and Refusal (the step's recorded error) — inserting or replacing its row,
// while gid is in status want, and renews the driver's lease on gid. A non-zero tok (a leader's)
// passes the fence first. gid no longer in want returns an error wrapping [ErrInvalidState] (a
// leader took it over, or it was stopped); nothing is written then. One statement, in a
// transaction with the fence check when fenced.
func (l *Log) PutStep(ctx context.Context, tok lock.Token, gid string, want Status, b Branch) error {
	return l.putStep(ctx, tok, gid, want, 0, b)
}

// FinishStep is [Log.PutStep] that also moves gid from want to next (a workflow's outcome and
// its status in one statement). A final next counts in
// txkit_coordinator_transactions_finished_total, as [Log.Record] does.
func (l *Log) FinishStep(ctx context.Context, tok lock.Token, gid string, want, next Status, b Branch) error {
	if !want.CanBecome(next) {
		return fmt.Errorf("core: finish %s: %s → %s: %w", gid, want, next, ErrInvalidState)
	}
	if err := l.putStep(ctx, tok, gid, want, next, b); err != nil {
		return err
	}
	if next.Final() {
		l.m.finished(next)
	}
	return nil
}

func (l *Log) putStep(ctx context.Context, tok lock.Token, gid string, want, next Status, b Branch) error {
	switch {
	case b.Name == "":
		return fmt.Errorf("core: step of %s: empty name: %w", gid, ErrInvalidBranch)
	case b.Target.Ref == "" || !b.Target.Kind.valid():
		return fmt.Errorf("core: step %s of %s: target %s %q: %w", b.Name, gid, b.Target.Kind, b.Target.Ref, ErrInvalidBranch)
	}
	args := []any{gid, want.String(), b.Name, int32(b.Seq), b.Target.Kind.String(), b.Target.Ref, b.Payload, b.Status.String(),
		boundText(b.LastError), boundText(b.Refusal),
		l.o.lease.Seconds(), encodeCallOptions(b.Target)}
	var to string
	if next != 0 {
		to = next.String()
	}
	ok, err := l.fencedExec(ctx, tok, gid, l.q["put_step"], append(args, to))
	if err != nil {
		return fmt.Errorf("core: step %s of %s: %w", b.Name, gid, err)
	}
	if !ok {
		return l.notIn(ctx, gid, want)
	}
	return nil
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
	return ok, unknownOutcome(pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		if err := l.fenceCheck(ctx, tx, tok, gid); err != nil {
			return err
		}
		return run(tx)
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
