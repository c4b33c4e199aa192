// Package tcpproxy is a TCP proxy on loopback that tests and drills put between a client and one
// server to break the link between them on purpose: cut its connections (Cut), refuse new ones
// (Down/Up), or partition it (Partition/Heal) — every byte both ways dropped while the
// connections stay open, which a client sees as a network that stopped answering, not as a
// closed connection. PartitionAfter arms a partition that begins the moment a given request has
// reached the server, so that the server carries it out and its answer is lost.
//
// It imports no testing package: internal/testkit/testenv builds its test proxies on it, and the
// drills (ordinary commands, drills/transfer) use it directly.
//
//	p, err := tcpproxy.New("127.0.0.1:5432")
//	if err != nil { ... }
//	defer p.Close()
//	// connect the client to p.Addr() ...
//	p.PartitionAfter([]byte("PREPARE TRANSACTION")) // the next PREPARE is executed, its reply lost
//	// ...
//	p.Heal()
package tcpproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// ErrInvalidOption reports a bad option or target given to [New].
var ErrInvalidOption = errors.New("tcpproxy: invalid option")

// Option configures a [Proxy].
type Option func(*options)

type options struct {
	listen      string
	dialTimeout time.Duration
	replies     func(dst io.Writer, src io.Reader) error
}

func defaultOptions() options {
	return options{listen: "127.0.0.1:0", dialTimeout: 5 * time.Second}
}

// WithListen sets the address the proxy listens on (default "127.0.0.1:0": a free port on
// loopback).
func WithListen(addr string) Option { return func(o *options) { o.listen = addr } }

// WithDialTimeout bounds the proxy's connect to the target for each accepted connection (default
// 5 s); a connection whose target cannot be reached in time is closed.
func WithDialTimeout(d time.Duration) Option { return func(o *options) { o.dialTimeout = d } }

// WithReplies replaces the copy of the server's bytes to the client: f reads src (the server's
// side of one connection) and writes what the client should get to dst until it returns, which
// closes the connection. It lets a caller read a protocol's frames and drop one (testenv's
// ZooKeeper proxy). Partitions still apply: while one lasts, what f writes to dst is dropped.
func WithReplies(f func(dst io.Writer, src io.Reader) error) Option {
	return func(o *options) { o.replies = f }
}

// Proxy forwards every connection made to [Proxy.Addr] to its target. It is safe for concurrent
// use by multiple goroutines.
type Proxy struct {
	o      options
	target string
	ln     net.Listener

	mu          sync.Mutex
	conns       map[*link]struct{}
	down        bool   // refuse new connections (Down)
	partitioned bool   // drop every byte and refuse new connections (Partition)
	pattern     []byte // armed by PartitionAfter; nil when not armed
	closed      bool

	wg sync.WaitGroup
}

// link is one proxied connection: the client's side and the server's.
type link struct {
	client, server net.Conn
	cut            sync.Once
}

