package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/internal/obs"
)

// Locker is a lock on one name, on any backend: ZooKeeper (lock/zklock), PostgreSQL
// (lock/pglock), Redis or Redlock (lock/redislock). txkit's components depend on it and on
// [Elector], never on a backend. Every implementation keeps this contract (lock/locktest checks it):
//
//   - Lock blocks until the lock is held or ctx ends; if ctx ends first, nothing is left behind and
//     ctx's error is returned. ctx scopes only the wait: the hold lasts until Unlock or its loss.
//   - TryLock takes a free lock and returns at once, or an error wrapping [ErrLocked].
//   - A Locker value is reentrant (each Lock needs its Unlock; the last one releases); goroutines
//     that must exclude each other need a value each. Unlock of nothing held returns nil, never
//     releases a newer holder's hold, and cleans up with a fresh, bounded context.
//   - A hold can be lost at any time: [Lease.Done] is closed and [Lease.Context] cancelled no
//     later than another owner can take the lock (as far as the backend can tell); Lock then
//     errs until the lost hold is unlocked.
//   - Every hold has a fencing [Token] higher than every earlier hold's of the name.
//
// Implementations are safe for concurrent use by multiple goroutines (they share the hold).
type Locker interface {
	Lock(ctx context.Context) (Lease, error)
	TryLock(ctx context.Context) (Lease, error)
	Unlock(ctx context.Context) error
}

// Lease is one hold of a [Locker]: its fencing token, and how the holder learns that it lost the
// lock. Run the work that needs the lock under Context and send Token with every write it makes
// elsewhere (package fence). Its methods are safe for concurrent use.
type Lease interface {
	// Token returns the fencing token of this hold.
	Token() Token
	// Done returns a channel closed when the hold ends: lost or released.
	Done() <-chan struct{}
	// Context returns a context cancelled when the hold ends; [context.Cause] tells why.
	Context() context.Context
	// Err returns nil while the hold lasts, then why it ended (wrapping [ErrLockLost] or
	// [ErrNotHeld]).
	Err() error
}

// Elector is one candidate in a leader election, on any backend. [NewElection] builds one on a
// [Locker]; each backend has a constructor that does it for its own lock (zklock.NewElector for
// ZooKeeper).
type Elector interface {
	// ID returns the candidate's id.
	ID() string
	// Campaign blocks until the candidate leads or ctx ends (then ctx's error is returned and
	// nothing is left behind). ctx scopes only the wait.
	Campaign(ctx context.Context) (Leadership, error)
	// Leader returns the id of the current leader, or an error wrapping [ErrNoLeader].
	Leader(ctx context.Context) (string, error)
	// RunWhileLeader campaigns, runs fn while leading, and campaigns again when the leadership
	// is lost, until ctx ends (see [Election.RunWhileLeader]).
	RunWhileLeader(ctx context.Context, fn func(ctx context.Context, l Leadership) error) error
}

// Leadership is a won election: the fencing token, and how the leader learns that it lost.
// Leadership can be lost at any time; run leader-only work under Context and fence its writes
// with Token.
type Leadership interface {
	Lease
	// Resign gives up this Leadership; calling it again does nothing and returns the first
	// call's result.
	Resign(ctx context.Context) error
}

// HolderFunc reports the id of the candidate holding an election's lock, or an error wrapping
// [ErrNoLeader] when nobody holds it. A backend gives one to [NewElection].
type HolderFunc func(ctx context.Context) (string, error)

// ElectionOption configures an [Election].
type ElectionOption func(*electionOptions)

type electionOptions struct {
	log     *slog.Logger
	observe func(ctx context.Context) <-chan string
	poll    time.Duration
	reg     prometheus.Registerer // WithElectionRegisterer
}

// Election is the [Elector] of every backend: a leader election on a reentrant [Locker] whose
// holds carry the candidate's id, so the holder leads and a [HolderFunc] can say who that is.
//
// One Election is one candidate. Several components of one process may share it (an outbox
// relay and a coordinator's recovery, say): each Campaign on an Election that leads, or that is
// already waiting, joins that candidacy (the Locker is reentrant), and every Leadership it returns
// carries the same token and ends together; the lock is released when the last of them resigns.
// Election is safe for concurrent use by multiple goroutines.
type Election struct {
	l      Locker
	id     string
	name   string
	holder HolderFunc
	o      electionOptions
	m      *electionMetrics
}

