package lock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"
)

// Mutex is a lock on a ZooKeeper path, shared with every process that uses the same path.
//
// The default recipe is fair and Curator-compatible: each contender creates an
// ephemeral-sequential child "_c_<uuid>-lock-<seq>" under the path (the naming and ordering of
// Apache Curator's InterProcessMutex, so Go and Java processes exclude each other); the lowest
// sequence holds the lock; every other contender watches only its immediate predecessor, so a
// release wakes exactly one waiter. [WithUnfair] selects the one-node recipe instead.
//
// Only ephemeral children count as contenders. A child named like one that is persistent (or a
// container or TTL node) — which anyone allowed to write under the path can create, and which
// would otherwise hold the lock for ever — is skipped and logged once at Warn. It costs no extra
// round trip on the waiting path: a waiter reads its predecessor (to watch it) anyway, and the read
// returns the stat that tells. TryLock, when another child comes first, reads that child's stat (one
// exists call) before answering [ErrLocked]. Use ACLs ([WithACL]) so that strangers cannot create
// children at all.
//
// The lock can be lost at any time, whatever the code holding it believes: when the ZooKeeper
// session ends, when the node is deleted by someone else. Work done under the lock must run under
// [Lease.Context] and every write it makes elsewhere must carry [Lease.Token] to a fence (package fence).
//
// A Mutex value is reentrant: Lock on a Mutex that already holds the lock returns the same Lease
// and counts the hold; each Lock needs its Unlock. Goroutines that must exclude each other need a
// Mutex value each. Mutex is safe for concurrent use by multiple goroutines (they share its hold).
// After a hold is lost, Lock returns an error until the lost hold is released with Unlock.
type Mutex struct {
	s    *Session
	path string
	o    options

	acquire chan struct{} // one acquisition at a time per Mutex value

	mu      sync.Mutex
	lease   *Lease
	holds   int
	parent  bool                // the parent path is known to exist
	ignored map[string]struct{} // children named like contenders that are not (not ephemeral)
}

// Lease is one hold of a [Mutex]: its fencing token, its node, and how the holder learns that it
// lost the lock. Its methods are safe for concurrent use.
type Lease struct {
	m     *Mutex
	node  string // full path of our node
	token Token
	ep    *epoch

	ctx      context.Context
	cancel   context.CancelCauseFunc
	done     chan struct{}
	once     sync.Once
	released chan struct{}
	relOnce  sync.Once
}

// NewMutex returns a Mutex on lockPath (an absolute ZooKeeper path; missing parents are created
// as persistent nodes). It does not touch ZooKeeper.
func NewMutex(s *Session, lockPath string, opts ...Option) (*Mutex, error) {
	if s == nil {
		return nil, fmt.Errorf("lock: nil session: %w", ErrInvalidOption)
	}
	if err := validPath(lockPath); err != nil {
		return nil, err
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	return &Mutex{s: s, path: lockPath, o: o, acquire: make(chan struct{}, 1)}, nil
}

func validPath(p string) error {
	if p == "" || p[0] != '/' || (len(p) > 1 && strings.HasSuffix(p, "/")) || strings.Contains(p, "//") || p == "/" {
		return fmt.Errorf("lock: path %q: want an absolute ZooKeeper path such as /app/lock: %w", p, ErrInvalidOption)
	}
	return nil
}

// Path returns the lock path.
func (m *Mutex) Path() string { return m.path }

// Lock blocks until the lock is held or ctx ends, and returns the Lease of the hold. If ctx ends
// first, the contender's node is deleted (with a fresh, bounded context) and ctx's error is
// returned; nothing is left behind. If the ZooKeeper session ends while waiting, Lock returns an
// error wrapping [ErrSessionExpired] at once. ctx scopes only the wait: the hold lasts until
// Unlock, or until the lock is lost ([Lease.Done]).
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) {
	return m.lock(ctx, true)
}

// TryLock takes the lock if it is free and returns at once: an error wrapping [ErrLocked] when
// another owner holds it. ctx bounds the ZooKeeper round trips.
func (m *Mutex) TryLock(ctx context.Context) (*Lease, error) {
	return m.lock(ctx, false)
}