func (l *link) close() {
	l.cut.Do(func() {
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// New starts a proxy to target (host:port) that listens on a free loopback port (see
// [WithListen]) and forwards bytes both ways unread until told otherwise. It returns an error
// wrapping [ErrInvalidOption] for an empty target or a negative dial timeout, or the listen
// error. The proxy runs until [Proxy.Close].
func New(target string, opts ...Option) (*Proxy, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("tcpproxy: target %q: %w: %w", target, ErrInvalidOption, err)
	}
	if o.dialTimeout <= 0 {
		return nil, fmt.Errorf("tcpproxy: dial timeout %v: %w", o.dialTimeout, ErrInvalidOption)
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return nil, fmt.Errorf("tcpproxy: listen on %s: %w", o.listen, err)
	}
	p := &Proxy{o: o, target: target, ln: ln, conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients connect to instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Cut closes every open connection; new ones are accepted unless the proxy is down or
// partitioned.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.conns {
		l.close()
	}
}

// Down closes every connection and refuses new ones (accepted and closed at once) until [Proxy.Up].
func (p *Proxy) Down() {
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
	p.Cut()
}

// Up accepts connections again after [Proxy.Down].
func (p *Proxy) Up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// Partition makes the link go silent: from now on every byte either side sends on any open
// connection is read and dropped (the connections stay open, so the client waits for answers
// that never come until its own timeout), and new connections are refused, until [Proxy.Heal].
// It disarms [Proxy.PartitionAfter].
func (p *Proxy) Partition() {
	p.mu.Lock()
	p.partitioned, p.pattern = true, nil
	p.mu.Unlock()
}

// PartitionAfter arms a partition, once: as soon as a chunk the client sends that contains
// pattern has been forwarded to the server, the proxy partitions as [Proxy.Partition] does —
// the server carries the request out, and its answer (and everything after it) is lost. The
// partition begins before the chunk is written, so no byte of the answer can slip through. An
// empty pattern disarms it. A pattern split across two reads of the client's side is found too.
func (p *Proxy) PartitionAfter(pattern []byte) {
	p.mu.Lock()
	if len(pattern) == 0 {
		p.pattern = nil
	} else {
		p.pattern = bytes.Clone(pattern)
	}
	p.mu.Unlock()
}

// Partitioned reports whether a partition is in force (begun by [Proxy.Partition] or by an armed
// [Proxy.PartitionAfter], not yet healed).
func (p *Proxy) Partitioned() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.partitioned
}

// Heal ends a partition: it closes the connections that were partitioned (their clients see
// them fail, as after a network outage that outlived TCP's patience) and accepts new ones again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.partitioned {
		return
	}
	p.partitioned = false
	for l := range p.conns {
		l.close()
	}
}

// Close stops listening, closes every connection and waits until the proxy's goroutines have
// returned. It is idempotent and returns nil.
func (p *Proxy) Close() error {
	p.mu.Lock()
	first := !p.closed
	p.closed = true
	p.mu.Unlock()
	if first {
		_ = p.ln.Close()
	}
	p.Cut()
	p.wg.Wait()
	return nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.down || p.partitioned
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, p.o.dialTimeout)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &link{client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close()
			continue
		}
		p.conns[l] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go func() { defer p.wg.Done(); p.requests(l) }()
		go func() { defer p.wg.Done(); p.replies(l) }()
	}
}

// forget closes l and drops it from the proxy's connections.
func (p *Proxy) forget(l *link) {
	l.close()
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// requests copies the client's bytes to the server, dropping them during a partition, and
// triggers an armed PartitionAfter.
func (p *Proxy) requests(l *link) {
	defer p.forget(l)
	buf := make([]byte, 32<<10)
	var tail []byte // the end of the previous chunk, for a pattern split across reads
	for {
		n, err := l.client.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			p.mu.Lock()
			drop := p.partitioned
			if !drop && p.pattern != nil && bytes.Contains(append(tail, chunk...), p.pattern) {
				// Partition first, then forward: the server gets the request, and its answer
				// finds the link already silent.
				p.partitioned, p.pattern = true, nil
			}
			keep := len(p.pattern)
			p.mu.Unlock()
			if !drop {
				if _, werr := l.server.Write(chunk); werr != nil {
					return
				}
			}
			if keep > 1 {
				tail = append(tail, chunk...)
				tail = tail[max(0, len(tail)-(keep-1)):]
			} else {
				tail = tail[:0]
			}
		}
		if err != nil {
			return
		}
	}
}

// replies copies the server's bytes to the client (through WithReplies' function when given),
// dropping them during a partition.
func (p *Proxy) replies(l *link) {
	defer p.forget(l)
	dst := &gate{p: p, w: l.client}
	if p.o.replies != nil {
		_ = p.o.replies(dst, l.server)
		return
	}
	_, _ = io.Copy(dst, l.server)
}

// gate writes to w unless a partition is in force, when it drops the bytes (reporting them
// written, so that the copy goes on draining the server).
type gate struct {
	p *Proxy
	w io.Writer
}

func (g *gate) Write(b []byte) (int, error) {
	if g.p.Partitioned() {
		return len(b), nil
	}
	return g.w.Write(b)
}
