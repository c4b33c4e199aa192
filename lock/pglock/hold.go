package pglock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/txkit/txkit/lock"
)

// hold is one hold of a lock, in either mode: its fencing token, and how the holder learns that
// it lost the lock. It implements [lock.Lease].
type hold struct {
	name  string
	token lock.Token
	log   *slog.Logger

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
	once   sync.Once

	released chan struct{} // closed by the last Unlock: the monitor stops
	relOnce  sync.Once
	stopped  chan struct{} // closed when the monitor has returned
}

func newHold(name string, tok lock.Token, log *slog.Logger) *hold {
	h := &hold{name: name, token: tok, log: log, done: make(chan struct{}), released: make(chan struct{}), stopped: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancelCause(context.Background())
	return h
}

// end marks the hold over with cause.
func (h *hold) end(cause error) {
	h.once.Do(func() {
		h.cancel(cause)
		close(h.done)
		if !errors.Is(cause, lock.ErrNotHeld) {
			h.log.Warn("lock lost", "lock", h.name, "token", h.token.String(), "err", cause)
		}
	})
}

// release ends the hold as released by Unlock and stops its monitor.
func (h *hold) release() {
	h.relOnce.Do(func() { close(h.released) })
	h.end(fmt.Errorf("%w: released by Unlock", lock.ErrNotHeld))
}

// Token returns the fencing token of this hold.
func (h *hold) Token() lock.Token { return h.token }

// Done returns a channel closed when the hold ends: lost or released.
func (h *hold) Done() <-chan struct{} { return h.done }

// Context returns a context cancelled when the hold ends; [context.Cause] tells why.
func (h *hold) Context() context.Context { return h.ctx }

// Err returns nil while the hold lasts, then why it ended (wrapping [lock.ErrLockLost] or
// [lock.ErrNotHeld]).
func (h *hold) Err() error {
	select {
	case <-h.done:
		return context.Cause(h.ctx)
	default:
		return nil
	}
}

// held is a hold of one mode: the hold, and how its last Unlock gives the lock back.
type held interface {
	lock.Lease
	base() *hold
	// unlock gives the lock back after the hold has been released; ctx is fresh and bounded.
	unlock(ctx context.Context) error
}

// reentrant is the hold counting both modes share: one acquisition at a time per lock value,
// holds counted, a lost hold blocking Lock until it is unlocked.
type reentrant struct {
	name    string
	acquire chan struct{}

	mu    sync.Mutex
	cur   held
	holds int
}

func newReentrant(name string) reentrant {
	return reentrant{name: name, acquire: make(chan struct{}, 1)}
}

// lock returns the current hold, counted once more, or takes a new one with take.
func (r *reentrant) lock(ctx context.Context, take func(ctx context.Context) (held, error)) (lock.Lease, error) {
	if l := r.reenter(); l != nil {
		return l, nil
	}
	select {
	case r.acquire <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-r.acquire }()
	if l := r.reenter(); l != nil { // another goroutine sharing this lock value took it meanwhile
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
func (r *reentrant) reenter() held {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil || r.cur.Err() != nil {
		return nil // a lost hold: lock() refuses until it is unlocked
	}
	r.holds++
	return r.cur
}

// lostHold returns the error of a hold that was lost and not yet unlocked.
func (r *reentrant) lostHold() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil {
		return nil
	}
	return fmt.Errorf("pglock: %s: a lost hold was not unlocked yet (%w): call Unlock first", r.name, r.cur.Err())
}

// unlock releases one hold; the last one ends the hold and gives the lock back with a fresh
// context bounded by timeout.
func (r *reentrant) unlock(ctx context.Context) error {
	r.mu.Lock()
	l := r.cur
	if l == nil {
		r.mu.Unlock()
		return nil
	}
	r.holds--
	if r.holds > 0 {
		r.mu.Unlock()
		return nil
	}
	r.cur = nil
	r.mu.Unlock()
	l.base().release()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	return l.unlock(cctx)
}