func (m *Mutex) lock(ctx context.Context, wait bool) (*Lease, error) {
	if l := m.reenter(); l != nil {
		return l, nil
	}
	select {
	case m.acquire <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-m.acquire }()
	if l := m.reenter(); l != nil { // another goroutine sharing this Mutex took it meanwhile
		return l, nil
	}
	if err := m.lostHold(); err != nil {
		return nil, err
	}
	var (
		l   *Lease
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
	m.mu.Lock()
	m.lease, m.holds = l, 1
	m.mu.Unlock()
	m.s.goOwned(l.monitor)
	return l, nil
}

// reenter counts another hold when the lock is held and not lost.
func (m *Mutex) reenter() *Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lease == nil {
		return nil
	}
	select {
	case <-m.lease.done:
		return nil // lost: lock() refuses until the lost hold is unlocked
	default:
	}
	m.holds++
	return m.lease
}

// lostHold returns the error of a hold that was lost and not yet unlocked.
func (m *Mutex) lostHold() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lease == nil {
		return nil
	}
	return fmt.Errorf("lock: %s: a lost hold was not unlocked yet (%w): call Unlock first", m.path, m.lease.Err())
}

// Unlock releases one hold; the last one deletes the node. Unlock of a Mutex that holds nothing
// does nothing and returns nil, so calling it twice is safe. The delete is retried through
// connection losses with a fresh context bounded by the session timeout (a cancelled ctx does
// not stop it); if it still has not succeeded, it continues in the background while the
// ZooKeeper session lives, and Unlock returns an error saying so. Only this hold's own node is
// ever deleted, never a newer holder's.
func (m *Mutex) Unlock(ctx context.Context) error {
	m.mu.Lock()
	l := m.lease
	if l == nil {
		m.mu.Unlock()
		return nil
	}
	m.holds--
	if m.holds > 0 {
		m.mu.Unlock()
		return nil
	}
	m.lease = nil
	m.mu.Unlock()
	l.relOnce.Do(func() { close(l.released) })
	l.end(fmt.Errorf("%w: released by Unlock", ErrNotHeld))
	return m.deleteNode(ctx, l.ep, l.node)
}

// deleteNode deletes node, retrying through connection losses; a node already gone is success,
// and so is a lost session (its ephemeral nodes go with it).
func (m *Mutex) deleteNode(ctx context.Context, ep *epoch, node string) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.s.o.timeout)
	defer cancel()
	err := m.deleteLoop(cctx, ep, node)
	if err == nil {
		return nil
	}
	m.s.log.Warn("lock node delete continues in the background", "node", node, "err", err)
	m.s.goOwned(func() {
		// Until the node is gone or the session ends (then ZooKeeper removes it).
		if err := m.deleteLoop(ep.ctx, ep, node); err != nil {
			m.s.log.Debug("background delete ended", "node", node, "err", err)
		}
	})
	return fmt.Errorf("lock: delete %s: continuing in the background: %w", node, err)
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
		case retryable(err):
			if err := pause(ctx, 50*time.Millisecond); err != nil {
				return err
			}
		default:
			return err
		}
	}
}

func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// backoff is a pause for retries that would otherwise spin: min, doubling to max while the
// failures last, until reset.
type backoff struct {
	min, max time.Duration
	next     time.Duration
	n        int
}

func (b *backoff) failures() int { return b.n }

func (b *backoff) reset() { b.next, b.n = 0, 0 }

// wait pauses for the next interval; it returns early (nil) when done closes, and ctx's error
// when ctx ends.
func (b *backoff) wait(ctx context.Context, done <-chan struct{}) error {
	if b.next == 0 {
		b.next = b.min
	}
	d := b.next
	b.next = min(2*b.next, b.max)
	b.n++
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
		return nil
	case <-t.C:
		return nil
	}
}

