package redislock_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// proxy is a plain TCP proxy on loopback that cuts a Redis client (or a replica's link) off its
// server. testenv.Proxy cannot carry Redis: it reads ZooKeeper's length-prefixed frames in the
// server-to-client direction (to drop one reply), and RESP replies are not framed that way. This
// one copies bytes both ways and offers the part of testenv.Proxy's API the tests need.
type proxy struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	down  bool
	wg    sync.WaitGroup
}

// newProxy starts a proxy to target and stops it when the test ends.
func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = p.ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

// Addr returns the proxy's address.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

// Down closes every connection and refuses new ones until Up.
func (p *proxy) Down() {
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
	p.cut()
}

// Up accepts connections again.
func (p *proxy) Up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *proxy) accept() {
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
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		p.wg.Go(func() { pipe(s, c) })
		p.wg.Go(func() { pipe(c, s) })
	}
}
