package barrier

import (
	"errors"
	"fmt"
	"strings"

	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/internal/refusal"
)

// Sentinel errors of the barrier; the answers of the wire protocol, [participant.ErrRefused] and
// [participant.ErrBadRequest], are package participant's. Callers match them with [errors.Is].
var (
	// ErrHanging: a try (or a saga action, a prepare, a precommit) arrived after its branch was
	// cancelled. Usually the cancel came first, found no try and recorded an empty rollback, which
	// blocks the try for good — the hanging try; a try retried after its branch was cancelled
	// normally gets the same answer. Either way the business code is not called. It wraps
	// [participant.ErrRefused], so [Barrier.Handler] answers 409 and the coordinator, already
	// rolling back, does nothing more with the branch.
	ErrHanging = fmt.Errorf("%w: branch already cancelled (hanging try)", participant.ErrRefused)
	// ErrInvalidOption: [New] was given an option it cannot use. The error returned wraps it and,
	// when the idempotency store rejected the option, idempotency.ErrInvalidOption too.
	ErrInvalidOption = errors.New("barrier: invalid option")
	// ErrUnauthorized: [Barrier.Handler] refused a request (HTTP 401) whose signature is missing,
	// does not verify against its secrets ([WithSecrets]), carries a timestamp outside the window
	// or was seen before (a replay); or the handler has no secret at all. Nothing was run or
	// written.
	ErrUnauthorized = errors.New("barrier: unauthorized")
)

// refusalAnswer is the text [Barrier.Handler] answers with a 409 for the refusal err of req:
// [participant.ErrRefused]'s text and the reason the business code gave, without the op, gid and
// branch that the caller sent (participant.HTTP.Do says them, once, with the URL).
func refusalAnswer(req participant.Request, err error) string {
	msg := strings.TrimPrefix(err.Error(), fmt.Sprintf("participant: %s %s/%s: ", req.Op, req.GID, req.Branch))
	if reason := refusal.Reason(msg, participant.ErrRefused.Error()); reason != "" {
		return participant.ErrRefused.Error() + ": " + reason
	}
	return participant.ErrRefused.Error()
}
