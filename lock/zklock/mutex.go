package zklock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/txkit/txkit/lock"
)

// Mutex is a lock on a ZooKeeper path, shared with every process that uses the same path. It
// keeps the [lock.Locker] contract: reentrant per value, lost at any time (session ended, node
// deleted), so work under it runs under [lock.Lease.Context] and writes elsewhere carry
// [lock.Lease.Token] to a fence; after a loss, Lock errs until the lost hold is unlocked.
//
// The default recipe is fair and Curator-compatible (ephemeral-sequential "_c_<uuid>-lock-<seq>"
// children, as Apache Curator's InterProcessMutex, so Go and Java processes exclude each other;
// each waiter watches only its predecessor); [WithUnfair] selects the one-node recipe. Only
// ephemeral children count as contenders: a persistent one a stranger made is skipped and logged
// once. docs/lock.md ("ZooKeeper (`lock/zklock`)") has the mechanism. Mutex is safe for concurrent use by
// multiple goroutines (they share its hold).
type Mutex struct {
	s    *Session
	path string
	o    options

	r *lock.Reentrant // the holds of this Mutex value

	mu      sync.Mutex
	parent  bool                // the parent path is known to exist
	ignored map[string]struct{} // children named like contenders that are not (not ephemeral)
}

// zkLease is one hold of a [Mutex]: its fencing token, its node, and how the holder learns that
// it lost the lock.
type zkLease struct {
	*lock.Hold
	m    *Mutex
	node string // full path of our node
	ep   *epoch

	released chan struct{}
	relOnce  sync.Once
	unclaim  func() // the unfair recipe: lets go of the Session's claim on the node (see Session.claimUnfair)
}

