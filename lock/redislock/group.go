package redislock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txkit/txkit/lock"
)

// group is what a [Client] (one instance) and a [Redlock] (N instances) share: the instances, the
// majority a step needs on them, the options, the holds to end on Close and the goroutines to wait
// for. With one instance the majority is that instance, and Redlock's rules reduce to the
// single-node recipe.
type group struct {
	what   string // "redislock" or "redislock: redlock", for messages
	inst   []*instance
	quorum int
	o      options

	waiting waiters // the mutexes waiting for a release message

	ctx    context.Context // cancelled by close: ends watchdogs and cleanups
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closing bool // close has begun: no new holds
	closed  bool // close is waiting for the goroutines: no new ones
	leases  map[*lease]struct{}
}

func newGroup(what string, inst []*instance, o options) *group {
	ctx, cancel := context.WithCancel(context.Background())
	g := &group{what: what, inst: inst, quorum: len(inst)/2 + 1, o: o, ctx: ctx, cancel: cancel, leases: map[*lease]struct{}{}}
	for _, in := range inst {
		in.sub = newSubscription(in.rdb, g.channel(), o.log, &g.wg, g.waiting.wake)
	}
	return g
}

// keys returns the lock key and its fencing counter's key. Both carry the name as a Redis Cluster
// hash tag ({name}) so that the scripts, which touch both, run on one slot.
func (g *group) keys(name string) (key, counter string) {
	key = g.o.prefix + "{" + name + "}"
	return key, key + ":fence"
}

// channel is the pub/sub channel releases are published on; the payload is the lock's name.
func (g *group) channel() string { return g.o.prefix + "released" }

func (g *group) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closing
}

