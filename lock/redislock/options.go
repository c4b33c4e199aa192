package redislock

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/lock"
)

// MaxNameLen is the longest lock name, in bytes, that NewMutex and NewElector accept. A name
// becomes part of two Redis keys and the payload of every release message; 255 bytes keeps the
// keys short enough to log and index, and is far more than a path-like name needs.
const MaxNameLen = 255

// MaxDataLen is the longest holder data, in bytes, that [WithData] accepts (it is stored in the
// lock key's value beside the hold's uuid, and read back by [Client.NewElector]'s Leader).
const MaxDataLen = 1024

// Option configures a [Client] or a [Redlock].
type Option func(*options)

type options struct {
	ttl        time.Duration
	renewEvery time.Duration // tests set it (export_test.go)
	renewSet   bool          // false: ttl/3
	prefix     string
	fallback   time.Duration // longest wait for a release message; tests set it (export_test.go)
	drift      time.Duration // clock drift allowance; tests set it (export_test.go)
	driftSet   bool          // false: 1% of ttl + 2 ms
	log        *slog.Logger
}

func defaultOptions() options {
	return options{
		ttl:      10 * time.Second,
		prefix:   "txkit:lock:",
		fallback: time.Second,
		log:      slog.New(slog.DiscardHandler),
	}
}

// WithTTL sets how long a hold lasts in Redis without a renewal (default 10 s): the PX of the SET
// and of every PEXPIRE. A holder that crashes blocks the lock for at most this long. It must be at
// least 1 ms (Redis counts in milliseconds) and the watchdog renews it every third of it.
func WithTTL(d time.Duration) Option {
	return func(o *options) { o.ttl = d }
}

// WithPrefix sets the prefix of every key and of the release channel (default "txkit:lock:").
// Every process that shares a lock must use the same prefix.
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithLogger sets the logger (default: discard). Lost holds are logged at Warn, unreachable
// instances at Warn, a server whose maxmemory-policy cannot be read at Warn, the rest at Debug.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = obs.Logger(l)
		}
	}
}

// finish fills in the defaults that depend on the TTL and checks the result.
func (o *options) finish(what string) error {
	if len(o.prefix) > MaxNameLen {
		return fmt.Errorf("%s: prefix of %d bytes, more than %d: %w", what, len(o.prefix), MaxNameLen, lock.ErrInvalidOption)
	}
	if o.ttl < time.Millisecond {
		return fmt.Errorf("%s: TTL %v: want at least 1ms: %w", what, o.ttl, lock.ErrInvalidOption)
	}
	if o.fallback <= 0 {
		return fmt.Errorf("%s: fallback check %v is not positive: %w", what, o.fallback, lock.ErrInvalidOption)
	}
	if o.driftSet && o.drift < 0 {
		return fmt.Errorf("%s: clock drift %v is negative: %w", what, o.drift, lock.ErrInvalidOption)
	}
	if !o.driftSet {
		o.drift = o.ttl/100 + 2*time.Millisecond
	}
	if o.renewSet && o.renewEvery <= 0 {
		return fmt.Errorf("%s: renewal interval %v is not positive: %w", what, o.renewEvery, lock.ErrInvalidOption)
	}
	if !o.renewSet {
		o.renewEvery = o.ttl / 3
	}
	if o.renewEvery >= o.ttl {
		return fmt.Errorf("%s: renewal interval %v is not below the TTL %v: %w", what, o.renewEvery, o.ttl, lock.ErrInvalidOption)
	}
	if o.renewEvery >= o.ttl-o.drift {
		return fmt.Errorf("%s: renewal interval %v is not below the TTL %v minus the clock drift allowance %v: %w",
			what, o.renewEvery, o.ttl, o.drift, lock.ErrInvalidOption)
	}
	return nil
}

// instanceTimeout is how long one acquisition, renewal or release waits for an instance: a tenth
// of the TTL, at least 10 ms and at most 1 s — much less than the TTL, so that an instance that
// does not answer costs Redlock little of the hold's validity.
func (o *options) instanceTimeout() time.Duration {
	return min(max(o.ttl/10, 10*time.Millisecond), time.Second)
}

// MutexOption configures a [Mutex] or a [RedlockMutex].
type MutexOption func(*mutexOptions)

type mutexOptions struct {
	data string
}

// WithData sets the holder data stored with each hold (default empty): [Client.NewElector] stores
// the candidate's id there so that Leader can report it. At most [MaxDataLen] bytes.
func WithData(data string) MutexOption { return func(o *mutexOptions) { o.data = data } }

// checkName refuses names NewMutex cannot use.
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("redislock: empty lock name: %w", lock.ErrInvalidOption)
	case len(name) > MaxNameLen:
		return fmt.Errorf("redislock: lock name of %d bytes, more than %d: %w", len(name), MaxNameLen, lock.ErrInvalidOption)
	}
	return nil
}
