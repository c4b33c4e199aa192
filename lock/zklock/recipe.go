package zklock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"

	"github.com/txkit/txkit/lock"
)

// The recipes behind [Mutex]: the fair one (Apache Curator's InterProcessMutex: node naming,
// sequence order, watching only the predecessor), the unfair one-node recipe, and the deletion of
// the nodes they leave. A failed request is repeated, or ends the attempt, through epoch.retry
// (retry.go); the reads of waitTurn whose failure the next listing judges anyway list again instead.

// lockFair is the Curator InterProcessMutex recipe.
func (m *Mutex) lockFair(ctx context.Context, wait bool) (*zkLease, error) {
	ep, err := m.s.epoch(ctx)
	if err != nil {
		return nil, err
	}
	prefix := "_c_" + uuid.NewString() + "-"
	node, err := m.createProtected(ctx, ep, prefix)
	if err != nil {
		return nil, err
	}
	own := path.Base(node)
	l, err := m.waitTurn(ctx, ep, own, wait)
	if err != nil {
		if errors.Is(err, lock.ErrLocked) || ctx.Err() != nil || !ep.isDone() {
			// Abandoned: remove our node so nobody waits on it.
			if derr := m.deleteNode(ctx, ep, node, nil); derr != nil {
				m.s.log.Warn("abandoned lock node not yet deleted", "node", node, "err", derr)
			}
		}
		return nil, err
	}
	return l, nil
}

// createProtected creates our ephemeral-sequential node. When the outcome of a create is unknown
// (connection lost before the answer), it looks for a child carrying our per-attempt prefix
// before creating another, and adopts it only if it is owned by the current session.
func (m *Mutex) createProtected(ctx context.Context, ep *epoch, prefix string) (string, error) {
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			found, err := m.findOwn(ctx, ep, prefix)
			if err != nil {
				return "", err
			}
			if found != "" {
				m.s.stats.recovered.Add(1)
				m.s.log.Debug("protected create recovered its node", "node", found)
				return found, nil
			}
		}
		if err := m.ensureParent(ctx, ep); err != nil {
			return "", err
		}
		m.s.stats.writes.Add(1)
		created, err := ep.create(ctx, m.path+"/"+prefix+"lock-", m.o.data, zk.FlagEphemeral|zk.FlagSequence)
		switch {
		case err == nil:
			return created, nil
		case errors.Is(err, zk.ErrNoNode): // parent deleted meanwhile
			m.forgetParent()
			continue
		}
		if err := ep.retry(ctx, err, "create under "+m.path); err != nil {
			if ctx.Err() != nil && !ep.isDone() {
				// The create may still land: find it and delete it once the connection answers.
				m.s.goOwned(func() { m.deleteOrphan(ep, prefix) })
			}
			return "", err
		}
	}
}

// findOwn lists the lock path for a child with our prefix owned by this session. A child with
// our prefix owned by another session (impossible unless ids collide, or left by an older session
// of ours) is never adopted.
func (m *Mutex) findOwn(ctx context.Context, ep *epoch, prefix string) (string, error) {
	for {
		m.s.stats.reads.Add(1)
		res, err := ep.children(ctx, m.path, false)
		children := res.val
		if errors.Is(err, zk.ErrNoNode) {
			return "", nil
		}
		if err != nil {
			if err := ep.retry(ctx, err, "list "+m.path); err != nil {
				return "", err
			}
			continue
		}
		for _, ch := range children {
			if !strings.HasPrefix(ch, prefix) {
				continue
			}
			node := m.path + "/" + ch
			owner, err := m.ownerOf(ctx, ep, node)
			if err != nil {
				return "", err
			}
			if owner == ep.sessionID() {
				return node, nil
			}
			if owner != 0 {
				m.s.log.Warn("ignoring a node with our prefix owned by another session", "node", node, "owner", fmt.Sprintf("%#x", owner))
			}
		}
		return "", nil
	}
}

