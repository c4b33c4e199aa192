package zklock

import (
	"errors"
)

// ErrNoCredentials: [NewSession] was given no ZooKeeper credentials ([WithDigestAuth]), so the
// nodes it would create would be writable by anyone; [WithInsecureWorldACL] allows that
// explicitly. The error also matches [lock.ErrInvalidOption].
//
// The other errors of this package wrap the sentinels of package lock: [lock.ErrSessionExpired]
// when the ZooKeeper session ends, [lock.ErrLockLost], [lock.ErrLocked], [lock.ErrClosed] and the
// others, with the underlying go-zookeeper error kept in the chain.
var ErrNoCredentials = errors.New("zklock: no zookeeper credentials")