// lockFair is the Curator InterProcessMutex recipe.
func (m *Mutex) lockFair(ctx context.Context, wait bool) (*Lease, error) {
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
		if errors.Is(err, ErrLocked) || ctx.Err() != nil || !ep.isDone() {
			// Abandoned: remove our node so nobody waits on it.
			if derr := m.deleteNode(ctx, ep, node); derr != nil {
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
			m.mu.Lock()
			m.parent = false
			m.mu.Unlock()
		case ep.isDone():
			return "", fmt.Errorf("lock: create under %s: %w", m.path, ep.Err())
		case ctx.Err() != nil:
			// The create may still land: find it and delete it once the connection answers.
			m.s.goOwned(func() { m.deleteOrphan(ep, prefix) })
			return "", ctx.Err()
		case retryable(err):
			if err := pause(ctx, 50*time.Millisecond); err != nil {
				m.s.goOwned(func() { m.deleteOrphan(ep, prefix) })
				return "", err
			}
		default:
			return "", fmt.Errorf("lock: create under %s: %w", m.path, err)
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
		children := res.names
		if errors.Is(err, zk.ErrNoNode) {
			return "", nil
		}
		if err != nil {
			if retryable(err) && !ep.isDone() {
				if err := pause(ctx, 50*time.Millisecond); err != nil {
					return "", err
				}
				continue
			}
			if ep.isDone() {
				return "", fmt.Errorf("lock: list %s: %w", m.path, ep.Err())
			}
			return "", fmt.Errorf("lock: list %s: %w", m.path, err)
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
		case err == nil && !r.exists:
			return 0, nil
		case err == nil:
			return r.stat.EphemeralOwner, nil
		case retryable(err) && !ep.isDone():
			if err := pause(ctx, 50*time.Millisecond); err != nil {
				return 0, err
			}
		case ep.isDone():
			return 0, fmt.Errorf("lock: exists %s: %w", node, ep.Err())
		default:
			return 0, fmt.Errorf("lock: exists %s: %w", node, err)
		}
	}
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
			if retryable(err) && !ep.isDone() {
				if err := pause(ctx, 50*time.Millisecond); err != nil {
					return err
				}
				continue
			}
			if ep.isDone() {
				err = ep.Err()
			}
			return fmt.Errorf("lock: create %s: %w", cur, err)
		}
	}
	m.mu.Lock()
	m.parent = true
	m.mu.Unlock()
	return nil
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
		if c := compareInt(a.seq, b.seq); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
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

func compareInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// waitTurn lists the children until ours is the lowest, watching only our predecessor in between.
func (m *Mutex) waitTurn(ctx context.Context, ep *epoch, own string, wait bool) (*Lease, error) {
	var ownGone <-chan zk.Event // watch on our own node, set before the first wait
	bo := backoff{min: 50 * time.Millisecond, max: time.Second}
	for {
		m.s.stats.reads.Add(1)
		res, err := ep.children(ctx, m.path, false)
		names, parent := res.names, res.stat
		if err != nil {
			if retryable(err) && !ep.isDone() {
				if err := pause(ctx, 50*time.Millisecond); err != nil {
					return nil, err
				}
				continue
			}
			if ep.isDone() {
				return nil, fmt.Errorf("lock: waiting on %s: %w", m.path, ep.Err())
			}
			return nil, fmt.Errorf("lock: list %s: %w", m.path, err)
		}
		children := m.contenders(names)
		idx := slices.IndexFunc(children, func(c child) bool { return c.name == own })
		if idx < 0 {
			// Our node is gone: our session ended, or someone deleted it.
			if ep.isDone() {
				return nil, fmt.Errorf("lock: waiting on %s: %w", m.path, ep.Err())
			}
			return nil, fmt.Errorf("lock: our node %s/%s vanished while waiting: %w", m.path, own, ErrSessionExpired)
		}
		if idx == 0 {
			return m.newLease(ep, m.path+"/"+own, Token{Epoch: parent.Czxid, Seq: children[0].seq})
		}
		if !wait {
			// The first child holds the lock, if it is a contender at all: one read tells.
			first := m.path + "/" + children[0].name
			m.s.stats.reads.Add(1)
			r, err := ep.exists(ctx, first, false)
			switch {
			case err == nil && !r.exists:
				continue // released meanwhile: list again
			case err == nil && !isContender(r.stat):
				m.ignore(children[0].name, r.stat)
				continue
			case err != nil && !retryable(err) && !ep.isDone():
				return nil, fmt.Errorf("lock: exists %s: %w", first, err)
			case err != nil:
				continue // the list above decides (and handles connection loss)
			}
			return nil, fmt.Errorf("lock: %s held by %s: %w", m.path, children[0].name, ErrLocked)
		}
		if ownGone == nil {
			m.s.stats.reads.Add(1)
			r, err := ep.exists(ctx, m.path+"/"+own, true)
			if err == nil && !r.exists {
				err = zk.ErrNoNode
			}
			ownGone = r.watch
			if err != nil {
				if errors.Is(err, zk.ErrNoNode) {
					return nil, fmt.Errorf("lock: our node %s/%s vanished while waiting: %w", m.path, own, ErrSessionExpired)
				}
				ownGone = nil
				continue // the list above decides again
			}
		}
		pred := m.path + "/" + children[idx-1].name
		m.s.stats.reads.Add(1)
		pr, err := ep.get(ctx, pred, true)
		predGone := pr.watch
		if errors.Is(err, zk.ErrNoNode) {
			continue // already gone: list again at once
		}
		if err != nil {
			// Not readable (no READ permission on a stranger's node, a server error): the list
			// above decides again, after a pause that doubles while the failures last, instead of
			// at once — that would spin on the ensemble for as long as the node lives.
			if bo.failures() == 0 {
				m.s.log.Warn("cannot read the predecessor's lock node; retrying with backoff", "path", m.path, "node", pred, "err", err)
			}
			if err := bo.wait(ctx, ep.done); err != nil {
				return nil, err
			}
			continue
		}
		bo.reset()
		if !isContender(pr.stat) {
			m.ignore(children[idx-1].name, pr.stat)
			continue
		}
		m.s.stats.waiting.Add(1)
		select {
		case <-predGone:
			m.s.stats.waiting.Add(-1)
			m.s.stats.watchEvents.Add(1)
		case ev := <-ownGone:
			m.s.stats.waiting.Add(-1)
			if ev.Type == zk.EventNodeDeleted {
				if ep.isDone() {
					return nil, fmt.Errorf("lock: waiting on %s: %w", m.path, ep.Err())
				}
				return nil, fmt.Errorf("lock: our node %s/%s was deleted while waiting: %w", m.path, own, ErrSessionExpired)
			}
			ownGone = nil // fired for another reason (reconnection): set it again
		case <-ep.done:
			m.s.stats.waiting.Add(-1)
			return nil, fmt.Errorf("lock: waiting on %s: %w", m.path, ep.Err())
		case <-ctx.Done():
			m.s.stats.waiting.Add(-1)
			return nil, ctx.Err()
		}
	}
}

func (m *Mutex) newLease(ep *epoch, node string, tok Token) (*Lease, error) {
	l := &Lease{m: m, node: node, token: tok, ep: ep, done: make(chan struct{}), released: make(chan struct{})}
	// Not derived from ep.ctx: monitor ends it, with the reason as its cause.
	l.ctx, l.cancel = context.WithCancelCause(context.Background())
	return l, nil
}

