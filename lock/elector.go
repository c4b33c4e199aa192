package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// Elector runs a leader election on a fair [Mutex]: the candidate holding the lock leads. Each
// candidate's node carries its id (an address, a host name), so anyone can ask who leads.
//
// One Elector is one candidate: one node in the election. Several components of one process may
// share it (an outbox relay and a coordinator's recovery, say): each [Elector.Campaign] on an
// Elector that leads, or that is already waiting, joins that candidacy, and every Leadership it
// returns carries the same token and ends together; the node is deleted when the last of them
// resigns. Components that share an Elector lead together, on the same process; give a component
// an Elector of its own (its own election path) when it should be able to lead elsewhere. Ids
// need not be unique (they are what [Elector.Leader] reports), but an id per process makes that
// answer useful. Elector is safe for concurrent use by multiple goroutines.
type Elector struct {
	s    *Session
	path string
	id   string
	m    *Mutex
}

// Leadership is a won election: the fencing token, and how the leader learns that it lost.
// Leadership can be lost at any time (session expiry, node deleted); run leader-only work under
// [Leadership.Context] and fence its writes with [Leadership.Token].
type Leadership struct {
	e     *Elector
	lease *Lease

	resign    sync.Once
	resignErr error
}

// NewElector returns a candidate with the given id for the election at electionPath.
func NewElector(s *Session, electionPath, id string) (*Elector, error) {
	if id == "" {
		return nil, fmt.Errorf("lock: elector on %s: empty candidate id: %w", electionPath, ErrInvalidOption)
	}
	m, err := NewMutex(s, electionPath, WithData([]byte(id)), WithNodeWatch())
	if err != nil {
		return nil, err
	}
	return &Elector{s: s, path: electionPath, id: id, m: m}, nil
}

// ID returns the candidate's id.
func (e *Elector) ID() string { return e.id }

// Campaign blocks until the candidate leads or ctx ends (then its node is removed and ctx's error
// returned). It returns an error wrapping [ErrSessionExpired] if the session ends while waiting.
// ctx scopes only the wait. Campaign on a candidate that already leads returns at once with a
// Leadership sharing the lead (the same token); each Leadership must be resigned. After a
// leadership is lost, Campaign returns an error until every Leadership of the lost term has
// resigned ([Elector.RunWhileLeader] does this).
func (e *Elector) Campaign(ctx context.Context) (*Leadership, error) {
	l, err := e.m.Lock(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock: campaign %s on %s: %w", e.id, e.path, err)
	}
	e.s.log.Info("elected leader", "path", e.path, "id", e.id, "token", l.Token().String())
	return &Leadership{e: e, lease: l}, nil
}

// Token returns the leadership's fencing token.
func (l *Leadership) Token() Token { return l.lease.Token() }

// Done returns a channel closed when the leadership ends (lost or resigned).
func (l *Leadership) Done() <-chan struct{} { return l.lease.Done() }

// Context returns a context cancelled when the leadership ends.
func (l *Leadership) Context() context.Context { return l.lease.Context() }

// Err returns nil while leading, then why the leadership ended.
func (l *Leadership) Err() error { return l.lease.Err() }

// Resign gives up this Leadership. When it was the last one sharing the candidate's lead, the node
// is deleted (see [Mutex.Unlock]) and the next candidate takes over; while others still share it,
// the candidate goes on leading for them. Calling it again does nothing and returns the first
// call's result.
func (l *Leadership) Resign(ctx context.Context) error {
	l.resign.Do(func() {
		if err := l.e.m.Unlock(ctx); err != nil {
			l.resignErr = fmt.Errorf("lock: resign %s: %w", l.e.id, err)
		}
	})
	return l.resignErr
}

// Leader returns the id of the current leader, or an error wrapping [ErrNoLeader] when no
// candidate is in the election. It blocks for the ZooKeeper round trips (bounded by ctx).
func (e *Elector) Leader(ctx context.Context) (string, error) {
	ep, err := e.s.epoch(ctx)
	if err != nil {
		return "", err
	}
	for {
		id, _, err := e.leader(ctx, ep, false)
		if err == nil || !errors.Is(err, zk.ErrNoNode) {
			return id, err
		}
		// The leader's node went between the list and the read: list again.
	}
}