// ownerOf returns the ephemeral owner of node, or 0 when it does not exist.
func (m *Mutex) ownerOf(ctx context.Context, ep *epoch, node string) (int64, error) {
	for {
		m.s.stats.reads.Add(1)
		r, err := ep.exists(ctx, node, false)
		switch {
		case err == nil && !r.val:
			return 0, nil
		case err == nil:
			return r.stat.EphemeralOwner, nil
		}
		if err := ep.retry(ctx, err, "exists "+node); err != nil {
			return 0, err
		}
	}
}

func (m *Mutex) ensureParent(ctx context.Context, ep *epoch) error {
	m.mu.Lock()
	ok := m.parent
	m.mu.Unlock()
	if ok {
		return nil
	}
	cur := ""
	for _, part := range strings.Split(strings.Trim(m.path, "/"), "/") {
		cur += "/" + part
		for {
			m.s.stats.writes.Add(1)
			_, err := ep.create(ctx, cur, nil, 0)
			if err == nil || errors.Is(err, zk.ErrNodeExists) {
				break
			}
			if err := ep.retry(ctx, err, "create "+cur); err != nil {
				return err
			}
		}
	}
	m.mu.Lock()
	m.parent = true
	m.mu.Unlock()
	return nil
}

// forgetParent records that the lock path was deleted: the next create makes it again.
func (m *Mutex) forgetParent() {
	m.mu.Lock()
	m.parent = false
	m.mu.Unlock()
}

// deleteOrphan removes the node of an abandoned create, if it landed, while the session lives.
func (m *Mutex) deleteOrphan(ep *epoch, prefix string) {
	ctx, cancel := context.WithTimeout(ep.ctx, m.s.o.timeout)
	defer cancel()
	for !ep.isDone() {
		node, err := m.findOwn(ctx, ep, prefix)
		if err != nil {
			m.s.log.Debug("orphan search ended", "prefix", prefix, "err", err)
			return
		}
		if node == "" {
			return
		}
		if err := m.deleteLoop(ctx, ep, node); err != nil {
			return
		}
		m.s.stats.orphans.Add(1)
		m.s.log.Info("deleted the node of an abandoned lock attempt", "node", node)
	}
}

// child is a contender's node under the lock path.
type child struct {
	name string
	seq  int64
}

// sortChildren keeps the children that follow the lock naming ("...lock-<seq>") in sequence
// order; others are ignored. Sequence numbers are signed 32-bit counters printed in ten digits;
// after 2^31-1 they wrap to negative numbers, which are read as their unsigned value so order holds.
func sortChildren(names []string) []child {
	out := make([]child, 0, len(names))
	for _, n := range names {
		i := strings.LastIndex(n, "lock-")
		if i < 0 {
			continue
		}
		digits := n[i+len("lock-"):]
		if len(digits) < 10 || len(digits) > 11 {
			continue
		}
		seq, err := strconv.ParseInt(digits, 10, 64)
		if err != nil || seq < -(1<<31) || seq > 1<<31-1 {
			continue
		}
		if seq < 0 {
			seq += 1 << 32
		}
		out = append(out, child{name: n, seq: seq})
	}
	slices.SortFunc(out, func(a, b child) int {
		return cmp.Or(cmp.Compare(a.seq, b.seq), strings.Compare(a.name, b.name))
	})
	return out
}

// containerOwner is the ephemeral owner ZooKeeper reports for a container node; TTL nodes report
// 0xff in the top byte (ZooKeeper's EphemeralType).
const containerOwner = math.MinInt64

// isContender reports whether a node with stat st can be a contender's: only an ephemeral node,
// owned by a live session, is. A persistent, container or TTL node named like a contender — one
// that anybody allowed to write under the lock path can create — never releases the lock, so it
// must not count, or nobody would ever hold the lock again.
func isContender(st *zk.Stat) bool {
	o := st.EphemeralOwner
	return o != 0 && o != containerOwner && uint64(o)>>56 != 0xff
}

// contenders returns the lock-named children of names in sequence order, without those found not
// to be contenders, and forgets the ones no longer listed.
func (m *Mutex) contenders(names []string) []child {
	all := sortChildren(names)
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.ignored) == 0 {
		return all
	}
	listed := make(map[string]struct{}, len(all))
	out := all[:0]
	for _, c := range all {
		listed[c.name] = struct{}{}
		if _, skip := m.ignored[c.name]; !skip {
			out = append(out, c)
		}
	}
	for n := range m.ignored {
		if _, ok := listed[n]; !ok {
			delete(m.ignored, n)
		}
	}
	return out
}

