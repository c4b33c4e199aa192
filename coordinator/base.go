package coordinator

import (
	"context"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/participant"
)

// Base is the part every coordinator shares: tcc.Coordinator, saga.Coordinator,
// twopc.Coordinator and threepc.Coordinator embed it (internal/core's Base implements it), so
// these are their methods. Each is safe for concurrent use by multiple goroutines. Only the
// coordinators of this module implement it.
type Base interface {
	// Migrate creates the coordinator's tables (and the fence table) when they do not exist. It
	// is idempotent and safe to run from several processes at once; ctx scopes only this call.
	Migrate(ctx context.Context) error
	// Register makes p — in-process, or a gRPC participant of package participant/grpccall — the
	// participant called name, and returns the participant to put in a branch (a saga's step). The branch stores the name, so every coordinator that may
	// recover the transaction (the leader may be another process) must register the same name.
	// An empty name, a nil participant or a name registered before returns an error wrapping
	// [ErrInvalidOption].
	Register(name string, p participant.Participant) (participant.Participant, error)
	// Status returns gid's status, or an error wrapping [ErrNotFound]. It blocks for one read,
	// after this coordinator's deferred finish of gid if one is pending ([WithDeferredFinish]);
	// ctx scopes only this call.
	Status(ctx context.Context, gid string) (Status, error)
	// Attach waits until gid's transaction is finished and returns its final status (tcc's
	// StatusConfirmed or StatusCancelled, saga's StatusSucceeded or StatusCompensated, ...): a
	// start of a gid given with [WithGID] that returned an error wrapping [ErrExists] — a retried
	// request of the same business key — gets the first start's outcome this way. It reads the log
	// until then (delays from 10ms to 500ms). An unknown gid (never recorded, or deleted after
	// [WithRetention]) returns an error wrapping [ErrNotFound]; ctx ending first returns the status
	// last read (confirming: decided, not yet carried out) and an error wrapping [ErrIncomplete]
	// and ctx's error.
	Attach(ctx context.Context, gid string) (Status, error)
	// Flush waits until the finishes this coordinator deferred so far ([WithDeferredFinish]) are
	// written, or ctx ends (an error wrapping its error); with WithDeferredFinish(false) it returns
	// nil at once. Call it before the process exits: a finish it does not wait for is not lost — the
	// leader finishes the transaction once the starter's lease has passed — but costs the
	// participants a second confirm, action or commit, which their barrier turns into a no-op.
	Flush(ctx context.Context) error
}

// Status is the state of a global transaction (a saga); each coordinator package names the
// statuses of its protocol (tcc.StatusConfirmed, saga.StatusCompensated, twopc.StatusCommitted).
type Status = core.Status

// Branch is a participant's part in a global transaction of tcc, twopc or threepc (tcc.Branch,
// twopc.Branch and threepc.Branch are this type): its name within the transaction (with the gid,
// the participant's barrier key), the participant — a participant.HTTP, whose URL is stored, or
// one returned by Register (in-process, or gRPC: package participant/grpccall), whose name is
// stored, so a recovering coordinator can call it — the
// payload sent with every op of the branch (empty or JSON), and the bound of each call of its ops
// (Timeout; default: the call timeout of [WithRetry]). Timeout and the participant.HTTP's Header
// are stored with the branch, so the recovery's calls use them too; the log keeps the headers in
// clear, so a Header that may carry a credential (Authorization, Cookie, a name holding "auth",
// "token", "secret", "key", "password", ...) or that the wire protocol sets is refused with an
// error wrapping [ErrInvalidBranch]: credentials belong to the client ([WithHTTPClient]).
type Branch = core.BranchSpec
