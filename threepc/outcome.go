package threepc

import "fmt"

// Outcome is the fate of a global transaction as [Coordinator.Decide] tells a participant's agent
// (package threepc/agent): commit or abort.
type Outcome uint8

const (
	// OutcomeCommit: the transaction commits.
	OutcomeCommit Outcome = iota + 1
	// OutcomeAbort: the transaction aborts.
	OutcomeAbort
)

// String returns "commit" or "abort".
func (o Outcome) String() string {
	switch o {
	case OutcomeCommit:
		return "commit"
	case OutcomeAbort:
		return "abort"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}
