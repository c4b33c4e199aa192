package locktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

// waitLimit bounds every wait of the suite that is not an expiry: a Lock that should succeed at
// once, a campaign after a resignation.
const waitLimit = 20 * time.Second

// shortWait is how long the cancellation tests let a Lock wait before its ctx ends.
const shortWait = 300 * time.Millisecond

// Run runs the whole conformance suite against b, one subtest each (see the package
// documentation): Exclusion, Reentrancy, TryLock, CancelLeavesNothing, UnlockNotHeld, Tokens,
// Released, Lost, Partition (when b has ConnectVia), Elector (when b's Conn has an Elector),
// Inspector (when b's Conn has an Inspector), Counter, HolderKilled and LeaderKilled (with an Elector). The subtests run one after the other; callers may run several backends in
// parallel. Under -short, Run skips (the suite needs the servers).
func Run(t *testing.T, b Backend) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: the lock conformance suite runs against the real servers")
	}
	if err := b.validate(); err != nil {
		t.Fatal(err)
	}
	c := open(t, b)
	hasElector, hasInspector := c.Elector != nil, c.Inspector != nil
	t.Run("Exclusion", func(t *testing.T) { testExclusion(t, b) })
	t.Run("Reentrancy", func(t *testing.T) { testReentrancy(t, b) })
	t.Run("TryLock", func(t *testing.T) { testTryLock(t, b) })
	t.Run("CancelLeavesNothing", func(t *testing.T) { testCancel(t, b) })
	t.Run("UnlockNotHeld", func(t *testing.T) { testUnlockNotHeld(t, b) })
	t.Run("Tokens", func(t *testing.T) { testTokens(t, b) })
	t.Run("Released", func(t *testing.T) { testReleased(t, b) })
	t.Run("Lost", func(t *testing.T) { testLost(t, b) })
	if b.ConnectVia != nil {
		t.Run("Partition", func(t *testing.T) { testPartition(t, b) })
	}
	if hasElector {
		t.Run("Elector", func(t *testing.T) { testElector(t, b) })
	}
	if hasInspector {
		t.Run("Inspector", func(t *testing.T) { testInspector(t, b) })
	}
	t.Run("Counter", func(t *testing.T) { RunCounter(t, b, Counter{}) })
	t.Run("HolderKilled", func(t *testing.T) { RunHolderKilled(t, b) })
	if hasElector {
		t.Run("LeaderKilled", func(t *testing.T) { RunLeaderKilled(t, b, 2) })
	}
}

// open opens a Conn for the test and closes it when the test ends (or earlier, through the
// returned Conn's Close, which may be called more than once).
func open(t testing.TB, b Backend) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	c, err := b.connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var cerr error
	closeOnce := func() error {
		once.Do(func() { cerr = c.Close() })
		return cerr
	}
	t.Cleanup(func() {
		if err := closeOnce(); err != nil {
			t.Errorf("close %s connection: %v", b.Name, err)
		}
	})
	return &Conn{Locker: c.Locker, Elector: c.Elector, Inspector: c.Inspector, Close: closeOnce}
}

func newLocker(t testing.TB, c *Conn, name string) lock.Locker {
	t.Helper()
	l, err := c.Locker(name)
	if err != nil {
		t.Fatalf("Locker(%q): %v", name, err)
	}
	return l
}

func newElector(t testing.TB, c *Conn, name, id string) lock.Elector {
	t.Helper()
	e, err := c.Elector(name, id)
	if err != nil {
		t.Fatalf("Elector(%q, %q): %v", name, id, err)
	}
	return e
}

// mustLock takes l with Lock, bounded by waitLimit.
func mustLock(t testing.TB, l lock.Locker) lock.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	lease, err := l.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	return lease
}

func mustTryLock(t testing.TB, l lock.Locker) lock.Lease {
	t.Helper()
	lease, err := l.TryLock(t.Context())
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	return lease
}

