package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/txkit/txkit/lock"
)

// Leader is the current leader of an election given with [WithInspected].
type Leader struct {
	Election string     `json:"election"`
	Path     string     `json:"path"`
	ID       string     `json:"id"`    // the leader's candidate id; "" when nobody leads
	Token    lock.Token `json:"token"` // its fencing token; zero when nobody leads or the backend cannot tell
	Since    time.Time  `json:"since"` // when it took the lead; zero when unknown
	Leading  bool       `json:"leading"`
	Error    string     `json:"error,omitempty"` // why the election could not be read (the others still are)
}

// LockState is the holder and waiters of a lock given with [WithInspected].
type LockState struct {
	Name         string           `json:"name"`
	Path         string           `json:"path"`
	Holder       *lock.Contender  `json:"holder,omitempty"` // nil when nobody holds it
	Waiters      []lock.Contender `json:"waiters"`          // in the order they will get it
	WaitersKnown bool             `json:"waiters_known"`    // false: the backend queues waiters in their processes
	Error        string           `json:"error,omitempty"`
}

// Leaders returns the current leader of every election given with [WithInspected], in the order
// given. An election that cannot be read has its Error set (and is logged); the call fails only
// when ctx ends. It blocks for one read per election.
func (a *Admin) Leaders(ctx context.Context) ([]Leader, error) {
	out := make([]Leader, 0, len(a.o.elections))
	for _, e := range a.o.elections {
		l := Leader{Election: e.Name, Path: e.Path}
		cs, _, err := e.Inspector.Contenders(ctx, e.Path)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("admin: leaders: %w", ctx.Err())
			}
			a.o.log.Warn("admin: read election", "election", e.Name, "path", e.Path, "err", err)
			l.Error = "cannot read the election"
		}
		if len(cs) > 0 && cs[0].Holder {
			l.ID, l.Token, l.Since, l.Leading = cs[0].ID, cs[0].Token, cs[0].Since, true
		}
		out = append(out, l)
	}
	return out, nil
}

// Locks returns the holder and waiters of every lock given with [WithInspected], in the order given.
// A lock that cannot be read has its Error set (and is logged); the call fails only when ctx ends.
func (a *Admin) Locks(ctx context.Context) ([]LockState, error) {
	out := make([]LockState, 0, len(a.o.locks))
	for _, l := range a.o.locks {
		s := LockState{Name: l.Name, Path: l.Path, Waiters: []lock.Contender{}}
		cs, known, err := l.Inspector.Contenders(ctx, l.Path)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("admin: locks: %w", ctx.Err())
			}
			a.o.log.Warn("admin: read lock", "lock", l.Name, "path", l.Path, "err", err)
			s.Error = "cannot read the lock"
		}
		s.WaitersKnown = known
		for i := range cs {
			if cs[i].Holder && s.Holder == nil {
				c := cs[i]
				s.Holder = &c
				continue
			}
			s.Waiters = append(s.Waiters, cs[i])
		}
		out = append(out, s)
	}
	return out, nil
}
