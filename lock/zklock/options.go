package zklock

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/lock"
)

// SessionOption configures a [Session].
type SessionOption func(*sessionOptions)

type sessionOptions struct {
	timeout time.Duration
	log     *slog.Logger
	dialer  zk.Dialer
	auth    []authCred
	acl     []zk.ACL // nil: CreatorACL(false), or the world's with insecure
	// insecure: WithInsecureWorldACL was given, so nodes may be world-writable.
	insecure bool
}

// authCred is one AddAuth a Session makes on every ZooKeeper connection it opens.
type authCred struct {
	scheme string
	cred   []byte
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
			o.log = obs.Logger(l)
		}
	}
}

// WithDialer sets how connections to the ZooKeeper servers are made (default net.DialTimeout).
// A dialer that returns a *tls.Conn encrypts and authenticates the connection (see the package
// documentation); tests use it to put a proxy in between.
func WithDialer(d zk.Dialer) SessionOption {
	return func(o *sessionOptions) {
		if d != nil {
			o.dialer = d
		}
	}
}

// WithDigestAuth makes the Session authenticate as user with password (ZooKeeper's "digest"
// scheme) on every connection and every new ZooKeeper session it opens, before any lock recipe
// uses it. The nodes the Session creates then get [CreatorACL](false) unless [WithACL] says
// otherwise: only sessions that authenticate as the same user can read or write them. The ensemble
// needs no configuration for it. The password travels in clear text unless the connection is TLS
// ([WithDialer]). user must be non-empty and contain no ':'.
func WithDigestAuth(user, password string) SessionOption {
	return func(o *sessionOptions) {
		o.auth = append(o.auth, authCred{scheme: "digest", cred: []byte(user + ":" + password)})
		if user == "" || strings.Contains(user, ":") {
			o.auth[len(o.auth)-1].scheme = "" // refused by validate
		}
	}
}

// WithACL sets the ACL of every node the Session's lock recipes create: the lock path and its
// missing parents, and the contenders' nodes (default: [CreatorACL](false)). Nodes that already
// exist keep their ACL. An ACL that names the "auth" scheme (such as [CreatorACL]) needs
// credentials ([WithDigestAuth]); one that lets the world do more than read needs
// [WithInsecureWorldACL].
func WithACL(acl ...zk.ACL) SessionOption {
	return func(o *sessionOptions) { o.acl = append([]zk.ACL{}, acl...) } // non-nil: set
}

// WithInsecureWorldACL lets the Session run without credentials and create its nodes with
// zk.WorldACL(zk.PermAll), Apache Curator's default (unless [WithACL] sets another ACL): anyone
// who reaches the ensemble may then create and delete nodes under a lock path, and so take or
// break its locks, hold elections, or count as a member. Without it, [NewSession] refuses to run
// without credentials ([ErrNoCredentials]). Use it only on an ensemble that only trusted clients
// reach, or for a Session that creates no node (one that only reads).
func WithInsecureWorldACL() SessionOption {
	return func(o *sessionOptions) { o.insecure = true }
}

// CreatorACL returns an ACL that gives every permission to the identities the creating session
// authenticated as (ZooKeeper's "auth" scheme), and — with worldRead — read access to everyone, so
// that monitoring (or [lock.Elector.Leader] from a session without credentials) can see who holds a lock.
// CreatorACL(false) is the default of a Session with credentials; use it with [WithACL].
func CreatorACL(worldRead bool) []zk.ACL {
	acl := zk.AuthACL(zk.PermAll)
	if worldRead {
		acl = append(acl, zk.WorldACL(zk.PermRead)...)
	}
	return acl
}

func (o sessionOptions) validate() error {
	if o.timeout < 100*time.Millisecond {
		return fmt.Errorf("zklock: session timeout %v is below 100ms: %w", o.timeout, lock.ErrInvalidOption)
	}
	for _, a := range o.auth {
		if user, _, ok := strings.Cut(string(a.cred), ":"); a.scheme == "digest" && (!ok || user == "") {
			a.scheme = ""
		}
		if a.scheme == "" {
			return fmt.Errorf("zklock: digest auth: the user is empty or contains ':': %w", lock.ErrInvalidOption)
		}
	}
	if o.acl != nil && len(o.acl) == 0 {
		return fmt.Errorf("zklock: empty ACL: %w", lock.ErrInvalidOption)
	}
	for _, a := range o.acl {
		if a.Scheme == "auth" && len(o.auth) == 0 {
			return fmt.Errorf("zklock: ACL with the \"auth\" scheme: %w (WithDigestAuth): %w", ErrNoCredentials, lock.ErrInvalidOption)
		}
		if a.Perms&zk.PermAll == 0 || a.Scheme == "" {
			return fmt.Errorf("zklock: ACL entry %+v: %w", a, lock.ErrInvalidOption)
		}
		if a.Scheme == "world" && a.Perms&^zk.PermRead != 0 && !o.insecure {
			return fmt.Errorf("zklock: ACL entry %+v lets anyone write (WithInsecureWorldACL allows it): %w", a, lock.ErrInvalidOption)
		}
	}
	if o.acl == nil && len(o.auth) == 0 && !o.insecure {
		return fmt.Errorf("%w: the nodes would be writable by anyone; give WithDigestAuth, or WithInsecureWorldACL for an ensemble only trusted clients reach: %w",
			ErrNoCredentials, lock.ErrInvalidOption)
	}
	return nil
}

// nodeACL returns the ACL of the nodes the Session creates: WithACL's, else CreatorACL(false)
// with credentials, else (WithInsecureWorldACL) the world's.
func (o sessionOptions) nodeACL() []zk.ACL {
	switch {
	case o.acl != nil:
		return o.acl
	case len(o.auth) > 0:
		return CreatorACL(false)
	default:
		return zk.WorldACL(zk.PermAll)
	}
}

// Option configures a [Mutex], or tells [Session.Inspector] which recipe it reads.
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

// WithData sets the data stored in the lock node (the [lock.Elector] stores the candidate's id there).
func WithData(b []byte) Option {
	return func(o *options) { o.data = append([]byte(nil), b...) }
}

// withNodeWatch makes a holder watch its own node, so that its deletion by anyone ends the hold at
// once. It costs one more ZooKeeper round trip per acquisition; the [lock.Elector] always uses it.
func withNodeWatch() Option { return func(o *options) { o.nodeWatch = true } }