// lockUnfair is the one-node recipe: create "<path>/lock"; if it exists, watch it and try again
// when it changes. Every waiter wakes on every release.
func (m *Mutex) lockUnfair(ctx context.Context, wait bool) (*Lease, error) {
	ep, err := m.s.epoch(ctx)
	if err != nil {
		return nil, err
	}
	node := m.path + "/lock"
	for {
		if err := m.ensureParent(ctx, ep); err != nil {
			return nil, err
		}
		m.s.stats.writes.Add(1)
		_, err := ep.create(ctx, node, m.o.data, zk.FlagEphemeral)
		if err == nil || errors.Is(err, zk.ErrNodeExists) || retryable(err) {
			if ep.isDone() {
				return nil, fmt.Errorf("lock: create %s: %w", node, ep.Err())
			}
			// Whose is it? Ours if a create of ours landed (also one whose answer was lost).
			m.s.stats.reads.Add(1)
			xr, xerr := ep.exists(ctx, node, true)
			exists, st, gone := xr.exists, xr.stat, xr.watch
			if xerr != nil {
				if ctx.Err() != nil {
					m.s.goOwned(func() { m.deleteUnfairOrphan(ep, node) })
					return nil, ctx.Err()
				}
				if ep.isDone() {
					return nil, fmt.Errorf("lock: exists %s: %w", node, ep.Err())
				}
				continue
			}
			if exists && st.EphemeralOwner == ep.sessionID() {
				return m.newLease(ep, node, Token{Epoch: st.Czxid})
			}
			if !exists {
				continue
			}
			if !wait {
				return nil, fmt.Errorf("lock: %s held by session %#x: %w", node, st.EphemeralOwner, ErrLocked)
			}
			m.s.stats.waiting.Add(1)
			select {
			case <-gone:
				m.s.stats.waiting.Add(-1)
				m.s.stats.watchEvents.Add(1)
			case <-ep.done:
				m.s.stats.waiting.Add(-1)
				return nil, fmt.Errorf("lock: waiting on %s: %w", node, ep.Err())
			case <-ctx.Done():
				m.s.stats.waiting.Add(-1)
				return nil, ctx.Err()
			}
			continue
		}
		switch {
		case errors.Is(err, zk.ErrNoNode):
			m.mu.Lock()
			m.parent = false
			m.mu.Unlock()
		case ep.isDone():
			return nil, fmt.Errorf("lock: create %s: %w", node, ep.Err())
		case ctx.Err() != nil:
			m.s.goOwned(func() { m.deleteUnfairOrphan(ep, node) })
			return nil, ctx.Err()
		default:
			return nil, fmt.Errorf("lock: create %s: %w", node, err)
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

// monitor ends the lease when its session ends, when (with WithNodeWatch) its node is deleted,
// or when after a reconnection the node is found gone or owned by another session.
func (l *Lease) monitor() {
	ep := l.ep
	var nodeGone <-chan zk.Event
	for {
		if l.m.o.nodeWatch && nodeGone == nil {
			r, err := ep.exists(l.ctx, l.node, true)
			nodeGone = r.watch
			switch {
			case err == nil && !r.exists:
				l.end(fmt.Errorf("%w: node %s deleted", ErrLockLost, l.node))
				return
			case err != nil:
				nodeGone = nil
			}
		}
		select {
		case <-l.released:
			return
		case <-ep.done:
			l.end(fmt.Errorf("%w: %w", ErrLockLost, ep.Err()))
			return
		case ev := <-nodeGone:
			if ev.Type == zk.EventNodeDeleted {
				l.end(fmt.Errorf("%w: node %s deleted", ErrLockLost, l.node))
				return
			}
			nodeGone = nil
		case <-ep.reconnectedCh():
			// Same session after a disconnection: check that the node is still ours.
			ctx, cancel := context.WithTimeout(l.ctx, l.m.s.o.timeout)
			owner, err := l.m.ownerOf(ctx, ep, l.node)
			cancel()
			if err == nil && owner != ep.sessionID() {
				l.end(fmt.Errorf("%w: node %s not ours after reconnection (owner %#x)", ErrLockLost, l.node, owner))
				return
			}
			nodeGone = nil
		}
	}
}

// end marks the lease over with cause.
func (l *Lease) end(cause error) {
	l.once.Do(func() {
		l.cancel(cause)
		close(l.done)
		if !errors.Is(cause, ErrNotHeld) {
			l.m.s.log.Warn("lock lost", "path", l.m.path, "node", l.node, "token", l.token.String(), "err", cause)
		}
	})
}

// Token returns the fencing token of this hold.
func (l *Lease) Token() Token { return l.token }

// Node returns the path of the holder's node.
func (l *Lease) Node() string { return l.node }

// Done returns a channel closed when the hold ends: lost (session ended, node deleted) or released.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Context returns a context cancelled when the hold ends; run the work that needs the lock under
// it. [context.Cause] tells why.
func (l *Lease) Context() context.Context { return l.ctx }

// Err returns nil while the hold lasts, then why it ended (wrapping [ErrLockLost] or [ErrNotHeld]).
func (l *Lease) Err() error {
	select {
	case <-l.done:
		return context.Cause(l.ctx)
	default:
		return nil
	}
}