// NewMutex returns a Mutex on lockPath (an absolute ZooKeeper path; missing parents are created
// as persistent nodes). It does not touch ZooKeeper.
func NewMutex(s *Session, lockPath string, opts ...Option) (*Mutex, error) {
	if s == nil {
		return nil, fmt.Errorf("zklock: nil session: %w", lock.ErrInvalidOption)
	}
	if err := validPath(lockPath); err != nil {
		return nil, err
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	return &Mutex{s: s, path: lockPath, o: o, r: lock.NewReentrant(lockPath)}, nil
}

// MaxPathLen is the longest lock path [NewMutex] and [NewElector] accept, in bytes: a contender's
// node name adds about 50 bytes to it, and every request carries the whole path.
const MaxPathLen = 1024

func validPath(p string) error {
	if len(p) > MaxPathLen {
		return fmt.Errorf("zklock: path of %d bytes: at most %d: %w", len(p), MaxPathLen, lock.ErrInvalidOption)
	}
	if p == "" || p[0] != '/' || (len(p) > 1 && strings.HasSuffix(p, "/")) || strings.Contains(p, "//") || p == "/" {
		return fmt.Errorf("zklock: path %q: want an absolute ZooKeeper path such as /app/lock: %w", p, lock.ErrInvalidOption)
	}
	return nil
}

// Node returns the path of the node of the current hold, or "" when the Mutex holds nothing.
func (m *Mutex) Node() string {
	if l, ok := m.r.Current().(*zkLease); ok {
		return l.node
	}
	return ""
}

// Path returns the lock path.
func (m *Mutex) Path() string { return m.path }

// Lock blocks until the lock is held or ctx ends, and returns the Lease of the hold. If ctx ends
// first, the contender's node is deleted (with a fresh, bounded context) and ctx's error is
// returned; nothing is left behind. If the ZooKeeper session ends while waiting, Lock returns an
// error wrapping [lock.ErrSessionExpired] at once. ctx scopes only the wait: the hold lasts until
// Unlock, or until the lock is lost ([lock.Lease.Done]).
func (m *Mutex) Lock(ctx context.Context) (lock.Lease, error) {
	return m.r.Lock(ctx, func(ctx context.Context) (lock.Lease, error) { return m.take(ctx, true) })
}

// TryLock takes the lock if it is free and returns at once: an error wrapping [lock.ErrLocked] when
// another owner holds it. ctx bounds the ZooKeeper round trips.
func (m *Mutex) TryLock(ctx context.Context) (lock.Lease, error) {
	return m.r.Lock(ctx, func(ctx context.Context) (lock.Lease, error) { return m.take(ctx, false) })
}

// take runs the recipe and starts the new hold's monitor.
func (m *Mutex) take(ctx context.Context, wait bool) (lock.Lease, error) {
	var (
		l   *zkLease
		err error
	)
	if m.o.unfair {
		l, err = m.lockUnfair(ctx, wait)
	} else {
		l, err = m.lockFair(ctx, wait)
	}
	if err != nil {
		return nil, err
	}
	m.s.goOwned(l.monitor)
	return l, nil
}

// Unlock releases one hold; the last one deletes the node. Unlock of a Mutex that holds nothing
// does nothing and returns nil, so calling it twice is safe. The delete is retried through
// connection losses with a fresh context bounded by the session timeout (a cancelled ctx does
// not stop it); if it still has not succeeded, it continues in the background while the
// ZooKeeper session lives, and Unlock returns an error saying so. Only this hold's own node is
// ever deleted, never a newer holder's.
func (m *Mutex) Unlock(ctx context.Context) error {
	l, ok := m.r.Release().(*zkLease)
	if !ok {
		return nil
	}
	l.relOnce.Do(func() { close(l.released) })
	l.end(fmt.Errorf("%w: released by Unlock", lock.ErrNotHeld))
	return m.deleteNode(ctx, l.ep, l.node, l.unclaim)
}

func (m *Mutex) newLease(ep *epoch, node string, tok lock.Token) (*zkLease, error) {
	return &zkLease{Hold: lock.NewHold(tok), m: m, node: node, ep: ep, released: make(chan struct{})}, nil
}

// monitor ends the lease when its session ends, when (an elector's) its node is deleted,
// or when after a reconnection the node is found gone or owned by another session.
func (l *zkLease) monitor() {
	ep := l.ep
	var nodeGone <-chan zk.Event
	for {
		if l.m.o.nodeWatch && nodeGone == nil {
			r, err := ep.exists(l.Context(), l.node, true)
			nodeGone = r.watch
			switch {
			case err == nil && !r.val:
				l.end(fmt.Errorf("%w: node %s deleted", lock.ErrLockLost, l.node))
				return
			case err != nil:
				nodeGone = nil
			}
		}
		select {
		case <-l.released:
			return
		case <-ep.done:
			l.end(fmt.Errorf("%w: %w", lock.ErrLockLost, ep.Err()))
			return
		case ev := <-nodeGone:
			if ev.Type == zk.EventNodeDeleted {
				l.end(fmt.Errorf("%w: node %s deleted", lock.ErrLockLost, l.node))
				return
			}
			nodeGone = nil
		case <-ep.reconnectedCh():
			// Same session after a disconnection: check that the node is still ours.
			ctx, cancel := context.WithTimeout(l.Context(), l.m.s.o.timeout)
			owner, err := l.m.ownerOf(ctx, ep, l.node)
			cancel()
			if err == nil && owner != ep.sessionID() {
				l.end(fmt.Errorf("%w: node %s not ours after reconnection (owner %#x)", lock.ErrLockLost, l.node, owner))
				return
			}
			nodeGone = nil
		}
	}
}

// end marks the lease over with cause.
func (l *zkLease) end(cause error) {
	if l.End(cause) && !errors.Is(cause, lock.ErrNotHeld) {
		l.m.s.log.Warn("lock lost", "path", l.m.path, "node", l.node, "token", l.Token().String(), "err", cause)
	}
}

var _ lock.Locker = (*Mutex)(nil)
