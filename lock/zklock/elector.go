package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/txkit/txkit/lock"
)

// NewElector returns a candidate with the given id for the ZooKeeper election at electionPath:
// an [lock.Election] on a fair [Mutex] whose node carries the id, so anyone can ask who leads. Ids
// need not be unique (they are what [lock.Election.Leader] reports), but an id per process makes that
// answer useful. Components that share the Election lead together, on the same process; give a
// component an Election of its own (its own election path) when it should be able to lead
// elsewhere. opts configure the Election (such as [lock.WithElectionRegisterer]).
func NewElector(s *Session, electionPath, id string, opts ...lock.ElectionOption) (*lock.Election, error) {
	if id == "" {
		return nil, fmt.Errorf("zklock: elector on %s: empty candidate id: %w", electionPath, lock.ErrInvalidOption)
	}
	m, err := NewMutex(s, electionPath, WithData([]byte(id)), withNodeWatch())
	if err != nil {
		return nil, err
	}
	z := &zkElection{s: s, path: electionPath, m: m}
	return lock.NewElection(m, electionPath, id, z.Leader, z.Observe, s.log, opts...)
}

// zkElection reads who leads a ZooKeeper election: the data of the lowest contender's node.
type zkElection struct {
	s    *Session
	path string
	m    *Mutex
}

// Leader returns the id of the current leader, or an error wrapping [lock.ErrNoLeader] when no
// candidate is in the election. It syncs the election path first (a server may lag behind
// writes made through another), then reads; it blocks for the round trips (bounded by ctx).
func (e *zkElection) Leader(ctx context.Context) (string, error) {
	ep, err := e.s.epoch(ctx)
	if err != nil {
		return "", err
	}
	switch err := e.s.sync(ctx, ep, e.path); {
	case errors.Is(err, zk.ErrNoNode):
		return "", fmt.Errorf("zklock: election %s: %w", e.path, lock.ErrNoLeader)
	case err != nil:
		return "", fmt.Errorf("zklock: election %s: sync: %w", e.path, err)
	}
	id, _, err := e.leader(ctx, ep, false)
	return id, err
}

// leader reads the lowest child's data; with watch it also returns a channel that fires when the
// children change.
func (e *zkElection) leader(ctx context.Context, ep *epoch, watch bool) (string, <-chan zk.Event, error) {
	res, err := ep.children(ctx, e.path, watch)
	names, ch := res.val, res.watch
	if errors.Is(err, zk.ErrNoNode) {
		return "", ch, fmt.Errorf("zklock: election %s: %w", e.path, lock.ErrNoLeader)
	}
	if err != nil {
		return "", nil, fmt.Errorf("zklock: election %s: %w", e.path, err)
	}
	// The lowest contender leads. A child named like one that is not ephemeral is skipped (and
	// remembered): the read that gets the leader's id returns its stat too.
	nodes, err := e.s.readNodes(ctx, ep, e.path, e.m.contenders(names), 1, e.m.ignore)
	if err != nil {
		return "", nil, err
	}
	if len(nodes) == 0 {
		return "", ch, fmt.Errorf("zklock: election %s: %w", e.path, lock.ErrNoLeader)
	}
	if nodes[0].unreadable {
		return "", nil, fmt.Errorf("zklock: election %s: the leader's node %s: %w", e.path, nodes[0].name, zk.ErrNoAuth)
	}
	return string(nodes[0].data), ch, nil
}

// Observe returns a channel that receives the leader's id each time it changes ("" while nobody
// leads). The channel is closed when ctx ends; an observer must keep reading it.
func (e *zkElection) Observe(ctx context.Context) <-chan string {
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
			if err != nil && !errors.Is(err, lock.ErrNoLeader) {
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
