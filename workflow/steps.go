package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/txkit/txkit/participant"
)

// Context is the context a workflow's function gets: a context.Context (its deadline is the
// workflow's) that the step functions of this package record through. It is valid only during
// the call of the function it was given to, and only in that function's goroutine.
type Context interface {
	context.Context
	// GID returns the workflow's id.
	GID() string
	run() *run
}

type wfContext struct {
	context.Context
	r *run
}

func (w wfContext) GID() string { return w.r.gid }
func (w wfContext) run() *run   { return w.r }

// StepError is a local step's recorded error, as a replay returns it: the text only.
type StepError struct {
	GID, Step string
	Text      string
}

func (e *StepError) Error() string { return "workflow " + e.GID + ": step " + e.Step + ": " + e.Text }

// Step runs fn as the step called name of the workflow, records its outcome — its result as JSON,
// or its error — and returns it; in a replay it returns the recorded outcome without running fn
// (a recorded error as a *[StepError]). The same name used again in one workflow names the
// steps name, name#2, name#3... fn gets the workflow's deadline and trace. A result that cannot
// be encoded, or larger than [MaxRecordSize], is recorded as the step's error, wrapping
// [ErrEncoding] or [ErrTooLarge]. When the workflow cannot go on (a write failed, ctx ended, the
// replay diverged, the deadline passed), Step returns an error saying so without running fn: the
// function should return it. It blocks while fn runs and for one write.
func Step[T any](ctx Context, name string, fn func(context.Context) (T, error)) (T, error) {
	return StepWithCompensation(ctx, name, fn, nil)
}

// StepWithCompensation is [Step] that registers compensate, called with the step's result when
// the workflow rolls back after fn succeeded: the function returned an error, a participant
// refused a step or the deadline passed. Compensations run in the reverse order of their steps,
// each until it returns nil (retried by the leader with backoff), each recorded once done. A
// compensation that ran but was not recorded before a crash runs again: make it idempotent.
func StepWithCompensation[T any](ctx Context, name string, fn func(context.Context) (T, error), compensate func(context.Context, T) error) (T, error) {
	var zero T
	var comp func(context.Context, []byte) error
	if compensate != nil {
		comp = func(ctx context.Context, res []byte) error {
			var v T
			if err := json.Unmarshal(res, &v); err != nil {
				return fmt.Errorf("decode the result: %w: %w", ErrEncoding, err)
			}
			return compensate(ctx, v)
		}
	}
	res, err := ctx.run().local(ctx, name, func(ctx context.Context) ([]byte, error) {
		v, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		return encode("result of step "+name, v)
	}, comp)
	if err != nil {
		return zero, err
	}
	var v T
	if err := json.Unmarshal(res, &v); err != nil {
		return zero, fmt.Errorf("workflow %s: step %s: decode the recorded result: %w: %w", ctx.GID(), name, ErrEncoding, err)
	}
	return v, nil
}

// Call calls p's action as the step called name, with payload (JSON-encoded; nil for none),
// and registers its compensation: when the workflow rolls back, p is called with
// participant.OpCompensate and the same payload. The request carries the barrier identity (gid,
// step name, op), so a call re-sent after a crash is applied once by a participant behind
// participant/barrier. p is a participant.HTTP or one returned by Register ([coordinator.Base]).
// The call's answer is recorded once it comes: nil on success; a refusal, an error wrapping
// participant.ErrRefused (a *[coordinator.BranchError]), is recorded and returned (the refused
// step is not compensated). A call whose answer was not recorded (the process died) is sent again
// by the replay; one the workflow rolls back at without a record is compensated all the same. A call failing otherwise is retried up to 3 times with
// backoff, then the workflow is left to the leader (an error wrapping
// [coordinator.ErrIncomplete]). It blocks for the calls and one write.
func Call(ctx Context, name string, p participant.Participant, payload any) error {
	return ctx.run().call(ctx, name, p, payload, false)
}

// Try is [Call] for a TCC participant: it calls p's try (participant.OpTry) as the step called
// name, and records it like a call; once the function has returned without error, p's confirm is
// called (before the workflow's success is recorded), and when the workflow rolls back, its
// cancel (in reverse step order, with the other compensations). A refused try returns an error
// wrapping participant.ErrRefused (a *[coordinator.BranchError]) and is neither confirmed nor
// cancelled. A confirm that fails leaves the workflow to the leader, which confirms it (Start
// returns [coordinator.ErrIncomplete]).
func Try(ctx Context, name string, p participant.Participant, payload any) error {
	return ctx.run().call(ctx, name, p, payload, true)
}

// Sleep records a durable sleep of d and waits until it is over or the workflow's deadline
// passes (an error wrapping [coordinator.ErrTimeout]). When the process dies, the leader resumes
// the workflow once the sleep is over (plus the lease, [coordinator.WithLease], which the
// sleeping starter holds). A replay of a sleep that is over returns at once.
func Sleep(ctx Context, d time.Duration) error {
	return ctx.run().sleep(ctx, d)
}
