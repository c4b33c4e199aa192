package lock

import (
	"context"
	"fmt"
	"sync"
)

// Hold is the part of a [Lease] that every backend shares: the fencing token, and the channel and
// context that end with the hold. A backend embeds a *Hold in its lease type, ends it with
// [Hold.End] when the hold is lost or released, and gets Token, Done, Context and Err from it.
// Its methods are safe for concurrent use.
type Hold struct {
	token  Token
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
	once   sync.Once
}

// NewHold returns a hold with token tok that lasts until [Hold.End].
func NewHold(tok Token) *Hold {
	h := &Hold{token: tok, done: make(chan struct{})}
	// Not derived from any caller's context: only End ends it, with the reason as its cause.
	h.ctx, h.cancel = context.WithCancelCause(context.Background())
	return h
}

// End ends the hold with cause (wrapping [ErrLockLost] when it was lost, [ErrNotHeld] when it was
// released). Only the first call counts; it reports whether this call ended the hold.
func (h *Hold) End(cause error) bool {
	ended := false
	h.once.Do(func() {
		h.cancel(cause)
		close(h.done)
		ended = true
	})
	return ended
}

// Token returns the fencing token of this hold.
func (h *Hold) Token() Token { return h.token }

// Done returns a channel closed when the hold ends: lost or released.
func (h *Hold) Done() <-chan struct{} { return h.done }

// Context returns a context cancelled when the hold ends; [context.Cause] tells why.
func (h *Hold) Context() context.Context { return h.ctx }

// Err returns nil while the hold lasts, then why it ended (wrapping [ErrLockLost] or [ErrNotHeld]).
func (h *Hold) Err() error {
	select {
	case <-h.done:
		return context.Cause(h.ctx)
	default:
		return nil
	}
}

// Reentrant is the hold counting every [Locker] shares, as its contract says: one acquisition at
// a time per Locker value, Lock on a value that holds returns the same Lease and counts the hold,
// the last Unlock releases, and after a hold is lost Lock refuses until it is unlocked. A backend
// keeps one per Locker value. It is safe for concurrent use.
type Reentrant struct {
	name    string
	acquire chan struct{} // one acquisition at a time

	mu    sync.Mutex
	cur   Lease
	holds int
}

// NewReentrant returns the hold counting of the lock called name (the name goes in errors).
func NewReentrant(name string) *Reentrant {
	return &Reentrant{name: name, acquire: make(chan struct{}, 1)}
}

// Lock returns the current hold, counted once more, or else, one caller at a time, takes a new
// one with take. It blocks while another caller takes (or until ctx ends); take's own wait is
// bounded by ctx. After a hold was lost it returns an error wrapping the loss until [Reentrant.Release]
// has taken the lost hold away.
func (r *Reentrant) Lock(ctx context.Context, take func(ctx context.Context) (Lease, error)) (Lease, error) {
	if l := r.reenter(); l != nil {
		return l, nil
	}
	select {
	case r.acquire <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-r.acquire }()
	if l := r.reenter(); l != nil { // another goroutine sharing this Locker took it meanwhile
		return l, nil
	}
	if err := r.lostHold(); err != nil {
		return nil, err
	}
	l, err := take(ctx)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.cur, r.holds = l, 1
	r.mu.Unlock()
	return l, nil
}

// reenter counts another hold when the lock is held and not lost.
func (r *Reentrant) reenter() Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil || r.cur.Err() != nil {
		return nil // a lost hold: Lock refuses until it is released
	}
	r.holds++
	return r.cur
}

// lostHold returns the error of a hold that was lost and not yet released.
func (r *Reentrant) lostHold() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil {
		return nil
	}
	return fmt.Errorf("lock: %s: a lost hold was not unlocked yet (%w): call Unlock first", r.name, r.cur.Err())
}

// Release counts one Unlock. It returns the Lease when that was its last hold — the caller then
// ends it and gives the lock back — and nil otherwise, or when nothing is held.
func (r *Reentrant) Release() Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil {
		return nil
	}
	r.holds--
	if r.holds > 0 {
		return nil
	}
	l := r.cur
	r.cur = nil
	return l
}

// Current returns the current hold (lost or not), or nil.
func (r *Reentrant) Current() Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}
