package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/txkit/txkit/lock"
)

// Inspector returns the [lock.Inspector] of the Client's locks and elections, by lock name.
// Contenders reads the lock key and its fencing counter in one round trip (MGET; both keys are
// in one slot): the holder, if the key exists, with the holder data as ID (the candidate id of an
// election) and the counter as Token, the one its Lease carries. Since is the zero time (Redis
// does not record when a key was set). Waiters queue inside their own processes, so waitersKnown
// is always false and only the holder is listed. A bad name returns an error wrapping
// [lock.ErrInvalidOption]; ctx bounds the round trip (its end returns an error wrapping ctx's).
// After [Client.Close] it returns an error wrapping [lock.ErrClosed]. It is safe for concurrent
// use.
func (c *Client) Inspector() lock.Inspector { return inspector{g: c.g} }

// Inspector returns the [lock.Inspector] of the Redlock's locks and elections, by lock name:
// Contenders reads the lock key and its counter on every instance in parallel (each bounded by
// the instance timeout), and lists the holder whose value a majority of the instances hold, as
// [RedlockMutex] counts a hold. Its Token is the highest of those instances' counters: the
// hold's token when every instance that holds the key had answered when the acquisition was
// decided; an instance that granted it later (and kept it: the hold was won) may hold a higher
// counter, and then the Token listed is above the Lease's. It returns the instances' errors when
// too few answered to tell; otherwise as [Client.Inspector].
func (r *Redlock) Inspector() lock.Inspector { return inspector{g: r.g} }

type inspector struct{ g *group }

func (i inspector) Contenders(ctx context.Context, name string) ([]lock.Contender, bool, error) {
	if err := checkName(name); err != nil {
		return nil, false, err
	}
	g := i.g
	key, counter := g.keys(name)
	replies := g.fanout(ctx, g.o.instanceTimeout(), func(ctx context.Context, in *instance) reply {
		return in.peek(ctx, key, counter)
	}, nil, nil)
	if err := ctx.Err(); err != nil {
		return nil, false, fmt.Errorf("%s: contenders of %s: %w", g.what, name, err)
	}
	type holding struct {
		n   int   // instances that hold the value
		top int64 // the highest of their counters
	}
	held := map[string]holding{}
	for _, r := range replies {
		if r.ok {
			h := held[r.data]
			held[r.data] = holding{n: h.n + 1, top: max(h.top, r.n)}
		}
	}
	for v, h := range held {
		if h.n >= g.quorum {
			return []lock.Contender{{ID: holderData(v), Token: lock.Token{Seq: h.top}, Holder: true}}, false, nil
		}
	}
	if errs := failures(replies); len(errs) > len(g.inst)-g.quorum {
		return nil, false, fmt.Errorf("%s: contenders of %s: %w", g.what, name, errors.Join(errs...))
	}
	return nil, false, nil
}

// peek reads the lock key's value and its fencing counter; ok is false when the key does not
// exist.
func (in *instance) peek(ctx context.Context, key, counter string) reply {
	v, err := in.rdb.MGet(ctx, key, counter).Result()
	if err != nil {
		return reply{err: err}
	}
	value, ok := v[0].(string)
	if !ok {
		return reply{answered: true}
	}
	n, _ := v[1].(string)
	seq, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		return reply{err: fmt.Errorf("fencing counter %q: %w", n, err)}
	}
	return reply{answered: true, ok: true, data: value, n: seq}
}
