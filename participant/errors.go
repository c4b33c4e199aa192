package participant

import (
	"errors"
	"fmt"
)

// Sentinel errors of the barrier. [ErrRefused] and [ErrBadRequest], shared with the wire protocol,
// are declared in wire.go. Callers match them with [errors.Is].
var (
	// ErrHanging: a try (or a saga action) arrived after its branch was cancelled (compensated).
	// Usually the cancel came first, found no try and recorded an empty rollback, which blocks the
	// try for good — the hanging try; the same answer goes to a try retried after its branch was
	// cancelled normally. Either way the business code is not called. ErrHanging wraps
	// [ErrRefused], so [Barrier.Handler] answers [StatusRefused] (409) and the coordinator, already
	// rolling back, does nothing more with the branch.
	ErrHanging = fmt.Errorf("%w: branch already cancelled (hanging try)", ErrRefused)
	// ErrInvalidOption: [NewBarrier] was given an option it cannot use. The error returned wraps it
	// and, when the idempotency store rejected the option, idempotency.ErrInvalidOption too.
	ErrInvalidOption = errors.New("participant: invalid option")
	// ErrUnauthorized: [Barrier.Handler] refused a request (HTTP 401) whose signature is missing,
	// does not verify against its secrets ([WithSecrets]), carries a timestamp outside the window
	// or was seen before (a replay); or the handler has no secret at all. Nothing was run or
	// written.
	ErrUnauthorized = errors.New("participant: unauthorized")
)
