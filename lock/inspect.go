package lock

import (
	"context"
	"time"
)

// Contender is one process taking part in a lock or an election, as an [Inspector] reads it. Its
// JSON form has lower-case keys (since omitted when zero), as the admin API serves it.
type Contender struct {
	// ID is the data the contender stored with its hold or its place in the queue: the candidate
	// id of an [Elector], the data a lock was given (the backend's WithData); "" when none was given.
	ID string `json:"id"`
	// Token is the fencing token the contender holds (the holder) or will hold when its turn
	// comes (ZooKeeper's waiters); the zero Token when the backend cannot tell.
	Token Token `json:"token"`
	// Holder is true for the contender that holds the lock (or leads the election).
	Holder bool `json:"holder"`
	// Since is when the contender joined the queue or took the lock, by the server's clock; the
	// zero time when the backend does not record it.
	Since time.Time `json:"since,omitzero"`
}

// Inspector reads a lock's holder and waiters without taking part in it: it creates nothing,
// watches nothing and changes nothing. Every backend has one: the Inspector methods of
// lock/zklock's Session and of lock/pglock's and lock/redislock's clients. Implementations are
// safe for concurrent use by multiple goroutines.
type Inspector interface {
	// Contenders returns the holder of the lock called name (a lock path for ZooKeeper, the
	// name given to the backend's NewMutex or NewElector otherwise) first, if anyone holds it,
	// then the waiters in the order they will get the lock. waitersKnown is false for backends
	// whose waiters queue inside their own processes (the PostgreSQL lease, Redis, ZooKeeper's
	// unfair recipe): then only the holder is listed. A lock nobody holds returns (nil,
	// waitersKnown, nil). It blocks for the backend's round trips, bounded by ctx; when ctx ends
	// first, its error is returned. A name the backend cannot use returns an error wrapping
	// [ErrInvalidOption]. What it returns is a snapshot: the lock may change hands right after.
	Contenders(ctx context.Context, name string) (cs []Contender, waitersKnown bool, err error)
}
