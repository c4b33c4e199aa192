package locktest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

// testInspector: the Conn's Inspector lists nobody on a free lock; the holder with its Lease's
// token (and, for an election, the candidate's id); the waiters in their order when the backend
// knows them (each with the token it gets when its turn comes), and only the holder otherwise;
// nobody after the last Unlock. A bad name is an error wrapping lock.ErrInvalidOption, and an
// ended ctx ends the call.
func testInspector(t *testing.T, b Backend) {
	start := time.Now()
	in := open(t, b).Inspector
	name := testenv.Name(t)

	_, known := wantContenders(t, b, in, name, start)
	holder := newLocker(t, open(t, b), name)
	lh := mustLock(t, holder)
	cs, k := wantContenders(t, b, in, name, start, want{token: lh.Token()})
	if k != known {
		t.Fatalf("waitersKnown is %v while the lock is held, %v while it is free", k, known)
	}
	if !known && len(cs) != 1 {
		t.Fatalf("waiters not known, yet %d contenders listed: %+v", len(cs), cs)
	}

	// Two waiters, each on a connection of its own, the second starting once the first waits
	// (as far as the Inspector can tell).
	w1, w2 := newLocker(t, open(t, b), name), newLocker(t, open(t, b), name)
	got1 := lockLater(t, w1, waitLimit, nil)
	var queued []lock.Contender
	if known {
		queued = waitContenders(t, in, name, 2)
	}
	got2 := lockLater(t, w2, waitLimit, nil)
	if known {
		queued = waitContenders(t, in, name, 3)
		wantContenders(t, b, in, name, start, want{token: lh.Token()}, want{waiter: true, token: queued[1].Token}, want{waiter: true, token: queued[2].Token})
		if !lh.Token().Less(queued[1].Token) || !queued[1].Token.Less(queued[2].Token) {
			t.Fatalf("tokens of the holder and the waiters do not rise in queue order: %+v", queued)
		}
	} else {
		wantContenders(t, b, in, name, start, want{token: lh.Token()})
	}

	// The holder unlocks: a waiter takes over (the first in the queue, when the queue is known,
	// with the token it was listed with), then the other.
	mustUnlock(t, holder)
	for round, left := 0, []lockWaiter{{w1, got1}, {w2, got2}}; len(left) > 0; round++ {
		i, r := nextHolder(t, left)
		if known && i != 0 {
			t.Fatalf("the second waiter took the lock before the first")
		}
		cs := []want{{token: r.l.Token()}}
		if known {
			if r.l.Token() != queued[1+round].Token {
				t.Fatalf("waiter %d took the lock with token %s, listed with %s", round+1, r.l.Token(), queued[1+round].Token)
			}
			for _, c := range queued[2+round:] {
				cs = append(cs, want{waiter: true, token: c.Token})
			}
		}
		wantContenders(t, b, in, name, start, cs...)
		mustUnlock(t, left[i].l)
		left = append(left[:i], left[i+1:]...)
	}
	wantContenders(t, b, in, name, start)

	if c := open(t, b); c.Elector != nil {
		inspectElection(t, c, b, start)
	}

	if _, _, err := in.Contenders(t.Context(), ""); !errors.Is(err, lock.ErrInvalidOption) {
		t.Fatalf("Contenders of the empty name = %v, want an error wrapping lock.ErrInvalidOption", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, _, err := in.Contenders(ctx, name); !errors.Is(err, context.Canceled) {
		t.Fatalf("Contenders with an ended ctx = %v, want an error wrapping context.Canceled", err)
	}
}

// inspectElection: the leader is listed with its Leadership's token and its candidate id, and a
// waiting candidate (when the backend knows its waiters) with its id.
func inspectElection(t *testing.T, c *Conn, b Backend, start time.Time) {
	name := testenv.Name(t) + "-el"
	ea, eb := newElector(t, c, name, "candidate-a"), newElector(t, open(t, b), name, "candidate-b")
	la := campaignNow(t, ea)
	_, known := wantContenders(t, b, c.Inspector, name, start, want{id: "candidate-a", token: la.Token()})
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	won := make(chan lock.Leadership, 1)
	failed := make(chan error, 1)
	go func() {
		l, err := eb.Campaign(ctx)
		if err != nil {
			failed <- err
			return
		}
		won <- l
	}()
	if known {
		q := waitContenders(t, c.Inspector, name, 2)
		wantContenders(t, b, c.Inspector, name, start, want{id: "candidate-a", token: la.Token()}, want{waiter: true, id: "candidate-b", token: q[1].Token})
	}
	if err := la.Resign(t.Context()); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	var lb lock.Leadership
	select {
	case lb = <-won:
	case err := <-failed:
		t.Fatalf("Campaign(candidate-b): %v", err)
	}
	wantContenders(t, b, c.Inspector, name, start, want{id: "candidate-b", token: lb.Token()})
	if err := lb.Resign(t.Context()); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	wantContenders(t, b, c.Inspector, name, start)
}

// campaignNow campaigns with e, bounded by waitLimit.
func campaignNow(t *testing.T, e lock.Elector) lock.Leadership {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	l, err := e.Campaign(ctx)
	if err != nil {
		t.Fatalf("Campaign(%s): %v", e.ID(), err)
	}
	return l
}

// lockWaiter is a Locker whose Lock runs in [lockLater].
type lockWaiter struct {
	l   lock.Locker
	got <-chan lockResult
}

// nextHolder waits for one of ws to take the lock and returns its index and result.
func nextHolder(t *testing.T, ws []lockWaiter) (int, lockResult) {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		for i, w := range ws {
			select {
			case r := <-w.got:
				if r.err != nil {
					t.Fatalf("waiter's Lock: %v", r.err)
				}
				return i, r
			default:
			}
		}
		select {
		case <-deadline:
			t.Fatalf("no waiter took the lock within %v of its release", waitLimit)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// want is one contender a test expects: holder unless waiter; the id; the token.
type want struct {
	waiter bool
	id     string
	token  lock.Token
}

// wantContenders reads name's contenders once and checks them against ws, in order (none: a free
// lock). Since, when the backend gives it, must lie between start and now (a minute of slack). A
// holder's token may be above the one wanted when b.InspectorTokenAbove is set.
func wantContenders(t *testing.T, b Backend, in lock.Inspector, name string, start time.Time, ws ...want) ([]lock.Contender, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	cs, known, err := in.Contenders(ctx, name)
	if err != nil {
		t.Fatalf("Contenders(%q): %v", name, err)
	}
	if err := checkContenders(cs, start, b.InspectorTokenAbove, ws); err != nil {
		t.Fatalf("Contenders(%q) = %+v: %v", name, cs, err)
	}
	return cs, known
}

func checkContenders(cs []lock.Contender, start time.Time, above bool, ws []want) error {
	if len(cs) != len(ws) {
		return fmt.Errorf("%d contenders, want %d", len(cs), len(ws))
	}
	for i, w := range ws {
		c := cs[i]
		switch {
		case c.Holder == w.waiter:
			return fmt.Errorf("contender %d: Holder %v, want %v", i, c.Holder, !w.waiter)
		case c.ID != w.id:
			return fmt.Errorf("contender %d: ID %q, want %q", i, c.ID, w.id)
		case c.Token != w.token && !(above && c.Holder && w.token.Less(c.Token)):
			return fmt.Errorf("contender %d: token %s, want %s", i, c.Token, w.token)
		case !c.Since.IsZero() && (c.Since.Before(start.Add(-time.Minute)) || c.Since.After(time.Now().Add(time.Minute))):
			return fmt.Errorf("contender %d: Since %v, not between the test's start %v and now", i, c.Since, start)
		}
	}
	return nil
}

// waitContenders waits until name has n contenders and returns them.
func waitContenders(t *testing.T, in lock.Inspector, name string, n int) []lock.Contender {
	t.Helper()
	var cs []lock.Contender
	var last error
	testenv.Eventually(t, waitLimit, 5*time.Millisecond, func() bool {
		cs, _, last = in.Contenders(t.Context(), name)
		return last != nil || len(cs) == n
	}, "%s to have %d contenders", name, n)
	if last != nil {
		t.Fatalf("Contenders(%q): %v", name, last)
	}
	return cs
}
