package locktest

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

// DialFunc makes a connection to a server, as pgx's ConnConfig.DialFunc and go-redis's
// Options.Dialer do (ZooKeeper's zk.Dialer takes a timeout instead of a ctx).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// errPartitioned is what a dial returns once the partition is in place.
var errPartitioned = errors.New("locktest: partitioned from the server")

// partition is a network partition between one process's connections and the server: until
// cut, its dial makes ordinary connections; from cut on, everything written to them is dropped,
// nothing more is read from them (a read waits for its deadline or for Close, as on a network
// that lost every packet), and new dials fail. It is made in the client process: the sockets stay
// healthy and the kernel still answers TCP keepalives, so it stands for a partition only to a
// server that notices a silent client by the absence of its messages (a session timeout, a TTL).
type partition struct {
	d   net.Dialer
	cut atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
}

func newPartition() *partition { return &partition{} }

func (p *partition) isCut() bool { return p.cut.Load() }

// start cuts the process off from the server.
func (p *partition) start() { p.cut.Store(true) }

// heal ends the partition. The connections it made are reset (what was dropped meanwhile left
// them in no state to go on), so the clients connect again.
func (p *partition) heal() {
	p.reset()
	p.cut.Store(false)
}

func (p *partition) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if p.isCut() {
		return nil, errPartitioned
	}
	c, err := p.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
	return &partitionedConn{Conn: c, p: p}, nil
}

// reset closes every connection made through the partition, as a network that resets them
// does: what waits on them returns at once.
func (p *partition) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// partitionedConn is a connection that goes silent both ways when its partition is cut.
type partitionedConn struct {
	net.Conn
	p *partition
}

// Read returns what the server sent until the cut; from then on it discards what arrives and
// returns only the connection's errors: its read deadline passing, or Close.
func (c *partitionedConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if !c.p.isCut() {
			return n, err
		}
		if err != nil {
			return 0, err
		}
	}
}

// Write sends b until the cut; from then on it drops it and reports success, as a network that
// loses packets does.
func (c *partitionedConn) Write(b []byte) (int, error) {
	if c.p.isCut() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// testPartition: a holder is cut off from the server (every packet lost, no connection closed),
// so it can neither renew nor release. Its Lease must end — Done closed, Err wrapping
// ErrLockLost — before another owner, already waiting, gets the lock, which must happen within
// Expiry + 1 s of the cut. Then the network comes back: the holder's Locker refuses to Lock until
// its lost hold is unlocked, that Unlock leaves the next owner's hold alone, and once the next
// owner releases, the Locker takes the lock again with a higher token.
func testPartition(t *testing.T, b Backend) {
	name := testenv.Name(t)
	p := newPartition()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	ca, err := b.ConnectVia(ctx, p.dial)
	if err != nil {
		t.Fatalf("ConnectVia: %v", err)
	}
	// When the test ends, the connections are reset (else a Close that says goodbye to the
	// server waits for its own timeouts: pgxpool's is 15 s), then closed.
	closed := make(chan struct{})
	t.Cleanup(func() {
		p.reset()
		go func() {
			defer close(closed)
			_ = ca.Close()
		}()
		select {
		case <-closed:
		case <-time.After(b.Expiry + waitLimit):
			t.Errorf("Close of a partitioned connection did not return within %v", b.Expiry+waitLimit)
		}
	})
	a := newLocker(t, ca, name)
	next := newLocker(t, open(t, b), name)
	la := mustLock(t, a)

	var lostAt time.Time
	lost := make(chan struct{})
	go func() {
		defer close(lost)
		select {
		case <-la.Done():
			lostAt = time.Now()
		case <-t.Context().Done():
		}
	}()
	var doneA bool // la's Done was closed when next got the lock
	got := lockLater(t, next, b.Expiry+waitLimit, func() { doneA = isClosed(la.Done()) })
	cut := time.Now()
	p.start()
	r := <-got
	if r.err != nil {
		t.Fatalf("next owner's Lock after the holder was cut off: %v", r.err)
	}
	took := r.at.Sub(cut)
	if !doneA {
		t.Errorf("the next owner got the lock %v after the cut while the cut-off holder's Done was still open", took)
	}
	select {
	case <-lost:
	case <-time.After(waitLimit):
	}
	if lostAt.IsZero() {
		t.Fatalf("the cut-off holder's lease had not ended %v after the next owner got in", waitLimit)
	}
	wantEnded(t, la, "lease of a cut-off holder", lock.ErrLockLost)
	t.Logf("%s: holder cut off; its lease ended after %v (%v), the next owner got in after %v (Expiry %v)",
		b.Name, lostAt.Sub(cut).Round(time.Millisecond), la.Err(), took.Round(time.Millisecond), b.Expiry)
	if took > b.Expiry+time.Second {
		t.Errorf("the next owner got in after %v, want within Expiry + 1 s = %v", took, b.Expiry+time.Second)
	}
	if !la.Token().Less(r.l.Token()) {
		t.Errorf("next owner's token %s is not above the cut-off holder's %s", r.l.Token(), la.Token())
	}

	p.heal()
	lctx, lcancel := context.WithTimeout(t.Context(), 5*time.Second)
	_, err = a.Lock(lctx)
	lcancel()
	switch {
	case err == nil:
		t.Fatal("Lock on a Locker whose hold was lost and not unlocked succeeded while another owner holds the lock")
	case errors.Is(err, context.DeadlineExceeded):
		t.Fatal("Lock on a Locker whose hold was lost and not unlocked waited, instead of returning an error")
	}
	if err := a.Unlock(t.Context()); err != nil {
		t.Logf("Unlock of the lost hold: %v", err)
	}
	// The Locker reconnects; until it can ask the server, TryLock fails otherwise than ErrLocked.
	var last error
	for deadline := time.Now().Add(waitLimit); ; {
		l, err := a.TryLock(t.Context())
		if err == nil {
			t.Fatalf("TryLock took the lock (token %s) while the next owner holds it: the lost hold's Unlock released a newer hold", l.Token())
		}
		if errors.Is(err, lock.ErrLocked) {
			break
		}
		if last = err; time.Now().After(deadline) {
			t.Fatalf("TryLock after the network came back: %v", last)
		}
		time.Sleep(20 * time.Millisecond) // polling the reconnection, bounded by the deadline
	}
	wantHeld(t, r.l, "the next owner's hold after the lost hold's Unlock")
	mustUnlock(t, next)
	again := mustLock(t, a)
	if !r.l.Token().Less(again.Token()) {
		t.Errorf("the reconnected Locker's token %s is not above the next owner's %s", again.Token(), r.l.Token())
	}
	mustUnlock(t, a)
}