// NewElection returns a candidate with the given id on l. name names the election in errors,
// logs and metrics (a lock path or name); holder reports who leads. observe is the backend's own
// way to watch the leader (ZooKeeper's watches; nil: [Election.Observe] asks holder every 250 ms)
// and log the backend's logger (nil: discard). A nil l or holder, an empty
// id, or a metrics registration clash ([WithElectionRegisterer]) returns an error wrapping
// [ErrInvalidOption].
func NewElection(l Locker, name, id string, holder HolderFunc, observe func(ctx context.Context) <-chan string, log *slog.Logger, opts ...ElectionOption) (*Election, error) {
	if l == nil {
		return nil, fmt.Errorf("lock: election %s: nil Locker: %w", name, ErrInvalidOption)
	}
	if id == "" {
		return nil, fmt.Errorf("lock: elector on %s: empty candidate id: %w", name, ErrInvalidOption)
	}
	if holder == nil {
		return nil, fmt.Errorf("lock: election %s: nil HolderFunc: %w", name, ErrInvalidOption)
	}
	o := electionOptions{log: slog.New(slog.DiscardHandler), observe: observe, poll: 250 * time.Millisecond}
	if log != nil {
		o.log = obs.Logger(log)
	}
	for _, opt := range opts {
		opt(&o)
	}
	m, err := newElectionMetrics(o.reg, name)
	if err != nil {
		return nil, err
	}
	return &Election{l: l, id: id, name: name, holder: holder, o: o, m: m}, nil
}

// ID returns the candidate's id.
func (e *Election) ID() string { return e.id }

// Campaign blocks until the candidate leads or ctx ends (then its place in the election is given
// up and ctx's error returned). It returns the backend's error when its session ends while
// waiting. ctx scopes only the wait. Campaign on a candidate that already leads returns at once
// with a Leadership sharing the lead (the same token); each Leadership must be resigned. After a
// leadership is lost, Campaign returns an error until every Leadership of the lost term has
// resigned ([Election.RunWhileLeader] does this).
func (e *Election) Campaign(ctx context.Context) (Leadership, error) {
	l, err := e.l.Lock(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock: campaign %s on %s: %w", e.id, e.name, err)
	}
	if e.m.elected(l) { // once per term: a Campaign joining the term (a second job) logs nothing
		e.o.log.Info("elected leader", "path", e.name, "id", e.id, "token", l.Token().String())
	}
	return &leadership{Lease: l, e: e}, nil
}

// leadership is a Lease that resigns by unlocking the election's Locker once.
type leadership struct {
	Lease
	e *Election

	resign    sync.Once
	resignErr error
}

// Resign gives up this Leadership. When it was the last one sharing the candidate's lead, the
// lock is released and the next candidate takes over; while others still share it, the
// candidate goes on leading for them.
func (l *leadership) Resign(ctx context.Context) error {
	l.resign.Do(func() {
		if err := l.e.l.Unlock(ctx); err != nil {
			l.resignErr = fmt.Errorf("lock: resign %s: %w", l.e.id, err)
		}
	})
	return l.resignErr
}

// Leader returns the id of the current leader, or an error wrapping [ErrNoLeader] when no
// candidate leads. It blocks for the backend's round trips (bounded by ctx).
func (e *Election) Leader(ctx context.Context) (string, error) { return e.holder(ctx) }

// Observe returns a channel that receives the leader's id each time it changes ("" while nobody
// leads). The channel is closed when ctx ends; an observer must keep reading it.
func (e *Election) Observe(ctx context.Context) <-chan string {
	if e.o.observe != nil {
		return e.o.observe(ctx)
	}
	out := make(chan string)
	go func() {
		defer close(out)
		last := "\x00"
		for ctx.Err() == nil {
			id, err := e.holder(ctx)
			if err == nil || errors.Is(err, ErrNoLeader) {
				if id != last {
					select {
					case out <- id:
						last = id
					case <-ctx.Done():
						return
					}
				}
			}
			if pause(ctx, e.o.poll) != nil {
				return
			}
		}
	}()
	return out
}

// RunWhileLeader campaigns, runs fn while leading, and campaigns again when the leadership is
// lost, until ctx ends; then it resigns and returns nil. fn gets a context cancelled when the
// leadership ends or ctx ends, and must return soon after. If fn returns an error while still leading,
// RunWhileLeader resigns and returns that error; if fn returns nil while still leading, it
// resigns and campaigns again. Campaign failures (a lost session, a server down) are retried with
// a pause; an error wrapping [ErrClosed] is returned.
func (e *Election) RunWhileLeader(ctx context.Context, fn func(ctx context.Context, l Leadership) error) error {
	for ctx.Err() == nil {
		l, err := e.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, ErrClosed) {
				return err
			}
			e.o.log.Warn("campaign failed; retrying", "path", e.name, "id", e.id, "err", err)
			if pause(ctx, 200*time.Millisecond) != nil {
				return nil
			}
			continue
		}
		// fn's context ends with the leadership or with ctx, whichever comes first.
		fctx, fcancel := context.WithCancelCause(l.Context())
		stop := context.AfterFunc(ctx, func() { fcancel(context.Cause(ctx)) })
		ferr := fn(fctx, l)
		stop()
		fcancel(nil)
		lost := l.Err()
		rerr := l.Resign(context.WithoutCancel(ctx))
		if rerr != nil {
			e.o.log.Warn("resign failed", "path", e.name, "id", e.id, "err", rerr)
		}
		if ctx.Err() != nil {
			return nil
		}
		if lost != nil {
			e.o.log.Warn("leadership lost; campaigning again", "path", e.name, "id", e.id, "err", lost)
			continue
		}
		if ferr != nil {
			return fmt.Errorf("lock: leader %s on %s: %w", e.id, e.name, ferr)
		}
	}
	return nil
}
