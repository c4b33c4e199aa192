package pglock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/txkit/txkit/lock"
)

// hold is one hold of a lock, in either mode: the [lock.Hold] (token, Done, Context, Err) and how
// its monitor stops. It implements [lock.Lease].
type hold struct {
	*lock.Hold
	name string
	log  *slog.Logger

	released chan struct{} // closed by the last Unlock: the monitor stops
	relOnce  sync.Once
	stopped  chan struct{} // closed when the monitor has returned
}

func newHold(name string, tok lock.Token, log *slog.Logger) *hold {
	return &hold{Hold: lock.NewHold(tok), name: name, log: log, released: make(chan struct{}), stopped: make(chan struct{})}
}

// end marks the hold over with cause.
func (h *hold) end(cause error) {
	if h.End(cause) && !errors.Is(cause, lock.ErrNotHeld) {
		h.log.Warn("lock lost", "lock", h.name, "token", h.Token().String(), "err", cause)
	}
}

// release ends the hold as released by Unlock and stops its monitor.
func (h *hold) release() {
	h.relOnce.Do(func() { close(h.released) })
	h.end(fmt.Errorf("%w: released by Unlock", lock.ErrNotHeld))
}

// held is a hold of one mode: the hold, and how its last Unlock gives the lock back.
type held interface {
	lock.Lease
	base() *hold
	// unlock gives the lock back after the hold has been released; ctx is fresh and bounded.
	unlock(ctx context.Context) error
}

// take adapts a mode's take to [lock.Reentrant.Lock].
func take(f func(ctx context.Context, wait bool) (held, error), wait bool) func(ctx context.Context) (lock.Lease, error) {
	return func(ctx context.Context) (lock.Lease, error) {
		l, err := f(ctx, wait)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
}

// unlock counts one Unlock on r; the last one ends the hold and gives the lock back with a fresh
// context bounded by cleanupTimeout.
func unlock(ctx context.Context, r *lock.Reentrant) error {
	l, ok := r.Release().(held)
	if !ok {
		return nil
	}
	l.base().release()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	return l.unlock(cctx)
}
