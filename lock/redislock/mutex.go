package redislock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/txkit/txkit/lock"
)

// mutex is the lock recipe behind [Mutex] and [RedlockMutex]: reentrant holds counted per value,
// one acquisition at a time per value, waits on the release channel, a lease per hold.
type mutex struct {
	g    *group
	name string
	data string

	r *lock.Reentrant // the holds of this value
}

func (g *group) newMutex(name string, opts ...MutexOption) (*mutex, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	var o mutexOptions
	for _, opt := range opts {
		opt(&o)
	}
	if len(o.data) > MaxDataLen {
		return nil, fmt.Errorf("%s: lock %s: holder data of %d bytes, more than %d: %w", g.what, name, len(o.data), MaxDataLen, lock.ErrInvalidOption)
	}
	return &mutex{g: g, name: name, data: o.data, r: lock.NewReentrant(name)}, nil
}

// Lock, TryLock and Unlock make *mutex a [lock.Locker] (the one the electors use); [Mutex] and
// [RedlockMutex] document them.

func (m *mutex) Lock(ctx context.Context) (lock.Lease, error) {
	return m.r.Lock(ctx, func(ctx context.Context) (lock.Lease, error) { return nilLease(m.take(ctx, true)) })
}

func (m *mutex) TryLock(ctx context.Context) (lock.Lease, error) {
	return m.r.Lock(ctx, func(ctx context.Context) (lock.Lease, error) { return nilLease(m.take(ctx, false)) })
}

// nilLease keeps a nil *lease from becoming a non-nil lock.Lease.
func nilLease(l *lease, err error) (lock.Lease, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}

