package participant

import (
	"errors"
	"fmt"
	"strings"
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
	// ErrInvalidOption: [NewBarrier] or [NewAgent] was given an option it cannot use. The error returned wraps it
	// and, when the idempotency store rejected the option, idempotency.ErrInvalidOption too.
	ErrInvalidOption = errors.New("participant: invalid option")
	// ErrUnauthorized: [Barrier.Handler] refused a request (HTTP 401) whose signature is missing,
	// does not verify against its secrets ([WithSecrets]), carries a timestamp outside the window
	// or was seen before (a replay); or the handler has no secret at all. Nothing was run or
	// written.
	ErrUnauthorized = errors.New("participant: unauthorized")
	// ErrHeuristic: a 3PC coordinator's DoCommit or abort arrived for a branch that the [Agent]
	// had already ended the other way alone, after its timeout (committed by the textbook rule,
	// or aborted by the decision log). The two sides disagree and a person must reconcile them;
	// the agent logs it at error level and counts it ([AgentStats].Heuristic). It wraps
	// [ErrRefused], so [Agent.Handler] answers 409.
	ErrHeuristic = fmt.Errorf("%w: heuristic outcome (the branch was already ended the other way by its participant's timeout)", ErrRefused)
	// ErrUnknownTransaction: a 3PC DoCommit (or abort) named a branch that was never pre-committed
	// at this [Agent]. It wraps [ErrBadRequest], so [Agent.Handler] answers 400.
	ErrUnknownTransaction = fmt.Errorf("%w: unknown transaction", ErrBadRequest)
)

// refusal is the text [Barrier.Handler] answers with a 409 for the refusal err of req:
// [ErrRefused]'s text and the reason the business code gave, without the op, gid and branch that
// the caller sent (HTTP.Do says them, once, with the URL).
func refusal(req Request, err error) string {
	msg := strings.TrimPrefix(err.Error(), fmt.Sprintf("participant: %s %s/%s: ", req.Op, req.GID, req.Branch))
	if reason := refusalReason(msg); reason != "" {
		return ErrRefused.Error() + ": " + reason
	}
	return ErrRefused.Error()
}

// refusalReason returns what msg, the text of a refusal, says beyond [ErrRefused]'s own text:
// "insufficient stock" of "insufficient stock: participant: refused", "" of "participant: refused".
func refusalReason(msg string) string {
	r := ErrRefused.Error()
	msg = strings.TrimSpace(msg)
	switch {
	case msg == r:
		return ""
	case strings.HasPrefix(msg, r+": "):
		return msg[len(r)+2:]
	case strings.HasSuffix(msg, ": "+r):
		return msg[:len(msg)-len(r)-2]
	}
	return msg
}