// ignore records that the child name is not a contender, and logs it the first time.
func (m *Mutex) ignore(name string, st *zk.Stat) {
	m.mu.Lock()
	if _, seen := m.ignored[name]; seen {
		m.mu.Unlock()
		return
	}
	if m.ignored == nil {
		m.ignored = map[string]struct{}{}
	}
	m.ignored[name] = struct{}{}
	m.mu.Unlock()
	m.s.log.Warn("ignoring a child of the lock path that is not a contender's node (not ephemeral): it was not created by a lock; delete it, and restrict the path with ACLs",
		"path", m.path, "node", name, "owner", fmt.Sprintf("%#x", st.EphemeralOwner), "created_zxid", st.Czxid)
}

// waitTurn lists the children until ours is the lowest, watching only our predecessor in between.
// Each step that does not end the attempt leads back to a new listing.
func (m *Mutex) waitTurn(ctx context.Context, ep *epoch, own string, wait bool) (*zkLease, error) {
	t := &turn{m: m, ep: ep, own: own, bo: lock.Backoff{Min: 50 * time.Millisecond, Max: time.Second}}
	for {
		children, parent, idx, err := t.place(ctx)
		switch {
		case err != nil:
			return nil, err
		case idx == 0:
			return m.newLease(ep, m.path+"/"+own, lock.Token{Epoch: parent.Czxid, Seq: children[0].seq})
		case !wait:
			err = t.refuse(ctx, children[0])
		default:
			err = t.awaitPredecessor(ctx, children[idx-1])
		}
		if err != nil {
			return nil, err
		}
	}
}

// turn is one fair Lock attempt waiting for its turn: our node's name, the watch on it, and the
// pause between failed reads of our predecessor.
type turn struct {
	m       *Mutex
	ep      *epoch
	own     string
	ownGone <-chan zk.Event // watch on our own node, set before the first wait
	bo      lock.Backoff
}

// place lists the contenders (again, while the listing fails with a retryable error) and returns
// them in order with the lock path's stat and our index among them. Our node missing from the
// list ends the attempt.
func (t *turn) place(ctx context.Context) ([]child, *zk.Stat, int, error) {
	for {
		t.m.s.stats.reads.Add(1)
		res, err := t.ep.children(ctx, t.m.path, false)
		if err != nil {
			if err := t.ep.retry(ctx, err, "list "+t.m.path); err != nil {
				return nil, nil, 0, err
			}
			continue
		}
		children := t.m.contenders(res.val)
		idx := slices.IndexFunc(children, func(c child) bool { return c.name == t.own })
		if idx < 0 { // our session ended, or someone deleted our node
			return nil, nil, 0, t.ended("vanished")
		}
		return children, res.stat, idx, nil
	}
}

// ended is the error of an attempt whose node is gone: the session's end when it is over, else
// ErrSessionExpired saying how the node went.
func (t *turn) ended(how string) error {
	if t.ep.isDone() {
		return fmt.Errorf("zklock: waiting on %s: %w", t.m.path, t.ep.Err())
	}
	return t.vanished(how)
}

func (t *turn) vanished(how string) error {
	return fmt.Errorf("zklock: our node %s/%s %s while waiting: %w", t.m.path, t.own, how, lock.ErrSessionExpired)
}

// refuse is TryLock's answer when another child comes first: ErrLocked if that child is a
// contender at all (one read tells), nil (list again) when it is gone or not a contender.
func (t *turn) refuse(ctx context.Context, first child) error {
	node := t.m.path + "/" + first.name
	t.m.s.stats.reads.Add(1)
	r, err := t.ep.exists(ctx, node, false)
	switch {
	case err != nil:
		return t.ep.retry(ctx, err, "exists "+node)
	case !r.val:
		return nil // released meanwhile
	case !isContender(r.stat):
		t.m.ignore(first.name, r.stat)
		return nil
	}
	return fmt.Errorf("zklock: %s held by %s: %w", t.m.path, first.name, lock.ErrLocked)
}

