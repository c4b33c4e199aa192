package workflow

import "errors"

// Sentinel errors of package workflow; the errors returned wrap them with the gid, the workflow's
// name and the step involved. The coordinator's own (coordinator.ErrIncomplete, ErrTimeout,
// ErrExists, ...) are those of package coordinator.
var (
	// ErrNotRegistered: no function is registered under the workflow's name in this process.
	ErrNotRegistered = errors.New("workflow: not registered")
	// ErrNondeterministic: a replay asked for another step (name or kind) than the log holds at
	// that position. The workflow is stopped (status stopped) for an operator.
	ErrNondeterministic = errors.New("workflow: nondeterministic replay")
	// ErrTooLarge: an input, a step's result or the output is larger than [MaxRecordSize].
	ErrTooLarge = errors.New("workflow: too large to record")
	// ErrEncoding: an input, a step's result or the output cannot be encoded as JSON (or a
	// recorded one decoded into the type asked for).
	ErrEncoding = errors.New("workflow: not serialisable")
	// ErrCompensated: the workflow rolled back — its function returned an error, a participant
	// refused a step or its timeout passed — and the compensations of its completed steps ran.
	ErrCompensated = errors.New("workflow: compensated")
)
