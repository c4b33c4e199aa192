// Package mqtest is what the tests and benchmarks that use the real RocketMQ share: a publisher on
// the test name servers, a consumer group of a test's own, and the broker behind a proxy a test
// can cut, cleaned up when the test ends. It links the RocketMQ client, so only packages that
// already test against RocketMQ import it (the Makefile runs those without -race).
package mqtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txkit/txkit/internal/testkit/tcpproxy"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/rocketmq"
)

// Publisher returns a RocketMQ publisher on the test name servers, closed when tb ends. It blocks
// for nothing: the route is fetched on first use.
func Publisher(tb testing.TB) *rocketmq.Publisher {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := rocketmq.NewPublisher(ctx, testenv.Namesrv(tb))
	if err != nil {
		tb.Fatalf("rocketmq.NewPublisher: %v", err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

// ConsumerGroup returns a RocketMQ consumer group name of tb's own and deletes the group's retry
// and dead-letter topics, which the broker creates, when tb ends.
func ConsumerGroup(tb testing.TB) string {
	tb.Helper()
	g := "txkit-" + testenv.Name(tb)
	ns, broker := testenv.Namesrv(tb), testenv.Broker(tb)
	tb.Cleanup(func() {
		adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(ns)))
		if err != nil {
			return
		}
		defer adm.Close() //nolint:errcheck // cleanup
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, topic := range []string{"%RETRY%" + g, "%DLQ%" + g} {
			_ = adm.DeleteTopic(ctx, admin.WithTopicDelete(topic), admin.WithBrokerAddrDelete(broker), admin.WithNameSrvAddr(ns))
		}
	})
	return g
}

// BrokerBehindProxy returns name servers for a client that reaches the test broker through a
// proxy the test can cut, and that proxy: a proxy to the name server rewrites the broker's address
// in the name server's answers (topic routes) into the broker proxy's, so that a publisher or
// consumer on these name servers sends everything for the broker through the proxy. Cutting it
// (Cut, Down, Partition) is a broker outage for that client alone; the shared broker and its other
// clients go on. Both proxies stop when tb ends.
func BrokerBehindProxy(tb testing.TB) (nameservers []string, broker *testenv.Proxy) {
	tb.Helper()
	ns := testenv.Namesrv(tb)
	broker = testenv.NewRawProxy(tb, testenv.Broker(tb))
	from, to := []byte(testenv.Broker(tb)), []byte(broker.Addr())
	p, err := tcpproxy.New(ns[0], tcpproxy.WithReplies(func(dst io.Writer, src io.Reader) error {
		return rewriteFrames(dst, src, from, to)
	}))
	if err != nil {
		tb.Fatalf("proxy to name server %s: %v", ns[0], err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return []string{p.Addr()}, broker
}

// rewriteFrames copies RocketMQ remoting frames from src to dst, replacing from with to in each
// frame's header and body.
func rewriteFrames(dst io.Writer, src io.Reader, from, to []byte) error {
	return copyFrames(dst, src, func(header, body []byte) ([]byte, []byte) {
		return bytes.ReplaceAll(header, from, to), bytes.ReplaceAll(body, from, to)
	})
}

// copyFrames copies RocketMQ remoting frames from src to dst, each through edit: a frame is its
// length (4 bytes, big endian, of what follows), the header's length (4 bytes: the serialization
// type, then 3 bytes of length), the header, the body.
func copyFrames(dst io.Writer, src io.Reader, edit func(header, body []byte) ([]byte, []byte)) error {
	var lens [8]byte
	for {
		if _, err := io.ReadFull(src, lens[:]); err != nil {
			return err
		}
		total := binary.BigEndian.Uint32(lens[0:4])
		mark := binary.BigEndian.Uint32(lens[4:8])
		hlen := mark & 0xffffff
		if total > 64<<20 || total < 4 || hlen > total-4 {
			return io.ErrUnexpectedEOF
		}
		frame := make([]byte, total-4)
		if _, err := io.ReadFull(src, frame); err != nil {
			return err
		}
		header, body := edit(frame[:hlen], frame[hlen:])
		out := make([]byte, 8, 8+len(header)+len(body))
		binary.BigEndian.PutUint32(out[0:4], uint32(4+len(header)+len(body)))
		binary.BigEndian.PutUint32(out[4:8], mark&0xff000000|uint32(len(header)))
		out = append(append(out, header...), body...)
		if _, err := dst.Write(out); err != nil {
			return err
		}
	}
}