// fanout runs call on every instance in parallel. It returns when every instance has answered,
// when enough (if not nil) says the replies in so far decide the step, when wait has passed, or
// when ctx ends; a reply not in by then is an error ("no answer"). A reply that
// comes later is handed to late (if not nil) in its call's goroutine, which the group waits for on
// close. The calls run under the group's context, not ctx: their outcome must be known to clean
// up after them.
func (g *group) fanout(ctx context.Context, wait time.Duration, call func(ctx context.Context, in *instance) reply,
	enough func(replies []reply) bool, late func(in *instance, r reply)) []reply {
	var (
		mu        sync.Mutex
		out       = make([]reply, len(g.inst))
		collected bool
		left      = len(g.inst) // replies not in yet
		running   = len(g.inst) // calls not returned yet
		decided   = make(chan struct{})
	)
	// The last call to return cancels the calls' context.
	var calls struct{ cancel context.CancelFunc }
	cctx, cancel := context.WithTimeout(g.ctx, g.o.ttl)
	calls.cancel = cancel
	settle := func(i int, r reply) { // under mu
		out[i] = r
		left--
		if running--; running == 0 {
			calls.cancel()
		}
		if !collected && (left == 0 || (enough != nil && enough(out))) {
			collected = true
			close(decided)
		}
	}
	for i, in := range g.inst {
		started := g.goOwned(func() {
			r := call(cctx, in)
			mu.Lock()
			if collected {
				if running--; running == 0 {
					calls.cancel()
				}
				mu.Unlock()
				if late != nil {
					late(in, r)
				}
				return
			}
			settle(i, r)
			mu.Unlock()
		})
		if !started { // closed: answer for the call that did not run
			mu.Lock()
			settle(i, reply{err: lock.ErrClosed})
			mu.Unlock()
		}
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-decided:
	case <-t.C:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	if !collected {
		collected = true
		close(decided)
	}
	res := slices.Clone(out)
	for i := range res {
		if !res[i].in() {
			res[i].err = fmt.Errorf("no answer within %v", wait)
		}
	}
	return res
}

// majorityDecided reports whether the replies in so far decide a step that needs a majority of
// ok replies: a majority said ok, or so many did not that no majority can.
func (g *group) majorityDecided(replies []reply) bool {
	var ok, not int
	for _, r := range replies {
		switch {
		case r.ok:
			ok++
		case r.in():
			not++
		}
	}
	return ok >= g.quorum || not > len(g.inst)-g.quorum
}

// failures returns the errors of the replies that failed, each naming its instance.
func failures(replies []reply) []error {
	var errs []error
	for i, r := range replies {
		if r.err != nil {
			errs = append(errs, fmt.Errorf("instance %d: %w", i, r.err))
		}
	}
	return errs
}

// attempt is the outcome of one acquisition on the group.
type attempt struct {
	ok    bool
	token lock.Token
	start time.Time     // when the SETs were sent: the hold's deadline counts from here
	wait  time.Duration // not ok: how long until a majority's keys expire, as the instances said
	split bool          // not ok, and no other owner holds a majority: contention, retry after a random pause
	err   error         // not ok, and too few instances answered for a majority
}

// acquire tries once to take the lock on a majority of the instances, and to write its token back
// to a majority ([group.writeBack]), within the hold's validity (TTL minus the time the attempt
// took minus the drift allowance). When it fails it releases what it took (and what it may have
// taken, on the instances that did not answer) with a fresh, bounded context.
func (g *group) acquire(ctx context.Context, m *mutex, value string) attempt {
	key, counter := g.keys(m.name)
	start := time.Now()
	// A SET that succeeds after the step was decided is kept if the attempt won (the key is ours,
	// renewed and released with the others) and deleted if it lost.
	var won atomic.Bool
	decided := make(chan struct{})
	defer close(decided)
	replies := g.fanout(ctx, g.o.instanceTimeout(), func(ctx context.Context, in *instance) reply {
		return in.acquire(ctx, key, counter, value, g.o.ttl)
	}, g.majorityDecided, func(in *instance, r reply) {
		if !r.ok {
			return
		}
		select {
		case <-decided:
		case <-g.ctx.Done():
			return
		}
		if !won.Load() {
			g.releaseOne(in, m.name, value)
		}
	})
	elapsed := time.Since(start)
	t := tallyAcquire(replies)
	a := attempt{start: start, token: t.token}
	validity := g.o.ttl - elapsed - g.o.drift
	var backErr error // the token could not be written back to a majority
	if t.taken >= g.quorum && validity > 0 {
		if backErr = g.writeBack(ctx, counter, a.token.Seq, replies); backErr == nil {
			if validity = g.o.ttl - time.Since(start) - g.o.drift; validity > 0 {
				a.ok = true
				won.Store(true)
				return a
			}
		}
	}
	if t.taken > 0 || len(t.errs) > 0 {
		// Publish only when we held a majority (too long): otherwise nobody waits for these keys.
		// Waiters after a split retry by themselves; a message from every contender that lost a
		// split would wake them all into the next one.
		_ = g.release(ctx, m.name, value, replies, t.taken >= g.quorum)
	}
	return g.lost(a, t, backErr)
}

// acquireTally sums up the replies to an attempt's SETs.
type acquireTally struct {
	taken   int             // instances that granted the key
	token   lock.Token      // the highest counter among them
	owners  map[string]int  // other holders' values: on how many instances each holds the key
	errs    []error         // the instances that failed (failures)
	free    []time.Duration // per answering instance: how long until its key is free
	firstOK bool            // the first instance to answer granted the key
}

func tallyAcquire(replies []reply) acquireTally {
	t := acquireTally{owners: map[string]int{}, errs: failures(replies)}
	first := -1 // the first instance that answered
	for i, r := range replies {
		if r.err == nil && first < 0 {
			first = i
		}
		switch {
		case r.err != nil:
		case r.ok:
			t.taken++
			t.free = append(t.free, 0)
			if tok := (lock.Token{Seq: r.n}); t.token.Less(tok) {
				t.token = tok
			}
		default:
			t.owners[r.data]++
			switch {
			case r.n == -2: // expired between the SET and the PTTL
				t.free = append(t.free, 0)
			case r.n >= 0:
				t.free = append(t.free, time.Duration(r.n)*time.Millisecond)
			}
		}
	}
	t.firstOK = first >= 0 && replies[first].ok
	return t
}

// lost completes attempt a, which did not win (its keys are released): why (an error, or a
// split), and how long to wait before the next attempt.
func (g *group) lost(a attempt, t acquireTally, backErr error) attempt {
	held := false // another owner holds a majority
	for _, n := range t.owners {
		held = held || n >= g.quorum
	}
	switch {
	case backErr != nil:
		a.err = backErr
	case t.taken >= g.quorum: // took too long: the hold would be invalid at once
		a.split = true
	case len(t.errs) > len(g.inst)-g.quorum:
		a.err = fmt.Errorf("%d of %d instances failed, a majority needs %d: %w", len(t.errs), len(g.inst), g.quorum, errors.Join(t.errs...))
	case !held:
		a.split = true
	}
	a.wait = g.o.fallback
	if slices.Sort(t.free); len(t.free) >= g.quorum {
		a.wait = min(a.wait, t.free[g.quorum-1])
	}
	if a.split {
		// Contenders split the instances and released them. The one that took the first
		// instance to answer tries again at once; the others after a random pause, so that one
		// attempt usually finds every instance free.
		if t.firstOK {
			a.wait = 0
		} else {
			a.wait = min(a.wait, 5*time.Millisecond+rand.N(45*time.Millisecond))
		}
	}
	return a
}

// writeBack raises the fencing counter to tok on the instances whose counter may be below it
// (all but those whose acquisition returned tok), until a majority has at least tok; it returns
// an error, with the instances' errors, when no majority got there within the instance timeout.
//
// Without it, Redlock's tokens could fall: the token is the highest counter of the granting
// majority, and when that came from an instance whose counter ran ahead (its clock was stepped
// forward once), a later majority without that instance would hand out lower tokens, and a fence
// would refuse the new holder and accept the deposed one. With tok on a majority, every later
// majority includes an instance whose counter is at least tok, so the next token is above it.
// With one instance (a [Client]) there is nothing to write back.
func (g *group) writeBack(ctx context.Context, counter string, tok int64, replies []reply) error {
	has := make([]bool, len(g.inst))
	n := 0
	for i, r := range replies {
		if r.ok && r.n >= tok {
			has[i] = true
			n++
		}
	}
	if n >= g.quorum {
		return nil
	}
	out := g.fanout(ctx, g.o.instanceTimeout(), func(ctx context.Context, in *instance) reply {
		if has[slices.Index(g.inst, in)] {
			return reply{answered: true, ok: true}
		}
		return in.raise(ctx, counter, tok)
	}, g.majorityDecided, nil)
	n = 0
	for _, r := range out {
		if r.ok {
			n++
		}
	}
	if n >= g.quorum {
		return nil
	}
	return fmt.Errorf("token %d written back to %d of %d instances, a majority needs %d: %w",
		tok, n, len(g.inst), g.quorum, errors.Join(failures(out)...))
}

// extend renews the TTL of a hold on every instance. It returns whether a majority renewed it,
// and whether the hold is certainly lost: so many instances said the key is gone or not ours
// that no majority can hold it.
func (g *group) extend(ctx context.Context, m *mutex, value string) (ok, lost bool, err error) {
	key, _ := g.keys(m.name)
	replies := g.fanout(ctx, g.o.instanceTimeout(), func(ctx context.Context, in *instance) reply {
		return in.extend(ctx, key, value, g.o.ttl)
	}, g.majorityDecided, nil)
	var renewed, gone int
	for _, r := range replies {
		switch {
		case r.err != nil:
		case r.ok:
			renewed++
		default:
			gone++
		}
	}
	return renewed >= g.quorum, len(g.inst)-gone < g.quorum, errors.Join(failures(replies)...)
}

// release deletes the hold's key on every instance whose reply does not say it was held by
// another (nil replies: on all) and, with publish, publishes the release. It waits, with ctx's
// values but not its cancellation, at most max(instance timeout, 1 s), until every instance has
// answered: returning once a majority had would let the next owner's attempt, sent at once, find
// the key still on a slow instance and, with a late acquisition's key left on another, refuse a
// TryLock although nobody holds the lock. It returns an error, with the instances' errors, only
// when no majority answered (the lock may then stay taken until the keys expire).
func (g *group) release(ctx context.Context, name, value string, replies []reply, publish bool) error {
	channel := ""
	if publish {
		channel = g.channel()
	}
	key, _ := g.keys(name)
	answered := func(rs []reply) bool {
		n := 0
		for _, r := range rs {
			if r.answered {
				n++
			}
		}
		return n >= g.quorum
	}
	out := g.fanout(context.WithoutCancel(ctx), max(g.o.instanceTimeout(), time.Second), func(ctx context.Context, in *instance) reply {
		i := slices.Index(g.inst, in)
		if replies != nil && replies[i].answered && !replies[i].ok {
			return reply{answered: true} // held by another: nothing of ours there
		}
		return in.release(ctx, key, value, channel, name)
	}, nil, nil)
	if !answered(out) {
		return errors.Join(failures(out)...)
	}
	if errs := failures(out); len(errs) > 0 {
		g.o.log.Debug("released on a majority; where the release failed, the key expires with its TTL", "name", name, "err", errors.Join(errs...))
	}
	return nil
}

// releaseOne deletes a hold's key on one instance, in the background of a late answer.
func (g *group) releaseOne(in *instance, name, value string) {
	key, _ := g.keys(name)
	ctx, cancel := context.WithTimeout(g.ctx, max(g.o.instanceTimeout(), time.Second))
	defer cancel()
	if r := in.release(ctx, key, value, "", name); r.err != nil {
		g.o.log.Warn("could not release a late acquisition; it expires with its TTL", "name", name, "err", r.err)
	}
}

// holder returns the holder data of the hold that a majority of instances agree on.
func (g *group) holder(ctx context.Context, name string) (string, error) {
	cs, _, err := inspector{g: g}.Contenders(ctx, name)
	switch {
	case err != nil:
		return "", err
	case len(cs) == 0:
		return "", fmt.Errorf("%s: holder of %s: %w", g.what, name, lock.ErrNoLeader)
	}
	return cs[0].ID, nil
}

// subscribe queues c for the release messages of name on any instance (see [waiters]), and waits
// (at most the fallback check, or until ctx ends) until the subscriptions of a majority are active,
// so that a release right after the caller's next attempt is not missed. It returns the function
// that stops the signals.
func (g *group) subscribe(ctx context.Context, name string, c chan struct{}) (stop func()) {
	g.waiting.add(name, c)
	stop = func() { g.waiting.remove(name, c) }
	ready := make([]<-chan struct{}, len(g.inst))
	for i, in := range g.inst {
		ready[i] = in.sub.start()
	}
	deadline := time.NewTimer(g.o.fallback)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		n := 0
		for _, r := range ready {
			select {
			case <-r:
				n++
			default:
			}
		}
		if n >= g.quorum {
			return stop
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return stop
		case <-ctx.Done():
			return stop
		case <-g.ctx.Done():
			return stop
		}
	}
}

