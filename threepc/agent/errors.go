package agent

import (
	"errors"
	"fmt"

	"github.com/txkit/txkit/participant"
)

// Sentinel errors of the agents. Callers match them with [errors.Is].
var (
	// ErrInvalidOption: [New] or [NewPG] was given an argument or option it cannot use, or
	// [ParseTermination] a text it does not know.
	ErrInvalidOption = errors.New("agent: invalid option")
	// ErrHeuristic: a coordinator's DoCommit or abort arrived for a branch that the [Agent] had
	// already ended the other way alone, after its timeout (committed by the textbook rule, or
	// aborted by the decision log). The two sides disagree and a person must reconcile them; the
	// agent logs it at error level and counts it ([Stats].Heuristic). It wraps
	// [participant.ErrRefused], so [Agent.Handler] answers 409.
	ErrHeuristic = fmt.Errorf("%w: heuristic outcome (the branch was already ended the other way by its participant's timeout)", participant.ErrRefused)
	// ErrUnknownTransaction: a DoCommit (or abort) named a branch that was never pre-committed at
	// this [Agent]. It wraps [participant.ErrBadRequest], so [Agent.Handler] answers 400.
	ErrUnknownTransaction = fmt.Errorf("%w: unknown transaction", participant.ErrBadRequest)
)
