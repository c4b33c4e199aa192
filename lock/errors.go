package lock

import "errors"

// Sentinel errors. Callers match them with [errors.Is]; the errors returned wrap them with the
// path, node or token involved, and keep the underlying ZooKeeper error in the chain.
var (
	// ErrSessionExpired: the ZooKeeper session a lock or leadership belonged to ended (expired, or
	// declared lost after a disconnect longer than the session allows). Nothing it held is held now.
	ErrSessionExpired = errors.New("lock: zookeeper session expired")
	// ErrLockLost: a lock or leadership that was held is no longer held (node deleted, session lost).
	ErrLockLost = errors.New("lock: lock lost")
	// ErrNotHeld: the lock is not held by this Mutex.
	ErrNotHeld = errors.New("lock: not held")
	// ErrLocked: TryLock found the lock held by someone else.
	ErrLocked = errors.New("lock: held by another owner")
	// ErrClosed: the Session was closed.
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
	// ErrNoCredentials: [NewSession] was given no ZooKeeper credentials ([WithDigestAuth]), so the
	// nodes it would create would be writable by anyone; [WithInsecureWorldACL] allows that
	// explicitly. The error also matches ErrInvalidOption.
	ErrNoCredentials = errors.New("lock: no zookeeper credentials")
)
