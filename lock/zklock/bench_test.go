package zklock_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/txkit/txkit/internal/testkit/testenv"
)

// BenchmarkUncontended: Lock+Unlock with nobody else contending, txkit's fair Mutex and
// go-zookeeper's own zk.Lock side by side on the same ensemble (one server, so both pay the same
// round trips). The "ratio" sub-benchmark alternates the two in blocks and reports txkit's
// throughput as a fraction of zk.Lock's.
func BenchmarkUncontended(b *testing.B) {
	servers := testenv.ZK(b)
	root := testenv.ZKRoot(b)
	one := servers[:1]
	s := session(b, one)
	m := mutex(b, s, root+"/txkit")
	conn, _, err := zk.Connect(one, testSessionTimeout, zk.WithLogInfo(false))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Close)
	// The test's root is readable and writable by the ensemble's digest user only.
	if err := conn.AddAuth("digest", []byte(testenv.Lookup(b, testenv.EnvZKAuth))); err != nil {
		b.Fatal(err)
	}
	zl := zk.NewLock(conn, root+"/zklock", zk.WorldACL(zk.PermAll))
	ctx := context.Background()
	txkit := func() {
		if _, err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	zkl := func() {
		if err := zl.Lock(); err != nil {
			b.Fatal(err)
		}
		if err := zl.Unlock(); err != nil {
			b.Fatal(err)
		}
	}
	txkit() // create the paths outside the timed part
	zkl()
	b.Run("txkit", func(b *testing.B) {
		w0 := s.Stats().Writes
		for b.Loop() {
			txkit()
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/acquire")
		b.ReportMetric(float64(s.Stats().Writes-w0)/float64(b.N), "zk-writes/acquire")
	})
	b.Run("zklock", func(b *testing.B) {
		for b.Loop() {
			zkl()
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/acquire")
	})
	b.Run("ratio", func(b *testing.B) {
		const block = 50
		var tx, zz time.Duration
		timed := func(f func()) time.Duration {
			start := time.Now()
			for i := 0; i < block; i++ {
				f()
			}
			return time.Since(start)
		}
		round := 0
		for b.Loop() {
			// Alternate which goes first, so neither always follows the other's writes.
			if round%2 == 0 {
				tx += timed(txkit)
				zz += timed(zkl)
			} else {
				zz += timed(zkl)
				tx += timed(txkit)
			}
			round++
		}
		// Throughput ratio = time per zk.Lock acquisition / time per txkit acquisition.
		b.ReportMetric(float64(zz)/float64(tx), "txkit/zklock-throughput")
	})
}
