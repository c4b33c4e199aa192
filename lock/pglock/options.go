package pglock

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/lock"
)

// MaxNameLen is the longest lock name, in bytes, that the constructors accept. The name is the
// table's primary key (a btree entry is limited to about 2.7 kB) and the payload of the release
// notification (limited to 8000 bytes); 255 bytes leaves both far away.
const MaxNameLen = 255

const (
	table    = "txkit_locks"
	sequence = "txkit_lock_tokens"

	pgMaxIdent = 63 // PostgreSQL's NAMEDATALEN - 1

	defaultTTL      = 10 * time.Second
	defaultFallback = time.Second
	minTTL          = time.Millisecond
)

// Option configures a [Client].
type Option func(*options)

type options struct {
	schema   string
	ttl      time.Duration
	renew    time.Duration // tests set it (export_test.go); unset: ttl/3
	renewSet bool
	fallback time.Duration // a waiter's retry without a notification; tests set it (export_test.go)
	log      *slog.Logger
}

func defaultOptions() options {
	return options{ttl: defaultTTL, fallback: defaultFallback, log: slog.New(slog.DiscardHandler)}
}

// WithSchema sets the PostgreSQL schema of the lock table and the token sequence (default: none,
// so the connections' search_path decides, as for every txkit package). [Client.Migrate] creates
// the schema if it does not exist.
func WithSchema(name string) Option { return func(o *options) { o.schema = name } }

// WithTTL sets how long a lease row lives without renewal (default 10 s, at least 1 ms). It is
// how long a crashed holder keeps everyone out; the holder renews it in the background every
// third of it (in advisory mode, checks its connection as often).
func WithTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithLogger sets the logger (default: discard). Lost leases are logged at Warn.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = obs.Logger(l)
		}
	}
}

// margin is how long before the PostgreSQL row can expire a holder considers its lease lost.
func (o options) margin() time.Duration { return o.ttl / 10 }

func (o *options) validate() error {
	if o.schema != "" {
		if err := pgutil.CheckText(o.schema, pgMaxIdent); err != nil {
			return fmt.Errorf("pglock: schema %q: %w: %w", o.schema, err, lock.ErrInvalidOption)
		}
	}
	if o.ttl < minTTL {
		return fmt.Errorf("pglock: TTL %v: want at least %v: %w", o.ttl, minTTL, lock.ErrInvalidOption)
	}
	if !o.renewSet {
		o.renew = o.ttl / 3
	}
	if o.renew <= 0 {
		return fmt.Errorf("pglock: renew interval %v: want a positive duration: %w", o.renew, lock.ErrInvalidOption)
	}
	if o.renew >= o.ttl-o.margin() {
		return fmt.Errorf("pglock: renew interval %v: must be shorter than 9/10 of the TTL %v: %w", o.renew, o.ttl, lock.ErrInvalidOption)
	}
	if o.fallback <= 0 {
		return fmt.Errorf("pglock: fallback check %v: want a positive duration: %w", o.fallback, lock.ErrInvalidOption)
	}
	return nil
}

// MutexOption configures a [Mutex].
type MutexOption func(*mutexOptions)

type mutexOptions struct {
	data string
}

// WithData sets the data stored in the lease row while the Mutex holds the lock (default empty):
// what others read to learn who holds it, such as a candidate's id (see [Client.NewElector]). At
// most [MaxNameLen] bytes of valid UTF-8 without NUL.
func WithData(s string) MutexOption { return func(o *mutexOptions) { o.data = s } }

func checkName(name string) error {
	if err := pgutil.CheckText(name, MaxNameLen); err != nil {
		return fmt.Errorf("pglock: lock name %q: %w: %w", name, err, lock.ErrInvalidOption)
	}
	return nil
}