// goOwned runs f in a goroutine that close waits for; it returns false (and does not run f) once
// the group is closed.
func (g *group) goOwned(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Go(f)
	return true
}

// track registers a hold for close to end; it returns false when the group is closed.
func (g *group) track(l *lease) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return false
	}
	g.leases[l] = struct{}{}
	return true
}

func (g *group) untrack(l *lease) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.leases, l)
}

// close ends every hold (releasing its keys), the subscriptions and the goroutines. It does not
// close the caller's Redis clients.
func (g *group) close() error {
	g.mu.Lock()
	if g.closing {
		g.mu.Unlock()
		return nil
	}
	g.closing = true // no new holds; goroutines may still start, for the releases below
	leases := make([]*lease, 0, len(g.leases))
	for l := range g.leases {
		leases = append(leases, l)
	}
	g.mu.Unlock()
	var errs []error
	for _, l := range leases {
		l.end(fmt.Errorf("%w: %s closed (%w)", lock.ErrLockLost, g.what, lock.ErrClosed))
		if err := g.release(context.Background(), l.m.name, l.value, nil, true); err != nil {
			errs = append(errs, fmt.Errorf("%s: release %s on close: %w", g.what, l.m.name, err))
		}
	}
	g.mu.Lock()
	g.closed = true // no goroutine starts after this: wg.Wait below sees every one
	g.mu.Unlock()
	g.cancel()
	for _, in := range g.inst {
		in.sub.close()
	}
	g.wg.Wait()
	return errors.Join(errs...)
}
