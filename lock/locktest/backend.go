package locktest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/txkit/txkit/lock"
)

// Backend is a lock backend under test. Its fields are read, never changed, by the suite.
type Backend struct {
	// Name names the backend in subtests and tells [RunWorker]'s build function which backend to
	// build ("zk", "pglock-lease", "redlock", ...).
	Name string
	// Config is everything beside Name that a worker process needs to build the same Backend: a
	// URL, server addresses, a key prefix or path root unique to the test. Worker processes get
	// it in their environment, so it must be a string an environment variable can carry.
	Config string
	// Expiry is how long after its holder dies (SIGKILL: no release, no goodbye) another owner can
	// take the lock: the lease TTL, or the ZooKeeper session timeout. Tests that wait for an
	// expiry allow Expiry + 1 s. Keep it short in tests (2-3 s).
	Expiry time.Duration
	// Connect opens what one process would have: a connection (pool, client, session) to the
	// server, from which that process's Lockers and Electors are made. It may be left nil when
	// ConnectVia is set (then Connect is ConnectVia with a plain dialer).
	Connect func(ctx context.Context) (*Conn, error)
	// ConnectVia, when set, opens a Conn as Connect does, with every connection to the server
	// made by dial (pgx: ConnConfig.DialFunc; go-redis: Options.Dialer; ZooKeeper:
	// zklock.WithDialer). The Partition subtest uses it to cut a holder off from the server: what
	// goes through the connections is dropped, but the sockets stay healthy (TCP keepalives are
	// still answered). Leave it nil for a backend whose server learns of a silent client only
	// from TCP (a session lock such as pg_advisory_lock).
	ConnectVia func(ctx context.Context, dial DialFunc) (*Conn, error)
	// InspectorTokenAbove, when set, lets [Conn.Inspector] list a holder with a token above its
	// Lease's (Redlock: an instance that granted a hold after the majority had decided it may
	// hold a higher counter); by default the two must be equal.
	InspectorTokenAbove bool
}

// Conn is one process's connection to a backend, as [Backend.Connect] opens it.
type Conn struct {
	// Locker returns a new Locker on the lock called name, on this connection. Each call returns
	// a distinct owner: two Lockers of one Conn exclude each other.
	Locker func(name string) (lock.Locker, error)
	// Elector returns a new candidate with the given id in the election called name, on this
	// connection. When nil, the elector tests are not run for the backend.
	Elector func(name, id string) (lock.Elector, error)
	// Inspector reads the holder and waiters of this connection's locks and elections, by the
	// names Locker and Elector take (map them as they do). When nil, the Inspector test is not
	// run for the backend.
	Inspector lock.Inspector
	// Close closes the connection. Holds made through it end (they are lost, or released).
	Close func() error
}

func (b Backend) validate() error {
	switch {
	case b.Name == "":
		return errors.New("locktest: Backend.Name is empty")
	case b.Connect == nil && b.ConnectVia == nil:
		return fmt.Errorf("locktest: backend %s: Backend.Connect and ConnectVia are nil", b.Name)
	case b.Expiry <= 0:
		return fmt.Errorf("locktest: backend %s: Backend.Expiry %v is not positive", b.Name, b.Expiry)
	}
	return nil
}

// connect opens a Conn and checks that it is complete.
func (b Backend) connect(ctx context.Context) (*Conn, error) {
	var c *Conn
	var err error
	if b.Connect != nil {
		c, err = b.Connect(ctx)
	} else {
		var d net.Dialer
		c, err = b.ConnectVia(ctx, d.DialContext)
	}
	if err != nil {
		return nil, fmt.Errorf("locktest: connect %s: %w", b.Name, err)
	}
	if c == nil || c.Locker == nil || c.Close == nil {
		if c != nil && c.Close != nil {
			_ = c.Close()
		}
		return nil, fmt.Errorf("locktest: backend %s: Connect returned a Conn without Locker or Close", b.Name)
	}
	return c, nil
}
