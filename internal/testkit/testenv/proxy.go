package testenv

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/testkit/tcpproxy"
)

// Proxy is a TCP proxy on loopback that tests put between a client and one server to cut,
// refuse, blackhole or partition its connections: a [tcpproxy.Proxy] (its Cut, Down, Up,
// Partition, PartitionAfter and Heal) stopped when the test ends. [NewProxy] makes one that
// understands just enough of ZooKeeper's framing to drop one reply (DropNextReply), which is how a
// test loses a create's or a delete's answer; [NewRawProxy] makes one that copies bytes unread,
// for any other protocol (PostgreSQL, Redis).
type Proxy struct {
	*tcpproxy.Proxy
	dropReply atomic.Bool  // drop the next ZooKeeper reply (xid > 0) and cut the connection
	dropped   atomic.Int64 // replies dropped so far
}

// NewProxy starts a proxy to the ZooKeeper server target and stops it when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p := &Proxy{}
	p.Proxy = start(t, target, tcpproxy.WithReplies(p.zkReplies))
	return p
}

// NewRawProxy starts a proxy to target that copies bytes both ways without reading them (any
// protocol; DropNextReply does nothing), and stops it when the test ends.
func NewRawProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	return &Proxy{Proxy: start(t, target)}
}

func start(t testing.TB, target string, opts ...tcpproxy.Option) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.New(target, opts...)
	if err != nil {
		t.Fatalf("proxy to %s: %v", target, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// DropNextReply makes the proxy swallow the next ZooKeeper reply to a request (not a ping, not a
// watch event) and then cut the connection: the request was carried out, its answer is lost.
func (p *Proxy) DropNextReply() { p.dropReply.Store(true) }

// Dropped returns how many replies DropNextReply has swallowed.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// zkReplies copies ZooKeeper's replies from src to dst frame by frame, so that one can be
// dropped; returning cuts the connection.
func (p *Proxy) zkReplies(dst io.Writer, src io.Reader) error {
	first := true // the connect response has no reply header
	hdr := make([]byte, 4)
	for {
		if _, err := io.ReadFull(src, hdr); err != nil {
			return err
		}
		n := binary.BigEndian.Uint32(hdr)
		if n > 64<<20 {
			return io.ErrUnexpectedEOF
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(src, body); err != nil {
			return err
		}
		if !first && len(body) >= 4 {
			xid := int32(binary.BigEndian.Uint32(body[:4]))
			if xid > 0 && p.dropReply.CompareAndSwap(true, false) {
				p.dropped.Add(1)
				return nil // swallow it and cut the connection
			}
		}
		first = false
		if _, err := dst.Write(append(hdr, body...)); err != nil {
			return err
		}
	}
}

// PoolViaProxy returns a pool on s's schema whose connections go through a raw proxy the test can
// cut, with a 1 s connect timeout, and the proxy; both are closed when the test ends.
func PoolViaProxy(t testing.TB, s *Schema) (*pgxpool.Pool, *Proxy) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		t.Fatalf("parse %s: %v", s.URL, err)
	}
	p := NewRawProxy(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	host, port, err := net.SplitHostPort(p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.ConnectTimeout = host, uint16(n), time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pool through the proxy: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool, p
}
