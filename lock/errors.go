package lock

import "errors"

// Sentinel errors, shared by every backend. Callers match them with [errors.Is]; the errors
// returned wrap them with the name, node or token involved, and keep the backend's own error in
// the chain.
var (
	// ErrSessionExpired: the backend session a wait or a hold belonged to ended (a ZooKeeper
	// session expired, or was declared lost after a disconnect longer than the session allows).
	// Nothing it held is held now; a Lock that failed with it may be tried again.
	ErrSessionExpired = errors.New("lock: session expired")
	// ErrLockLost: a lock or leadership that was held is no longer held (node or key deleted,
	// lease not renewed in time, session lost).
	ErrLockLost = errors.New("lock: lock lost")
	// ErrNotHeld: the lock is not held by this Locker.
	ErrNotHeld = errors.New("lock: not held")
	// ErrLocked: TryLock found the lock held by someone else.
	ErrLocked = errors.New("lock: held by another owner")
	// ErrClosed: the backend's session or client was closed.
	ErrClosed = errors.New("lock: session closed")
	// ErrNoLeader: no candidate currently leads.
	ErrNoLeader = errors.New("lock: no leader")
	// ErrNotLeader: the caller does not (or no longer) lead.
	ErrNotLeader = errors.New("lock: not leader")
	// ErrFenced: a write carried a fencing token lower than one already seen for the resource: its
	// writer was deposed. Package fence's refusals wrap it.
	ErrFenced = errors.New("lock: fenced")
	// ErrInvalidOption: a constructor was given an option or argument it cannot use.
	ErrInvalidOption = errors.New("lock: invalid option")
)