func mustUnlock(t testing.TB, l lock.Locker) {
	t.Helper()
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// wantLocked checks that TryLock on l fails with ErrLocked and returns no Lease.
func wantLocked(t testing.TB, l lock.Locker, why string) {
	t.Helper()
	lease, err := l.TryLock(t.Context())
	if !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryLock %s = %v, want an error wrapping lock.ErrLocked", why, err)
	}
	if lease != nil {
		t.Fatalf("TryLock %s returned a Lease (token %s) with its error", why, lease.Token())
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// wantHeld checks a Lease that should be held.
func wantHeld(t testing.TB, l lock.Lease, what string) {
	t.Helper()
	if isClosed(l.Done()) || l.Context().Err() != nil || l.Err() != nil {
		t.Fatalf("%s: lease ended while held (Done closed %v, Context %v, Err %v)", what, isClosed(l.Done()), l.Context().Err(), l.Err())
	}
}

// wantEnded checks a Lease that has ended, for one of the reasons in want.
func wantEnded(t testing.TB, l lock.Lease, what string, want ...error) {
	t.Helper()
	if !isClosed(l.Done()) {
		t.Fatalf("%s: Done is not closed", what)
	}
	if l.Context().Err() == nil {
		t.Fatalf("%s: Context is not cancelled", what)
	}
	if context.Cause(l.Context()) == nil {
		t.Fatalf("%s: Context has no cause", what)
	}
	err := l.Err()
	if err == nil {
		t.Fatalf("%s: Err is nil", what)
	}
	for _, w := range want {
		if errors.Is(err, w) {
			return
		}
	}
	t.Fatalf("%s: Err = %v, want an error wrapping one of %v", what, err, want)
}

// History checks the holds of one lock made by the goroutines of one process: call Enter with
// the hold's token right after taking the lock, and Exit right before releasing it. It records two
// holders at once, and a token not above the previous hold's. The zero History is ready to use;
// it is safe for concurrent use by multiple goroutines.
type History struct {
	mu      sync.Mutex
	holding int
	holds   int
	last    lock.Token
	errs    []error
}

// Enter records the start of a hold with token tok.
func (h *History) Enter(tok lock.Token) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holding++
	h.holds++
	if h.holding > 1 {
		h.errs = append(h.errs, fmt.Errorf("locktest: %d holders at once (token %s)", h.holding, tok))
	}
	if !h.last.Less(tok) {
		h.errs = append(h.errs, fmt.Errorf("locktest: token %s does not follow the previous hold's %s", tok, h.last))
	}
	h.last = tok
}

// Exit records the end of the current hold.
func (h *History) Exit() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holding--
}

// Holds returns the number of holds recorded.
func (h *History) Holds() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.holds
}

// Err returns what went wrong (every overlap and every token out of order, joined), or nil.
func (h *History) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return errors.Join(h.errs...)
}

