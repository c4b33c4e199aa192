package coordinator

import "github.com/txkit/txkit/internal/core"

// Sentinel errors shared by every coordinator: tcc, saga, twopc and threepc return errors wrapping these
// very values. Callers match them with [errors.Is]. A refused try, action or vote returns an
// error wrapping [github.com/txkit/txkit/participant.ErrRefused]; a deposed leader's write, one
// wrapping lock.ErrFenced.
var (
	// ErrNotFound: no global transaction (saga) has the gid.
	ErrNotFound = core.ErrNotFound
	// ErrInvalidState: the transaction's status does not allow the call (a Try or Commit after
	// the decision, a second Submit, a gid already used, a Commit after the leader cancelled the
	// transaction at its timeout, ...).
	ErrInvalidState = core.ErrInvalidState
	// ErrExists: the gid given with [WithGID] is taken by a transaction already recorded — a
	// retried start of the same business key: call Attach (of [Base]) for that transaction's
	// outcome. It is returned by the write that claims the gid (tcc's Begin, saga's Submit, twopc's
	// and threepc's Commit) before any of this start's work is executed by a participant. An
	// error wrapping it also wraps [ErrInvalidState].
	ErrExists = core.ErrExists
	// ErrInvalidBranch: a branch (a saga's step) is malformed — an empty name, a payload that is
	// not JSON, a participant that is neither a participant.HTTP with a URL nor registered with
	// the coordinator, a saga step depending on no step added before it, a twopc database that is
	// not registered — or its name is already used in the transaction; or a saga has no step.
	ErrInvalidBranch = core.ErrInvalidBranch
	// ErrInvalidOption: a constructor or call was given an option or argument it cannot use,
	// among them a protocol's own option given to another protocol's coordinator.
	ErrInvalidOption = core.ErrInvalidOption
	// ErrIncomplete: the transaction is recorded but not finished — its confirms, cancels,
	// commits, actions or compensations failed (transiently) or ctx ended — and the recovering
	// leader carries it on from the log. After a decision (TCC, two-phase commit) the outcome is
	// settled: treat it as committed (rolled back) but not yet applied everywhere.
	ErrIncomplete = core.ErrIncomplete
	// ErrRunning: Run was called while another Run of the same Coordinator is running.
	ErrRunning = core.ErrRunning
	// ErrTimeout: a saga's timeout passed before every action succeeded; it is compensated.
	ErrTimeout = core.ErrTimeout
	// ErrInDoubt: a write of the transaction to the log may or may not have been made: its
	// connection or session was lost after it was sent (a failover's FATAL error after the
	// commit), or, with WithGroupCommit, the caller's ctx ended before its batch's answer. The
	// outcome is unknown, not failed: the transaction is recorded or not; if it is, the leader
	// carries it on, and a retry of the call finds it. (twopc's and threepc's ErrInDoubt are about
	// the decision.)
	ErrInDoubt = core.ErrInDoubt
)

// BranchError is the error of one branch's operation (a saga's step): which transaction, which
// branch, which op, and the participant's error (wrapping
// [github.com/txkit/txkit/participant.ErrRefused] for a refusal), which Unwrap returns. Its text names only the branch (a step for saga ops) and the
// error, which says the op, gid and URL when the participant is a participant.HTTP; the
// coordinator's error around it says the rest.
type BranchError = core.BranchError

// Stats counts what a Coordinator of this process saw since it was built; the Stats method of
// every coordinator (tcc, saga, twopc, threepc) returns it, and a field its protocol does not count
// stays zero:
//
//   - Committed, Aborted: transactions this process committed (phase two done) or aborted (twopc,
//     threepc).
//   - Failures: failed branch calls other than refused tries, actions and votes; retried (all).
//   - Violations: refusals of ops that must succeed eventually (a confirm, cancel, compensation,
//     commit or abort): a participant broke the protocol; retried (all).
//   - Resolved: in-doubt prepared transactions resolved from pg_prepared_xacts (twopc).
//   - AgentAborts: undecided transactions whose abort threepc.Coordinator.Decide recorded for an
//     agent (threepc).
type Stats = core.Stats
