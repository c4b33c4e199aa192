package zklock

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/txkit/txkit/lock"
)

// Inspector returns the [lock.Inspector] of the locks and elections on this Session's ensemble. Its
// names are lock paths: the path of a [Mutex] (fair or unfair) or of an election ([NewElector]).
//
// For the fair recipe it lists the contenders' nodes in sequence order, as the recipe ranks them
// (children that are not contenders' nodes are skipped, as the recipe skips them), with the
// node's data as ID ("" when its ACL does not let this Session read it), the Token each one holds
// or will hold (the lock path's epoch and the node's sequence number) and the node's creation time
// as Since; waitersKnown is true. For the unfair
// recipe it lists the holder of the one lock node, and waitersKnown is false (its waiters only
// watch the node): pass [WithUnfair] for an Inspector of unfair locks, which says so also while
// the lock is free (without it, a free lock's waitersKnown is true; the other options are
// ignored). It syncs the path first, so what it reads is at least as recent as the writes
// any server had applied when it was called. A lost connection is waited out, and a lost
// ZooKeeper session is replaced, until ctx ends; after [Session.Close] it returns an error
// wrapping [lock.ErrClosed].
func (s *Session) Inspector(opts ...Option) lock.Inspector {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	return zkInspector{s: s, unfair: o.unfair}
}

type zkInspector struct {
	s      *Session
	unfair bool // waitersKnown is always false
}

// Timeout returns the session timeout, how long a dead contender's nodes outlive it (sharded
// leadership counts its members with it).
func (i zkInspector) Timeout() time.Duration { return i.s.Timeout() }

func (i zkInspector) Contenders(ctx context.Context, lockPath string) ([]lock.Contender, bool, error) {
	if err := validPath(lockPath); err != nil {
		return nil, false, err
	}
	for {
		ep, err := i.s.epoch(ctx)
		if err != nil {
			return nil, false, err
		}
		cs, known, err := i.read(ctx, ep, lockPath)
		if err == nil {
			return cs, known, nil
		}
		if ep.isDone() && ctx.Err() == nil && !errors.Is(err, lock.ErrClosed) {
			continue // the session was lost: read again on the next one
		}
		if err := ep.retry(ctx, err, "inspect "+lockPath); err != nil {
			return nil, false, err
		}
	}
}

// read lists the contenders of lockPath once, on ep.
func (i zkInspector) read(ctx context.Context, ep *epoch, lockPath string) ([]lock.Contender, bool, error) {
	switch err := i.s.sync(ctx, ep, lockPath); {
	case errors.Is(err, zk.ErrNoNode):
		return nil, !i.unfair, nil
	case err != nil:
		return nil, false, err
	}
	i.s.stats.reads.Add(1)
	res, err := ep.children(ctx, lockPath, false)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return nil, !i.unfair, nil
	case err != nil:
		return nil, false, err
	}
	if slices.Contains(res.val, "lock") { // the unfair recipe's node
		cs, err := i.s.readNodes(ctx, ep, lockPath, []child{{name: "lock"}}, 1, nil)
		if err != nil {
			return nil, false, err
		}
		if len(cs) == 0 {
			return nil, !i.unfair, nil
		}
		cs[0].Token = lock.Token{Epoch: cs[0].stat.Czxid}
		return []lock.Contender{cs[0].contender(true)}, false, nil
	}
	nodes, err := i.s.readNodes(ctx, ep, lockPath, sortChildren(res.val), 0, nil)
	if err != nil {
		return nil, false, err
	}
	var out []lock.Contender
	for k, n := range nodes {
		n.Token = lock.Token{Epoch: res.stat.Czxid, Seq: n.seq}
		out = append(out, n.contender(k == 0))
	}
	return out, !i.unfair, nil
}

// contenderNode is a contender's node as read: its place in the order, its data and stat.
type contenderNode struct {
	child
	Token      lock.Token
	data       []byte
	stat       *zk.Stat
	unreadable bool // no permission to read the data (data is nil)
}

func (n contenderNode) contender(holder bool) lock.Contender {
	return lock.Contender{ID: string(n.data), Token: n.Token, Holder: holder, Since: time.UnixMilli(n.stat.Ctime)}
}

// readNodes reads the nodes of children (children of dir, in the recipe's order) and returns the
// contenders' among them, the first max of them (0: all). A node gone since the listing is
// skipped (what a new listing would show: later nodes get higher sequence numbers); a node that
// is not a contender's ([isContender]) is skipped, and handed to notContender when that is not nil.
// A node whose data we may not read (its ACL) is returned with its stat, marked unreadable.
func (s *Session) readNodes(ctx context.Context, ep *epoch, dir string, children []child, max int, notContender func(name string, st *zk.Stat)) ([]contenderNode, error) {
	var out []contenderNode
	for _, c := range children {
		if max > 0 && len(out) == max {
			break
		}
		node := dir + "/" + c.name
		s.stats.reads.Add(1)
		r, err := ep.get(ctx, node, false)
		unreadable := errors.Is(err, zk.ErrNoAuth)
		if unreadable { // its ACL lets us not read it: its stat needs no permission
			s.stats.reads.Add(1)
			var x readResult[bool]
			x, err = ep.exists(ctx, node, false)
			if err == nil && !x.val {
				err = zk.ErrNoNode
			}
			r = readResult[[]byte]{stat: x.stat}
		}
		switch {
		case errors.Is(err, zk.ErrNoNode):
			continue
		case err != nil:
			return nil, err
		case !isContender(r.stat):
			if notContender != nil {
				notContender(c.name, r.stat)
			}
			continue
		}
		out = append(out, contenderNode{child: c, data: r.val, stat: r.stat, unreadable: unreadable})
	}
	return out, nil
}

// sync makes the server of ep catch up with the leader on p before a read: a ZooKeeper server may
// answer a read before it has applied the latest writes of other sessions, so a holder that took
// a lock through another server would not be seen. It returns an error wrapping zk.ErrNoNode when
// p does not exist.
func (s *Session) sync(ctx context.Context, ep *epoch, p string) error {
	s.stats.reads.Add(1)
	return ep.do(ctx, func(c *zk.Conn) error { _, err := c.Sync(p); return err })
}
