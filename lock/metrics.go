package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/internal/obs"
)

// The backend label values [Instrument] accepts.
var backends = map[string]bool{"zookeeper": true, "postgres": true, "redis": true, "redlock": true}

// Instrument returns l with Prometheus metrics, registered on reg (nil: counted, not exposed),
// labelled with backend, one of "zookeeper", "postgres", "redis" and "redlock":
//
//   - txkit_lock_acquisitions_total{backend} (counter): Lock and TryLock calls that returned a
//     hold (a reentrant one included).
//   - txkit_lock_wait_seconds{backend} (histogram): how long those calls took, the wait for the
//     lock included.
//   - txkit_lock_session_losses_total{backend} (counter): holds lost before their Unlock — a
//     ZooKeeper session expired, a lease not renewed in time, a key gone (the hold ended with an
//     error wrapping [ErrLockLost]). A hold ended by closing the backend's client ([ErrClosed]) is
//     not counted.
//
// The returned Locker keeps l's contract and is safe for concurrent use as l is; Locker values
// instrumented on one registry share the series. Instrument blocks on nothing. It returns an error
// wrapping [ErrInvalidOption] for a nil l, another backend name, or a metric of the same name
// already registered on reg with another type or labels.
func Instrument(l Locker, backend string, reg prometheus.Registerer) (Locker, error) {
	if l == nil {
		return nil, fmt.Errorf("lock: instrument: nil Locker: %w", ErrInvalidOption)
	}
	if !backends[backend] {
		return nil, fmt.Errorf("lock: instrument: backend %q is not zookeeper, postgres, redis or redlock: %w", backend, ErrInvalidOption)
	}
	name := func(n string) string { return prometheus.BuildFQName(obs.Namespace, "lock", n) }
	acq, err := obs.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("acquisitions_total"),
		Help: "Lock and TryLock calls that returned a hold, by backend."}, []string{"backend"}))
	if err != nil {
		return nil, fmt.Errorf("lock: instrument: %w: %w", err, ErrInvalidOption)
	}
	wait, err := obs.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name("wait_seconds"),
		Help: "Time from Lock (or TryLock) to the hold, in seconds, by backend.", Buckets: obs.DurationBuckets()},
		[]string{"backend"}))
	if err != nil {
		return nil, fmt.Errorf("lock: instrument: %w: %w", err, ErrInvalidOption)
	}
	losses, err := obs.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("session_losses_total"),
		Help: "Holds lost before their Unlock (session expired, lease not renewed, key gone), by backend."}, []string{"backend"}))
	if err != nil {
		return nil, fmt.Errorf("lock: instrument: %w: %w", err, ErrInvalidOption)
	}
	return &instrumented{l: l, acq: acq.WithLabelValues(backend), wait: wait.WithLabelValues(backend),
		losses: losses.WithLabelValues(backend)}, nil
}

// instrumented is a Locker that counts its acquisitions, their wait and its lost holds.
type instrumented struct {
	l      Locker
	acq    prometheus.Counter
	wait   prometheus.Observer
	losses prometheus.Counter

	mu      sync.Mutex
	watched Token // the token of the last hold watched for a loss
	any     bool  // a hold was watched
}

func (i *instrumented) Lock(ctx context.Context) (Lease, error) {
	return i.acquired(time.Now())(i.l.Lock(ctx))
}

func (i *instrumented) TryLock(ctx context.Context) (Lease, error) {
	return i.acquired(time.Now())(i.l.TryLock(ctx))
}

func (i *instrumented) Unlock(ctx context.Context) error { return i.l.Unlock(ctx) }

// acquired returns the function that counts the outcome of an acquisition begun at start, and
// watches a new hold for its loss.
func (i *instrumented) acquired(start time.Time) func(Lease, error) (Lease, error) {
	return func(l Lease, err error) (Lease, error) {
		if err != nil {
			return l, err
		}
		i.acq.Inc()
		i.wait.Observe(time.Since(start).Seconds())
		i.mu.Lock()
		fresh := !i.any || i.watched != l.Token()
		i.watched, i.any = l.Token(), true
		i.mu.Unlock()
		if fresh { // a reentrant hold is the same Lease: watched once
			context.AfterFunc(l.Context(), func() {
				// The lease's context is cancelled with the cause just before its Done closes, so
				// Err may still be nil here: the cause is the reason.
				err := l.Err()
				if err == nil {
					err = context.Cause(l.Context())
				}
				if errors.Is(err, ErrLockLost) && !errors.Is(err, ErrClosed) {
					i.losses.Inc()
				}
			})
		}
		return l, nil
	}
}

// WithElectionRegisterer registers the [Election]'s Prometheus metrics on reg (default: none;
// they are still kept), labelled with the election's name (its lock path or name: elections are
// configured, so the label is bounded):
//
//   - txkit_lock_is_leader{election} (gauge): 1 while this process leads the election, 0
//     otherwise (the number of its candidates that lead, when a process runs several).
//   - txkit_lock_leadership_changes_total{election} (counter): times this process gained the
//     leadership (a Campaign joining a term already won is not counted).
//
// Elections on one registry share the series. A metric of the same name already registered with
// another type or labels makes [NewElection] return an error wrapping [ErrInvalidOption].
func WithElectionRegisterer(reg prometheus.Registerer) ElectionOption {
	return func(o *electionOptions) { o.reg = reg }
}

// electionMetrics is an Election's gauge and counter, and the term they last counted.
type electionMetrics struct {
	leader  prometheus.Gauge
	changes prometheus.Counter

	mu   sync.Mutex
	term Token // the token of the last term counted
	any  bool  // a term was counted
}

func newElectionMetrics(reg prometheus.Registerer, election string) (*electionMetrics, error) {
	name := func(n string) string { return prometheus.BuildFQName(obs.Namespace, "lock", n) }
	leader, err := obs.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name("is_leader"),
		Help: "1 while this process leads the election, 0 otherwise."}, []string{"election"}))
	if err != nil {
		return nil, fmt.Errorf("lock: election %s: metrics: %w: %w", election, err, ErrInvalidOption)
	}
	changes, err := obs.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("leadership_changes_total"),
		Help: "Times this process gained the leadership of the election."}, []string{"election"}))
	if err != nil {
		return nil, fmt.Errorf("lock: election %s: metrics: %w: %w", election, err, ErrInvalidOption)
	}
	m := &electionMetrics{leader: leader.WithLabelValues(election), changes: changes.WithLabelValues(election)}
	m.leader.Add(0) // the series exists, at 0, before the first term
	return m, nil
}

// elected counts the term of hold l, once per term: the gauge goes up, and back down when the
// hold ends (resigned or lost). It reports whether l began a term (false: a Campaign joined the
// term already counted).
func (m *electionMetrics) elected(l Lease) (fresh bool) {
	m.mu.Lock()
	fresh = !m.any || m.term != l.Token()
	m.term, m.any = l.Token(), true
	m.mu.Unlock()
	if !fresh {
		return false
	}
	m.changes.Inc()
	m.leader.Inc()
	context.AfterFunc(l.Context(), func() { m.leader.Dec() })
	return true
}