// take acquires the lock: once (TryLock), or until it is held or ctx ends (Lock), after checking
// the servers' maxmemory-policy ([group.checkEviction]). A waiter subscribes to the release
// channel before its first attempt, so a release after a failed attempt always wakes it; it also
// tries again when the keys it waits for expire, and at the latest after the fallback check.
func (m *mutex) take(ctx context.Context, wait bool) (*lease, error) {
	g := m.g
	if err := g.checkEviction(ctx); err != nil {
		return nil, fmt.Errorf("%s: lock %s: %w", g.what, m.name, err)
	}
	var wake chan struct{}
	if wait {
		wake = make(chan struct{}, 1)
		stop := g.subscribe(ctx, m.name, wake)
		defer stop()
	}
	unavailable := lock.Backoff{Min: 50 * time.Millisecond, Max: time.Second}
	for {
		if g.isClosed() {
			return nil, fmt.Errorf("%s: lock %s: %w", g.what, m.name, lock.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		value := newValue(uuid.NewString(), m.data)
		a := g.acquire(ctx, m, value)
		if a.ok {
			return m.newLease(value, a)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var d time.Duration
		switch {
		case a.err != nil && !wait:
			return nil, fmt.Errorf("%s: lock %s: %w", g.what, m.name, a.err)
		case a.err != nil:
			if unavailable.Failures() == 0 {
				g.o.log.Warn("lock: Redis unavailable; retrying", "name", m.name, "err", a.err)
			}
			d = unavailable.Next()
		case !wait:
			return nil, fmt.Errorf("%s: lock %s: %w", g.what, m.name, lock.ErrLocked)
		default:
			unavailable.Reset()
			d = a.wait
		}
		t := time.NewTimer(d)
		select {
		case <-wake:
			if ctx.Err() != nil || g.isClosed() {
				signal(wake) // unused: stop hands it to the next waiter
			}
		case <-t.C:
		case <-ctx.Done():
		case <-g.ctx.Done():
		}
		t.Stop()
	}
}

// Unlock releases one hold; see [Mutex.Unlock].
func (m *mutex) Unlock(ctx context.Context) error {
	l, ok := m.r.Release().(*lease)
	if !ok {
		return nil
	}
	l.end(fmt.Errorf("%w: released by Unlock", lock.ErrNotHeld))
	if m.g.isClosed() {
		return nil // Close released the hold's keys (or they expire, if it was lost)
	}
	if err := m.g.release(ctx, m.name, l.value, nil, true); err != nil {
		return fmt.Errorf("%s: unlock %s (the key expires with its TTL): %w", m.g.what, m.name, err)
	}
	return nil
}

// lease is one hold: its value, its fencing token, its local deadline and its watchdog.
type lease struct {
	*lock.Hold
	m     *mutex
	value string

	dmu      sync.Mutex
	deadline time.Time // monotonic: when the last successful SET/PEXPIRE was sent + TTL − drift
	timer    *time.Timer
	ended    bool
}

// newLease starts the hold's deadline and watchdog.
func (m *mutex) newLease(value string, a attempt) (*lease, error) {
	g := m.g
	l := &lease{Hold: lock.NewHold(a.token), m: m, value: value}
	if !g.track(l) {
		_ = g.release(context.Background(), m.name, value, nil, true)
		return nil, fmt.Errorf("%s: lock %s: %w", g.what, m.name, lock.ErrClosed)
	}
	l.dmu.Lock()
	l.deadline = a.start.Add(g.o.ttl - g.o.drift)
	l.timer = time.AfterFunc(time.Until(l.deadline), l.expire)
	l.dmu.Unlock()
	g.goOwned(l.watchdog) // false only when closed: close ends the hold
	return l, nil
}

// watchdog renews the hold every renewal interval (Redisson's watchdog) until it ends. A renewal
// that finds the key gone or not ours on so many instances that no majority holds it ends the hold
// at once; failed renewals are retried sooner, and if none succeeds before the local deadline,
// expire ends the hold then.
func (l *lease) watchdog() {
	g := l.m.g
	t := time.NewTimer(g.o.renewEvery)
	defer t.Stop()
	for {
		select {
		case <-l.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		ctx, cancel := context.WithDeadline(l.Context(), l.currentDeadline())
		ok, lost, err := g.extend(ctx, l.m, l.value)
		cancel()
		next := g.o.renewEvery
		switch {
		case ok:
			l.renewed(sent)
		case lost:
			l.end(fmt.Errorf("%w: %s: renewal found the key gone or held by another owner", lock.ErrLockLost, l.m.name))
			return
		default:
			g.o.log.Warn("lock: renewal failed; retrying until the local deadline", "name", l.m.name,
				"token", l.Token().String(), "deadline_in", time.Until(l.currentDeadline()).Round(time.Millisecond), "err", err)
			next = max(g.o.renewEvery/10, 10*time.Millisecond)
		}
		t.Reset(next)
	}
}

func (l *lease) currentDeadline() time.Time {
	l.dmu.Lock()
	defer l.dmu.Unlock()
	return l.deadline
}

// renewed moves the local deadline to sent + TTL − drift.
func (l *lease) renewed(sent time.Time) {
	o := l.m.g.o
	l.dmu.Lock()
	defer l.dmu.Unlock()
	if l.ended {
		return
	}
	if d := sent.Add(o.ttl - o.drift); d.After(l.deadline) {
		l.deadline = d
		l.timer.Reset(time.Until(d))
	}
}

// expire ends the hold when its local deadline has passed without a renewal.
func (l *lease) expire() {
	l.dmu.Lock()
	if l.ended {
		l.dmu.Unlock()
		return
	}
	if left := time.Until(l.deadline); left > 0 { // renewed meanwhile
		l.timer.Reset(left)
		l.dmu.Unlock()
		return
	}
	l.dmu.Unlock()
	l.end(fmt.Errorf("%w: %s: not renewed before the local deadline (TTL %v minus drift %v after the last renewal was sent)",
		lock.ErrLockLost, l.m.name, l.m.g.o.ttl, l.m.g.o.drift))
}

// end marks the hold over with cause.
func (l *lease) end(cause error) {
	l.dmu.Lock()
	l.ended = true
	if l.timer != nil {
		l.timer.Stop()
	}
	l.dmu.Unlock()
	if !l.End(cause) {
		return
	}
	l.m.g.untrack(l)
	if !errors.Is(cause, lock.ErrNotHeld) {
		l.m.g.o.log.Warn("lock lost", "name", l.m.name, "token", l.Token().String(), "err", cause)
	}
}

var _ lock.Locker = (*mutex)(nil)
