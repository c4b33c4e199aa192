package saga

import (
	"errors"
	"fmt"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/participant"
)

// Sentinel errors. Callers match them with [errors.Is]. A saga rolled back because an action was
// refused returns an error wrapping [participant.ErrRefused].
var (
	// ErrNotFound: no saga has the gid.
	ErrNotFound = errors.New("saga: not found")
	// ErrInvalidState: the saga's status does not allow the call (a second Submit, a gid already
	// used, a saga another driver moved on, ...).
	ErrInvalidState = errors.New("saga: invalid state")
	// ErrInvalidStep: a step is malformed (empty or duplicate name, a DependsOn naming no step
	// added before it, a payload that is not JSON, a participant that is neither participant.HTTP
	// nor registered), or the saga has no step.
	ErrInvalidStep = errors.New("saga: invalid step")
	// ErrInvalidOption: a constructor or call was given an option or argument it cannot use.
	ErrInvalidOption = errors.New("saga: invalid option")
	// ErrIncomplete: the saga is recorded but not finished — actions or compensations failed
	// (transiently) or ctx ended. The recovering leader carries on from the log: forward until
	// the saga's timeout, compensations until they succeed.
	ErrIncomplete = errors.New("saga: not finished; the leader carries on")
	// ErrRunning: Run was called while another Run of the same Coordinator is running.
	ErrRunning = errors.New("saga: already running")
	// ErrTimeout: the saga's timeout passed before every action succeeded; it is compensated.
	ErrTimeout = errors.New("saga: timed out")
)

// StepError is the error of one step's operation: which saga, which step, which op (action or
// compensate) and the participant's error (wrapping [participant.ErrRefused] for a refusal).
type StepError struct {
	GID  string
	Step string
	Op   participant.Op
	Err  error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("saga: %s step %s of %s: %v", e.Op, e.Step, e.GID, e.Err)
}

// Unwrap returns the participant's error.
func (e *StepError) Unwrap() error { return e.Err }

// mapErr puts this package's sentinel in front of the core's, keeping both in the chain.
func mapErr(err error) error {
	return core.Sentinels{NotFound: ErrNotFound, InvalidState: ErrInvalidState, InvalidBranch: ErrInvalidStep,
		InvalidOption: ErrInvalidOption, Running: ErrRunning}.Map(err)
}