// awaitPredecessor watches our own node (once per attempt) and our predecessor, then blocks until
// one of them changes. It returns nil to list again, or the error that ends the attempt.
func (t *turn) awaitPredecessor(ctx context.Context, pred child) error {
	if t.ownGone == nil {
		if err := t.watchOwn(ctx); err != nil || t.ownGone == nil {
			return err
		}
	}
	predGone, err := t.watchPredecessor(ctx, pred)
	if err != nil || predGone == nil {
		return err
	}
	return t.sleep(ctx, predGone)
}

// watchOwn sets the watch on our own node. A read that fails leaves ownGone nil: the next listing
// decides again.
func (t *turn) watchOwn(ctx context.Context) error {
	t.m.s.stats.reads.Add(1)
	r, err := t.ep.exists(ctx, t.m.path+"/"+t.own, true)
	switch {
	case err == nil && !r.val, errors.Is(err, zk.ErrNoNode):
		return t.vanished("vanished")
	case err == nil:
		t.ownGone = r.watch
	}
	return nil
}

// watchPredecessor reads our predecessor's node with a watch, and returns the watch; nil (and a nil
// error) to list again: the node is gone, not a contender's, or could not be read.
func (t *turn) watchPredecessor(ctx context.Context, pred child) (<-chan zk.Event, error) {
	node := t.m.path + "/" + pred.name
	t.m.s.stats.reads.Add(1)
	r, err := t.ep.get(ctx, node, true)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return nil, nil // already gone: list again at once
	case err != nil:
		// Not readable (no READ permission on a stranger's node, a server error): list again after
		// a pause that doubles while the failures last, instead of at once — that would spin on
		// the ensemble for as long as the node lives.
		if t.bo.Failures() == 0 {
			t.m.s.log.Warn("cannot read the predecessor's lock node; retrying with backoff", "path", t.m.path, "node", node, "err", err)
		}
		return nil, pause(ctx, t.ep.done, t.bo.Next())
	}
	t.bo.Reset()
	if !isContender(r.stat) {
		t.m.ignore(pred.name, r.stat)
		return nil, nil
	}
	return r.watch, nil
}

// sleep blocks until our predecessor's node changes, our own node changes, the session ends or
// ctx ends. It returns nil to list again.
func (t *turn) sleep(ctx context.Context, predGone <-chan zk.Event) error {
	stats := &t.m.s.stats
	stats.waiting.Add(1)
	select {
	case <-predGone:
		stats.waiting.Add(-1)
		stats.watchEvents.Add(1)
		return nil
	case ev := <-t.ownGone:
		stats.waiting.Add(-1)
		if ev.Type == zk.EventNodeDeleted {
			return t.ended("was deleted")
		}
		t.ownGone = nil // fired for another reason (reconnection): set it again
		return nil
	case <-t.ep.done:
		stats.waiting.Add(-1)
		return fmt.Errorf("zklock: waiting on %s: %w", t.m.path, t.ep.Err())
	case <-ctx.Done():
		stats.waiting.Add(-1)
		return ctx.Err()
	}
}

// lockUnfair is the one-node recipe: create "<path>/lock"; if it exists, watch it and try again
// when it changes. Every waiter wakes on every release.
func (m *Mutex) lockUnfair(ctx context.Context, wait bool) (*zkLease, error) {
	ep, err := m.s.epoch(ctx)
	if err != nil {
		return nil, err
	}
	node := m.path + "/lock"
	release, err := m.s.claimUnfair(ctx, node, wait)
	if err != nil {
		return nil, err
	}
	l, err := m.lockUnfairClaimed(ctx, ep, node, wait, release)
	if err != nil {
		return nil, err
	}
	l.unclaim = release
	return l, nil
}

