package agent

import (
	"context"
	"fmt"

	"github.com/txkit/txkit/threepc"
)

// Termination is how an agent ends a pre-committed branch that heard neither DoCommit nor abort
// within its timeout.
type Termination uint8

const (
	// TerminationTextbook commits, as the protocol's documents prescribe. Under a network
	// partition it can commit a branch whose coordinator aborted.
	TerminationTextbook Termination = iota + 1
	// TerminationConsultLog asks the coordinator's decision log through a [Decider] and follows
	// it. While the log cannot be reached the branch waits, pre-committed, and is asked about
	// again; it is never committed without the log, unless [WithTermination]'s fallback allows it after a
	// long outage.
	TerminationConsultLog
)

// String returns "textbook" or "consult-log".
func (m Termination) String() string {
	switch m {
	case TerminationTextbook:
		return "textbook"
	case TerminationConsultLog:
		return "consult-log"
	}
	return fmt.Sprintf("termination(%d)", uint8(m))
}

// ParseTermination reads a Termination from its String form ("textbook", "consult-log"); any
// other text returns an error wrapping [ErrInvalidOption].
func ParseTermination(s string) (Termination, error) {
	for _, m := range []Termination{TerminationTextbook, TerminationConsultLog} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("agent: unknown termination mode %q (want \"textbook\" or \"consult-log\"): %w", s, ErrInvalidOption)
}

// Decider tells an [Agent] the fate of a global transaction, in [TerminationConsultLog] mode:
// Decide returns what the coordinator's decision log says — or, for a transaction still
// undecided, the abort the Decider has just recorded there (a conditional write, so that exactly
// one of it and the coordinator's own decision stands). A transaction absent from the log is
// [threepc.OutcomeAbort] (presumed abort). An error means the log could not be reached or read;
// the agent then leaves the branch waiting and asks again later (see [WithTermination]'s fallback). Decide
// blocks until the log answers or ctx ends. A *threepc.Coordinator is one; implementations must
// be safe for concurrent use.
type Decider interface {
	Decide(ctx context.Context, gid string) (threepc.Outcome, error)
}

// DeciderFunc adapts a function to [Decider].
type DeciderFunc func(ctx context.Context, gid string) (threepc.Outcome, error)

// Decide calls f.
func (f DeciderFunc) Decide(ctx context.Context, gid string) (threepc.Outcome, error) {
	return f(ctx, gid)
}
