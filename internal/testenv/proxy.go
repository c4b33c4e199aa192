package testenv

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on loopback that tests put between a client and one server to cut,
// refuse or blackhole its connections. It understands just enough of ZooKeeper's framing to drop
// one reply (DropNextReply), which is how a test loses a create's or a delete's answer.
// [NewRawProxy] makes one that copies bytes unread, for any other protocol (PostgreSQL, Redis).
type Proxy struct {
	raw    bool // copy the replies unread: not ZooKeeper's framing
	t      testing.TB
	target string
	ln     net.Listener

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	down  bool

	dropReply atomic.Bool  // drop the next ZooKeeper reply (xid > 0) and cut the connection
	dropped   atomic.Int64 // replies dropped so far
	wg        sync.WaitGroup
}

// NewProxy starts a proxy to the ZooKeeper server target and stops it when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	return newProxy(t, target, false)
}

// NewRawProxy starts a proxy to target that copies bytes both ways without reading them (any
// protocol; DropNextReply does nothing), and stops it when the test ends.
func NewRawProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	return newProxy(t, target, true)
}

func newProxy(t testing.TB, target string, raw bool) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{t: t, target: target, ln: ln, conns: map[net.Conn]struct{}{}, raw: raw}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr returns the proxy's address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Down closes every connection and refuses new ones until Up.
func (p *Proxy) Down() {
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
	p.Cut()
}

// Up accepts connections again.
func (p *Proxy) Up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// Cut closes every open connection (new ones are accepted unless Down).
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// DropNextReply makes the proxy swallow the next ZooKeeper reply to a request (not a ping, not a
// watch event) and then cut the connection: the request was carried out, its answer is lost.
func (p *Proxy) DropNextReply() { p.dropReply.Store(true) }

// Dropped returns how many replies DropNextReply has swallowed.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			_ = c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c] = struct{}{}
		p.conns[s] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); p.pipe(s, c, false) }()
		go func() { defer p.wg.Done(); p.pipe(c, s, true) }()
	}
}

// pipe copies from src to dst. replies marks the server-to-client direction, which is read frame
// by frame so that one reply can be dropped.
func (p *Proxy) pipe(dst, src net.Conn, replies bool) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	if !replies || p.raw {
		_, _ = io.Copy(dst, src)
		return
	}
	first := true // the connect response has no reply header
	hdr := make([]byte, 4)
	for {
		if _, err := io.ReadFull(src, hdr); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr)
		if n > 64<<20 {
			return
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(src, body); err != nil {
			return
		}
		if !first && len(body) >= 4 {
			xid := int32(binary.BigEndian.Uint32(body[:4]))
			if xid > 0 && p.dropReply.CompareAndSwap(true, false) {
				p.dropped.Add(1)
				return // swallow it and cut the connection
			}
		}
		first = false
		if _, err := dst.Write(append(hdr, body...)); err != nil {
			if !errors.Is(err, net.ErrClosed) {
				return
			}
			return
		}
	}
}
