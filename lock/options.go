package lock

import (
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/go-zookeeper/zk"
)

// SessionOption configures a [Session].
type SessionOption func(*sessionOptions)

type sessionOptions struct {
	timeout time.Duration
	log     *slog.Logger
	dialer  zk.Dialer
}

func defaultSessionOptions() sessionOptions {
	return sessionOptions{
		timeout: 10 * time.Second,
		log:     slog.New(slog.DiscardHandler),
		dialer:  net.DialTimeout,
	}
}

// WithSessionTimeout sets the ZooKeeper session timeout the Session asks for (default 10 s; the
// server clamps it to its own minimum and maximum, 2 and 20 ticks). A holder whose session ends
// learns it no later than this.
func WithSessionTimeout(d time.Duration) SessionOption {
	return func(o *sessionOptions) { o.timeout = d }
}

// WithLogger sets the logger (default: discard). go-zookeeper's own log lines go to it at debug level.
func WithLogger(l *slog.Logger) SessionOption {
	return func(o *sessionOptions) {
		if l != nil {
			o.log = l
		}
	}
}

// WithDialer sets how connections to the ZooKeeper servers are made (default net.DialTimeout).
// Tests use it to put a proxy in between.
func WithDialer(d zk.Dialer) SessionOption {
	return func(o *sessionOptions) {
		if d != nil {
			o.dialer = d
		}
	}
}

func (o sessionOptions) validate() error {
	if o.timeout < 100*time.Millisecond {
		return fmt.Errorf("lock: session timeout %v is below 100ms: %w", o.timeout, ErrInvalidOption)
	}
	return nil
}

// Option configures a [Mutex] or an [Elector].
type Option func(*options)

type options struct {
	unfair    bool
	data      []byte
	nodeWatch bool
}

func defaultOptions() options { return options{} }

// WithUnfair selects the simple unfair recipe: one ephemeral node that every waiter watches, so
// every release wakes every waiter (the herd effect) and the order of acquisition is arbitrary.
// It is kept for comparison and for locks with very few contenders. The default is the fair recipe.
// Unfair locks are not Curator-compatible.
func WithUnfair() Option { return func(o *options) { o.unfair = true } }

// WithData sets the data stored in the lock node (the [Elector] stores the candidate's id there).
func WithData(b []byte) Option {
	return func(o *options) { o.data = append([]byte(nil), b...) }
}

// WithNodeWatch makes a holder watch its own node, so that its deletion by anyone ends the hold at
// once. It costs one more ZooKeeper round trip per acquisition; the [Elector] always uses it.
func WithNodeWatch() Option { return func(o *options) { o.nodeWatch = true } }