// lockUnfairClaimed runs the unfair recipe once this Mutex holds the Session's claim on node. It
// lets go of the claim when it fails, after any orphan of its own is deleted.
func (m *Mutex) lockUnfairClaimed(ctx context.Context, ep *epoch, node string, wait bool, release func()) (l *zkLease, err error) {
	orphan := false
	defer func() {
		if err != nil && !orphan {
			release()
		}
	}()
	for {
		if err := m.ensureParent(ctx, ep); err != nil {
			return nil, err
		}
		m.s.stats.writes.Add(1)
		_, err := ep.create(ctx, node, m.o.data, zk.FlagEphemeral)
		if err == nil || errors.Is(err, zk.ErrNodeExists) || retryable(err) {
			if ep.isDone() {
				return nil, fmt.Errorf("zklock: create %s: %w", node, ep.Err())
			}
			// Whose is it? Ours if a create of ours landed (also one whose answer was lost).
			m.s.stats.reads.Add(1)
			xr, xerr := ep.exists(ctx, node, true)
			exists, st, gone := xr.val, xr.stat, xr.watch
			if xerr != nil {
				if ctx.Err() != nil {
					orphan = true
					m.s.goOwned(func() { defer release(); m.deleteUnfairOrphan(ep, node) })
					return nil, ctx.Err()
				}
				if ep.isDone() {
					return nil, fmt.Errorf("zklock: exists %s: %w", node, ep.Err())
				}
				continue
			}
			if exists && st.EphemeralOwner == ep.sessionID() {
				return m.newLease(ep, node, lock.Token{Epoch: st.Czxid})
			}
			if !exists {
				continue
			}
			if !wait {
				return nil, fmt.Errorf("zklock: %s held by session %#x: %w", node, st.EphemeralOwner, lock.ErrLocked)
			}
			m.s.stats.waiting.Add(1)
			select {
			case <-gone:
				m.s.stats.waiting.Add(-1)
				m.s.stats.watchEvents.Add(1)
			case <-ep.done:
				m.s.stats.waiting.Add(-1)
				return nil, fmt.Errorf("zklock: waiting on %s: %w", node, ep.Err())
			case <-ctx.Done():
				m.s.stats.waiting.Add(-1)
				return nil, ctx.Err()
			}
			continue
		}
		if errors.Is(err, zk.ErrNoNode) { // parent deleted meanwhile
			m.forgetParent()
			continue
		}
		if err := ep.retry(ctx, err, "create "+node); err != nil {
			if ctx.Err() != nil && !ep.isDone() {
				// The create may still land: delete it once the connection answers, if it is ours.
				orphan = true
				m.s.goOwned(func() { defer release(); m.deleteUnfairOrphan(ep, node) })
			}
			return nil, err
		}
	}
}

func (m *Mutex) deleteUnfairOrphan(ep *epoch, node string) {
	ctx, cancel := context.WithTimeout(ep.ctx, m.s.o.timeout)
	defer cancel()
	owner, err := m.ownerOf(ctx, ep, node)
	if err != nil || owner != ep.sessionID() {
		return
	}
	if m.deleteLoop(ctx, ep, node) == nil {
		m.s.stats.orphans.Add(1)
	}
}

// deleteNode deletes node, retrying through connection losses; a node already gone is success,
// and so is a lost session (its ephemeral nodes go with it).
// after, when not nil, runs once the node is gone (or the delete has given up with the session).
func (m *Mutex) deleteNode(ctx context.Context, ep *epoch, node string, after func()) error {
	if after == nil {
		after = func() {}
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.s.o.timeout)
	defer cancel()
	err := m.deleteLoop(cctx, ep, node)
	if err == nil {
		after()
		return nil
	}
	m.s.log.Warn("lock node delete continues in the background", "node", node, "err", err)
	m.s.goOwned(func() {
		defer after()
		// Until the node is gone or the session ends (then ZooKeeper removes it).
		if err := m.deleteLoop(ep.ctx, ep, node); err != nil {
			m.s.log.Debug("background delete ended", "node", node, "err", err)
		}
	})
	return fmt.Errorf("zklock: delete %s: continuing in the background: %w", node, err)
}

func (m *Mutex) deleteLoop(ctx context.Context, ep *epoch, node string) error {
	for {
		m.s.stats.writes.Add(1)
		err := ep.do(ctx, func(c *zk.Conn) error { return c.Delete(node, -1) })
		switch {
		case err == nil, errors.Is(err, zk.ErrNoNode):
			return nil
		case ep.isDone():
			return nil // ephemeral: gone with the session
		}
		if err := ep.retry(ctx, err, "delete "+node); err != nil {
			return err
		}
	}
}
