package core

import (
	"fmt"
	"strconv"
)

// Kind is the protocol of a global transaction. The table's kind column stores [Kind.String].
type Kind uint8

const (
	KindTCC      Kind = iota + 1 // try, then confirm all or cancel all
	KindSaga                     // actions in order, compensations in reverse
	Kind2PC                      // prepare, then commit all or roll back all
	Kind3PC                      // can-commit, pre-commit, then do-commit all or abort all
	KindWorkflow                 // a Go function whose steps are recorded as it runs; compensations in reverse
)

var kindNames = map[Kind]string{KindTCC: "tcc", KindSaga: "saga", Kind2PC: "2pc", Kind3PC: "3pc", KindWorkflow: "workflow"}

// beginSpans names the span of recording a transaction of each kind ([Log.CreateIn]), made once.
var beginSpans = map[Kind]string{KindTCC: "tcc begin", KindSaga: "saga begin", Kind2PC: "2pc begin", Kind3PC: "3pc begin",
	KindWorkflow: "workflow begin"}

func (k Kind) beginSpan() string {
	if s, ok := beginSpans[k]; ok {
		return s
	}
	return k.String() + " begin"
}

// String returns the name stored in the kind column.
func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// ParseKind reads the name [Kind.String] writes.
func ParseKind(s string) (Kind, error) {
	for k, n := range kindNames {
		if n == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("core: unknown kind %q: %w", s, ErrInvalidOption)
}

// Status is the state of a global transaction. The status column stores [Status.String].
type Status uint8

const (
	StatusTrying       Status = iota + 1 // tcc/2pc: branches are being tried (prepared)
	StatusConfirming                     // decided to commit; confirms under way
	StatusConfirmed                      // every branch confirmed (final)
	StatusCancelling                     // decided to roll back; cancels under way
	StatusCancelled                      // every branch cancelled (final)
	StatusRunning                        // saga: actions under way
	StatusCompensating                   // saga: an action failed; compensations under way
	StatusCompensated                    // saga: every completed action compensated (final)
	StatusSucceeded                      // saga: every action done (final)
	StatusVoting                         // 2pc with vote markers: recorded beside the PREPAREs; the votes decide
	StatusStopped                        // workflow: stopped for an operator (a replay diverged from its log)
)

var statusNames = map[Status]string{
	StatusTrying: "trying", StatusConfirming: "confirming", StatusConfirmed: "confirmed",
	StatusCancelling: "cancelling", StatusCancelled: "cancelled", StatusRunning: "running",
	StatusCompensating: "compensating", StatusCompensated: "compensated", StatusSucceeded: "succeeded",
	StatusVoting: "voting", StatusStopped: "stopped",
}

// String returns the name stored in the status column.
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// ParseStatus reads the name [Status.String] writes.
func ParseStatus(s string) (Status, error) {
	for st, n := range statusNames {
		if n == s {
			return st, nil
		}
	}
	return 0, fmt.Errorf("core: unknown status %q: %w", s, ErrInvalidState)
}

// transitions lists, for each status, the statuses a transaction may move to. Every statement
// that changes a global status is checked against it ([Status.CanBecome]) before it runs, and
// conditions on the old status in its WHERE clause, so concurrent writers cannot skip a step.
var transitions = map[Status][]Status{
	StatusTrying:       {StatusConfirming, StatusCancelling},                 // starter: Commit / Rollback; leader: timeout → cancel
	StatusConfirming:   {StatusConfirmed},                                    // every confirm succeeded
	StatusCancelling:   {StatusCancelled},                                    // every cancel succeeded
	StatusRunning:      {StatusSucceeded, StatusCompensating, StatusStopped}, // saga: all actions done / one refused; workflow: stopped
	StatusCompensating: {StatusCompensated, StatusStopped},                   // every compensation succeeded; workflow: stopped
	// 2pc with vote markers: the starter commits every branch (each voted yes) or withdraws; the
	// leader settles from the votes. No timeout: the votes, not the log, say whether a branch may
	// have committed.
	StatusVoting: {StatusConfirmed, StatusConfirming, StatusCancelling},
	// workflow: a replay that diverged from the log stops it (Log.Park); an operator's fix (a
	// deployment of the function it was started with) resumes it. Never due while stopped.
	StatusStopped: {StatusRunning},
}

// CanBecome reports whether a transaction in status s may move to t.
func (s Status) CanBecome(t Status) bool {
	for _, n := range transitions[s] {
		if n == t {
			return true
		}
	}
	return false
}

// Final reports whether s is an end state: nothing more happens to the transaction, and the
// retention job may delete it.
func (s Status) Final() bool {
	_, ok := statusNames[s]
	return ok && len(transitions[s]) == 0
}

// Initial returns the status a new transaction of kind k starts in.
func (k Kind) Initial() Status {
	if k == KindSaga || k == KindWorkflow {
		return StatusRunning
	}
	return StatusTrying
}

// Outcome returns the final status a transaction in the driving status s reaches once every
// branch has done its op (confirming → confirmed, ...), and false for other statuses.
func (s Status) Outcome() (Status, bool) {
	switch s {
	case StatusConfirming:
		return StatusConfirmed, true
	case StatusCancelling:
		return StatusCancelled, true
	case StatusRunning:
		return StatusSucceeded, true
	case StatusCompensating:
		return StatusCompensated, true
	case StatusVoting:
		return StatusConfirmed, true
	}
	return 0, false
}

// BranchesImplied returns the status every branch of a transaction in the final status s is in,
// and false when s does not say (compensated: steps that never ran stay pending). A transaction
// reaches such a status only once every branch has done its op (confirmed: each confirmed), so
// its finish leaves the branch rows as they are and readers take their status from the
// transaction's ([Log.Get]): one row changed at the end instead of one per branch. Not a
// workflow's: it writes each step's row with its own status ([Log.PutStep]).
func (s Status) BranchesImplied() (BranchStatus, bool) {
	switch s {
	case StatusConfirmed:
		return BranchConfirmed, true
	case StatusCancelled:
		return BranchCancelled, true
	case StatusSucceeded:
		return BranchSucceeded, true
	}
	return 0, false
}

// settled reports whether a transaction in s can end in one status only, whoever drives it: a
// decision carried out (confirming, cancelling, compensating). Only a finish from such a status
// may be deferred ([WithDeferredFinish]): a lost one is finished the same way by the leader. A
// saga's running → succeeded is itself the decision — a leader finding it running past its
// timeout compensates — so its caller must not learn "succeeded" before it is written. (A
// workflow's compensating may also become stopped, by a replay that diverged: not a finish.)
// Two-phase commit's voting counts too: its starter finishes it (voting → confirmed) only once
// every branch voted yes, and a leader settling it from those votes commits as well.
func (s Status) settled() bool {
	return s == StatusConfirming || s == StatusCancelling || s == StatusCompensating || s == StatusVoting
}

// timeoutStatus is the status a transaction moves to when its global timeout passes, if it is
// still in s; false when the timeout does not apply to s (the decision is already made).
func (s Status) timeoutStatus() (Status, bool) {
	if s == StatusTrying {
		return StatusCancelling, true
	}
	return 0, false
}

// BranchStatus is the state of a branch. It records only what recovery must not do again: a
// branch is [BranchPending] until the op of its transaction's driving status succeeded, then it
// takes that op's done status.
type BranchStatus uint8

const (
	BranchPending     BranchStatus = iota + 1 // recorded; try/action outcome unknown or phase two not done
	BranchConfirmed                           // confirm succeeded
	BranchCancelled                           // cancel succeeded
	BranchSucceeded                           // saga action succeeded
	BranchCompensated                         // saga compensation succeeded
)

var branchNames = map[BranchStatus]string{
	BranchPending: "pending", BranchConfirmed: "confirmed", BranchCancelled: "cancelled",
	BranchSucceeded: "succeeded", BranchCompensated: "compensated",
}

// String returns the name stored in the branch status column.
func (b BranchStatus) String() string {
	if n, ok := branchNames[b]; ok {
		return n
	}
	return "BranchStatus(" + strconv.Itoa(int(b)) + ")"
}

// ParseBranchStatus reads the name [BranchStatus.String] writes.
func ParseBranchStatus(s string) (BranchStatus, error) {
	for b, n := range branchNames {
		if n == s {
			return b, nil
		}
	}
	return 0, fmt.Errorf("core: unknown branch status %q: %w", s, ErrInvalidState)
}

// branchTransitions lists the branch statuses a branch may move to.
var branchTransitions = map[BranchStatus][]BranchStatus{
	BranchPending:   {BranchConfirmed, BranchCancelled, BranchSucceeded, BranchCompensated}, // saga: a refused or unknown-outcome action is compensated too
	BranchSucceeded: {BranchCompensated},
}

// CanBecome reports whether a branch in status b may move to t.
func (b BranchStatus) CanBecome(t BranchStatus) bool {
	for _, n := range branchTransitions[b] {
		if n == t {
			return true
		}
	}
	return false
}

// BranchDone returns the branch status that a successful op in the global status s records
// (confirming → confirmed, ...), and false when s drives no branch op.
func (s Status) BranchDone() (BranchStatus, bool) {
	switch s {
	case StatusConfirming:
		return BranchConfirmed, true
	case StatusCancelling:
		return BranchCancelled, true
	case StatusRunning:
		return BranchSucceeded, true
	case StatusCompensating:
		return BranchCompensated, true
	case StatusVoting: // the starter commits every branch once each voted yes
		return BranchConfirmed, true
	}
	return 0, false
}

// TargetKind says how a branch's participant is reached.
type TargetKind uint8

const (
	TargetHTTP   TargetKind = iota + 1 // Target.Ref is a URL
	TargetInProc                       // Target.Ref is a name registered with the coordinator
	TargetGRPC                         // Target.Ref is the name of a gRPC participant registered with the coordinator
	TargetLocal                        // no participant: a workflow's own record (Target.Ref says which: a local step, a sleep, the result)
)

// valid reports whether k is one of the kinds above.
func (k TargetKind) valid() bool {
	return k == TargetHTTP || k == TargetInProc || k == TargetGRPC || k == TargetLocal
}

// String returns the name stored in the target_kind column.
func (k TargetKind) String() string {
	switch k {
	case TargetHTTP:
		return "http"
	case TargetInProc:
		return "inproc"
	case TargetGRPC:
		return "grpc"
	case TargetLocal:
		return "local"
	}
	return "TargetKind(" + strconv.Itoa(int(k)) + ")"
}

// ParseTargetKind reads the name [TargetKind.String] writes.
func ParseTargetKind(s string) (TargetKind, error) {
	switch s {
	case "http":
		return TargetHTTP, nil
	case "inproc":
		return TargetInProc, nil
	case "grpc":
		return TargetGRPC, nil
	case "local":
		return TargetLocal, nil
	}
	return 0, fmt.Errorf("core: unknown target kind %q: %w", s, ErrInvalidBranch)
}