// leader reads the lowest child's data; with watch it also returns a channel that fires when the
// children change.
func (e *Elector) leader(ctx context.Context, ep *epoch, watch bool) (string, <-chan zk.Event, error) {
	res, err := ep.children(ctx, e.path, watch)
	names, ch := res.val, res.watch
	if errors.Is(err, zk.ErrNoNode) {
		return "", ch, fmt.Errorf("lock: election %s: %w", e.path, ErrNoLeader)
	}
	if err != nil {
		return "", nil, fmt.Errorf("lock: election %s: %w", e.path, err)
	}
	// The lowest contender leads. A child named like one that is not ephemeral is skipped (and
	// remembered): the read that gets the leader's id returns its stat too.
	for _, c := range e.m.contenders(names) {
		r, err := ep.get(ctx, e.path+"/"+c.name, false)
		if err != nil {
			return "", nil, err
		}
		if isContender(r.stat) {
			return string(r.val), ch, nil
		}
		e.m.ignore(c.name, r.stat)
	}
	return "", ch, fmt.Errorf("lock: election %s: %w", e.path, ErrNoLeader)
}

// Observe returns a channel that receives the leader's id each time it changes ("" while nobody
// leads). The channel is closed when ctx ends; an observer must keep reading it.
func (e *Elector) Observe(ctx context.Context) <-chan string {
	out := make(chan string)
	e.s.goOwned(func() {
		defer close(out)
		last := "\x00"
		for ctx.Err() == nil {
			ep, err := e.s.epoch(ctx)
			if err != nil {
				return
			}
			id, ch, err := e.leader(ctx, ep, true)
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil && !errors.Is(err, ErrNoLeader) {
				if pause(ctx, nil, 100*time.Millisecond) != nil {
					return
				}
				continue
			}
			if id != last {
				select {
				case out <- id:
					last = id
				case <-ctx.Done():
					return
				}
			}
			if ch == nil { // the election path does not exist yet: poll for it
				if pause(ctx, nil, 200*time.Millisecond) != nil {
					return
				}
				continue
			}
			select {
			case <-ch:
			case <-ep.done:
			case <-ctx.Done():
				return
			}
		}
	})
	return out
}

// RunWhileLeader campaigns, runs fn while leading, and campaigns again when the leadership is
// lost, until ctx ends; then it resigns and returns nil. fn gets a context cancelled when the
// leadership ends or ctx ends, and must return soon after. If fn returns an error while still leading,
// RunWhileLeader resigns and returns that error; if fn returns nil while still leading, it
// resigns and campaigns again. Campaign failures (a lost session) are retried with a pause.
func (e *Elector) RunWhileLeader(ctx context.Context, fn func(ctx context.Context, l *Leadership) error) error {
	for ctx.Err() == nil {
		l, err := e.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, ErrClosed) {
				return err
			}
			e.s.log.Warn("campaign failed; retrying", "path", e.path, "id", e.id, "err", err)
			if pause(ctx, nil, 200*time.Millisecond) != nil {
				return nil
			}
			continue
		}
		// fn's context ends with the leadership or with ctx, whichever comes first.
		fctx, fcancel := context.WithCancelCause(l.Context())
		stop := context.AfterFunc(ctx, func() { fcancel(context.Cause(ctx)) })
		ferr := fn(fctx, l)
		stop()
		fcancel(nil)
		lost := l.Err()
		rerr := l.Resign(context.WithoutCancel(ctx))
		if rerr != nil {
			e.s.log.Warn("resign failed", "path", e.path, "id", e.id, "err", rerr)
		}
		if ctx.Err() != nil {
			return nil
		}
		if lost != nil {
			e.s.log.Warn("leadership lost; campaigning again", "path", e.path, "id", e.id, "err", lost)
			continue
		}
		if ferr != nil {
			return fmt.Errorf("lock: leader %s on %s: %w", e.id, e.path, ferr)
		}
	}
	return nil
}