// testExclusion: goroutines, each with its own Locker, over two connections, take turns.
func testExclusion(t *testing.T, b Backend) {
	const goroutines, each = 8, 20
	conns := []*Conn{open(t, b), open(t, b)}
	name := testenv.Name(t)
	var h History
	errc := make(chan error, goroutines)
	var wg sync.WaitGroup
	for i := range goroutines {
		l := newLocker(t, conns[i%len(conns)], name)
		wg.Go(func() {
			for range each {
				lease, err := l.Lock(t.Context())
				if err != nil {
					errc <- fmt.Errorf("lock: %w", err)
					return
				}
				h.Enter(lease.Token())
				time.Sleep(time.Millisecond) // hold it for a moment, so that an overlap would show
				if err := lease.Err(); err != nil {
					errc <- fmt.Errorf("lease of token %s ended while held: %w", lease.Token(), err)
				}
				h.Exit()
				if err := l.Unlock(t.Context()); err != nil {
					errc <- fmt.Errorf("unlock: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if err := h.Err(); err != nil {
		t.Error(err)
	}
	if h.Holds() != goroutines*each {
		t.Errorf("%d holds, want %d", h.Holds(), goroutines*each)
	}
}

// testReentrancy: holds of one Locker share one Lease and are counted; the last Unlock releases.
func testReentrancy(t *testing.T, b Backend) {
	name := testenv.Name(t)
	a, other := newLocker(t, open(t, b), name), newLocker(t, open(t, b), name)
	l1 := mustLock(t, a)
	l2 := mustLock(t, a)
	l3 := mustTryLock(t, a)
	for i, l := range []lock.Lease{l2, l3} {
		if l.Token() != l1.Token() || l.Done() != l1.Done() {
			t.Fatalf("hold %d of one Locker: token %s, want the first hold's Lease (token %s)", i+2, l.Token(), l1.Token())
		}
	}
	wantLocked(t, other, "by another owner while the lock is held three times")
	mustUnlock(t, a)
	mustUnlock(t, a)
	wantHeld(t, l1, "after two Unlocks of three holds")
	wantLocked(t, other, "by another owner after two Unlocks of three holds")
	mustUnlock(t, a)
	wantEnded(t, l1, "after the last Unlock", lock.ErrNotHeld)
	l4 := mustTryLock(t, other) // at once: the last Unlock released the lock
	if !l1.Token().Less(l4.Token()) {
		t.Fatalf("next owner's token %s is not above %s", l4.Token(), l1.Token())
	}
	mustUnlock(t, other)
}

// testTryLock: TryLock takes a free lock at once and fails with ErrLocked on a held one.
func testTryLock(t *testing.T, b Backend) {
	name := testenv.Name(t)
	Handoff(t, newLocker(t, open(t, b), name), newLocker(t, open(t, b), name))
}

// Handoff checks a hand-over between two owners of one lock name (Lockers on connections of
// their own): a's TryLock takes the free lock, b's TryLock fails with [lock.ErrLocked] while a
// holds, and once a unlocks, b's TryLock takes it with a higher token and a is refused in turn.
// Both end unlocked. Backends' and applications' own tests call it on their Lockers.
func Handoff(t testing.TB, a, b lock.Locker) {
	t.Helper()
	l := mustTryLock(t, a)
	wantHeld(t, l, "TryLock on a free lock")
	wantLocked(t, b, "by another owner")
	wantLocked(t, b, "by another owner, again")
	mustUnlock(t, a)
	l2 := mustTryLock(t, b)
	wantLocked(t, a, "by the first owner after it released")
	mustUnlock(t, b)
	if !l.Token().Less(l2.Token()) {
		t.Fatalf("second token %s is not above %s", l2.Token(), l.Token())
	}
}

// testCancel: a Lock whose ctx ends while it waits returns ctx's error and leaves nothing behind:
// when the holder unlocks, a third owner's TryLock succeeds at once.
func testCancel(t *testing.T, b Backend) {
	name := testenv.Name(t)
	holder := newLocker(t, open(t, b), name)
	waiter := newLocker(t, open(t, b), name)
	third := newLocker(t, open(t, b), name)
	mustLock(t, holder)

	ctx, cancel := context.WithTimeout(t.Context(), shortWait)
	_, err := waiter.Lock(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its deadline = %v, want context.DeadlineExceeded", err)
	}
	ctx, cancel = context.WithCancel(t.Context())
	stop := time.AfterFunc(shortWait, cancel)
	defer stop.Stop()
	_, err = waiter.Lock(ctx)
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock = %v, want context.Canceled", err)
	}
	mustUnlock(t, waiter) // holds nothing: nil
	mustUnlock(t, holder)
	l := mustTryLock(t, third)
	wantHeld(t, l, "third owner after the cancelled waits")
	mustUnlock(t, third)
	mustUnlock(t, mustLockThen(t, waiter)) // the waiter can still take the lock
}

// mustLockThen takes l and returns it, for a following Unlock.
func mustLockThen(t testing.TB, l lock.Locker) lock.Locker {
	t.Helper()
	mustLock(t, l)
	return l
}

// testUnlockNotHeld: Unlock of a Locker that holds nothing returns nil and releases no one.
func testUnlockNotHeld(t *testing.T, b Backend) {
	name := testenv.Name(t)
	a, holder, third := newLocker(t, open(t, b), name), newLocker(t, open(t, b), name), newLocker(t, open(t, b), name)
	mustUnlock(t, a)
	l := mustLock(t, holder)
	mustUnlock(t, a)
	wantHeld(t, l, "after another owner's Unlock")
	wantLocked(t, third, "after an Unlock by an owner that holds nothing")
	mustUnlock(t, holder)
	mustUnlock(t, holder) // twice: nil
	mustUnlock(t, mustLockThen(t, third))
}

// testTokens: tokens rise strictly from hold to hold, whoever holds.
func testTokens(t *testing.T, b Backend) {
	name := testenv.Name(t)
	c1, c2 := open(t, b), open(t, b)
	ls := []lock.Locker{newLocker(t, c1, name), newLocker(t, c2, name), newLocker(t, c1, name)}
	var last lock.Token
	var first lock.Token
	for i, who := range []int{0, 1, 0, 0, 2, 1, 1, 2, 0} {
		var lease lock.Lease
		if i%2 == 0 {
			lease = mustLock(t, ls[who])
		} else {
			lease = mustTryLock(t, ls[who])
		}
		if !last.Less(lease.Token()) {
			t.Fatalf("hold %d: token %s is not above the previous hold's %s", i, lease.Token(), last)
		}
		if i == 0 {
			first = lease.Token()
		}
		last = lease.Token()
		mustUnlock(t, ls[who])
	}
	t.Logf("tokens rose from %s to %s over 9 holds", first, last)
}

// testReleased: a released Lease's Done is closed, its Context cancelled, its Err wraps ErrNotHeld.
func testReleased(t *testing.T, b Backend) {
	a := newLocker(t, open(t, b), testenv.Name(t))
	l := mustLock(t, a)
	wantHeld(t, l, "held lease")
	mustUnlock(t, a)
	wantEnded(t, l, "released lease", lock.ErrNotHeld)
	l2 := mustLock(t, a)
	if l2.Done() == l.Done() {
		t.Fatal("a new hold returned the released Lease")
	}
	wantHeld(t, l2, "new hold after a release")
	mustUnlock(t, a)
}

// testLost: the connection of a holder is closed under it. Its Lease ends (Done, Context, Err
// wrapping ErrLockLost or ErrNotHeld) no later than the moment another owner, already waiting,
// gets the lock, and within Expiry + 1 s.
func testLost(t *testing.T, b Backend) {
	name := testenv.Name(t)
	ca := open(t, b)
	a := newLocker(t, ca, name)
	next := newLocker(t, open(t, b), name)
	la := mustLock(t, a)

	var doneA bool // la's Done was closed when next got the lock
	got := lockLater(t, next, b.Expiry+waitLimit, func() { doneA = isClosed(la.Done()) })
	closed := time.Now()
	if err := ca.Close(); err != nil {
		t.Logf("closing the holder's connection: %v", err)
	}
	select {
	case <-la.Done():
	case <-time.After(b.Expiry + time.Second):
		t.Fatalf("lease still open %v after its connection was closed (Expiry %v)", b.Expiry+time.Second, b.Expiry)
	}
	wantEnded(t, la, "lease of a closed connection", lock.ErrLockLost, lock.ErrNotHeld)
	r := <-got
	if r.err != nil {
		t.Fatalf("next owner's Lock: %v", r.err)
	}
	took := r.at.Sub(closed)
	t.Logf("holder's connection closed: its lease ended with %v; the next owner got in after %v (Expiry %v)", la.Err(), took.Round(time.Millisecond), b.Expiry)
	if !doneA {
		t.Error("the next owner got the lock while the lost lease's Done was still open")
	}
	if took > b.Expiry+time.Second {
		t.Errorf("the next owner got in after %v, want within Expiry + 1 s = %v", took, b.Expiry+time.Second)
	}
	if !la.Token().Less(r.l.Token()) {
		t.Errorf("next owner's token %s is not above the lost one's %s", r.l.Token(), la.Token())
	}
	mustUnlock(t, next)
	if err := a.Unlock(context.Background()); err != nil {
		t.Logf("Unlock of the lost hold on a closed connection: %v", err)
	}
}

// lockResult is what a Lock run by [lockLater] returned, and when.
type lockResult struct {
	l   lock.Lease
	err error
	at  time.Time
}

// lockLater runs l.Lock in a goroutine with a ctx that ends after limit (or with the test), and
// sends its result on the returned channel; then, when set, runs first, as soon as Lock returns.
func lockLater(t testing.TB, l lock.Locker, limit time.Duration, then func()) <-chan lockResult {
	got := make(chan lockResult, 1)
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	t.Cleanup(cancel)
	go func() {
		lease, err := l.Lock(ctx)
		at := time.Now()
		if then != nil {
			then()
		}
		got <- lockResult{lease, err, at}
	}()
	return got
}

// testElector: Campaign, Leader, Resign and RunWhileLeader, handing the lead between candidates
// on separate connections.
func testElector(t *testing.T, b Backend) {
	name := testenv.Name(t)
	e1 := newElector(t, open(t, b), name, "candidate-a")
	e2 := newElector(t, open(t, b), name, "candidate-b")
	if e1.ID() != "candidate-a" {
		t.Fatalf("ID() = %q, want candidate-a", e1.ID())
	}
	wantLeader := func(e lock.Elector, want string) {
		t.Helper()
		id, err := e.Leader(t.Context())
		if want == "" {
			if !errors.Is(err, lock.ErrNoLeader) {
				t.Fatalf("Leader() = %q, %v; want an error wrapping lock.ErrNoLeader", id, err)
			}
			return
		}
		if err != nil || id != want {
			t.Fatalf("Leader() = %q, %v; want %q", id, err, want)
		}
	}
	wantLeader(e2, "")
	l1 := campaignNow(t, e1)
	wantLeader(e2, "candidate-a")
	wantLeader(e1, "candidate-a")

	// A campaign whose ctx ends leaves nothing behind.
	ctx, cancel := context.WithTimeout(t.Context(), shortWait)
	_, err := e2.Campaign(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Campaign past its deadline = %v, want context.DeadlineExceeded", err)
	}

	type won struct {
		l   lock.Leadership
		err error
	}
	wonc := make(chan won, 1)
	ctx, cancel = context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	go func() {
		l, err := e2.Campaign(ctx)
		wonc <- won{l, err}
	}()
	if err := l1.Resign(t.Context()); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	if err := l1.Resign(t.Context()); err != nil {
		t.Fatalf("second Resign: %v", err)
	}
	wantEnded(t, l1, "resigned leadership", lock.ErrNotHeld)
	w := <-wonc
	if w.err != nil {
		t.Fatalf("Campaign(candidate-b) after candidate-a resigned: %v", w.err)
	}
	l2 := w.l
	if !l1.Token().Less(l2.Token()) {
		t.Fatalf("candidate-b's token %s is not above candidate-a's %s", l2.Token(), l1.Token())
	}
	wantLeader(e1, "candidate-b")

	// RunWhileLeader on candidate-a waits, leads when candidate-b resigns, and gives up the lead
	// when its ctx ends.
	leading := make(chan lock.Token, 1)
	rctx, rcancel := context.WithCancel(t.Context())
	defer rcancel()
	ran := make(chan error, 1)
	go func() {
		ran <- e1.RunWhileLeader(rctx, func(ctx context.Context, l lock.Leadership) error {
			select {
			case leading <- l.Token():
			default:
			}
			<-ctx.Done()
			return nil
		})
	}()
	wantLeader(e1, "candidate-b")
	if err := l2.Resign(t.Context()); err != nil {
		t.Fatalf("Resign(candidate-b): %v", err)
	}
	select {
	case tok := <-leading:
		if !l2.Token().Less(tok) {
			t.Fatalf("RunWhileLeader's token %s is not above candidate-b's %s", tok, l2.Token())
		}
	case <-time.After(waitLimit):
		t.Fatalf("RunWhileLeader(candidate-a) did not lead within %v of candidate-b's resignation", waitLimit)
	}
	wantLeader(e2, "candidate-a")
	rcancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("RunWhileLeader returned %v after its ctx ended, want nil", err)
		}
	case <-time.After(waitLimit):
		t.Fatalf("RunWhileLeader did not return within %v of its ctx's end", waitLimit)
	}
	wantLeader(e2, "")
}
