package lock_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/txkit/txkit/internal/testenv"
	"github.com/txkit/txkit/lock"
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

// BenchmarkHandoff: 16 contenders, each on its own session, pass the lock around; the latency from
// a holder's Unlock to the next holder's Lock returning, p50 and p99, fair against unfair, and the
// ZooKeeper writes and watch notifications per acquisition.
func BenchmarkHandoff(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts []lock.Option
	}{{"fair", nil}, {"unfair", []lock.Option{lock.WithUnfair()}}} {
		b.Run(mode.name, func(b *testing.B) {
			servers := testenv.ZK(b)
			path := testenv.ZKRoot(b) + "/lock"
			const contenders = 16
			sessions := make([]*lock.Session, contenders)
			mutexes := make([]*lock.Mutex, contenders)
			for i := range sessions {
				sessions[i] = session(b, servers)
				mutexes[i] = mutex(b, sessions[i], path, mode.opts...)
			}
			var (
				released atomic.Int64 // unix nanos of the last Unlock's start
				mu       sync.Mutex
				lat      []time.Duration
				left     atomic.Int64
			)
			left.Store(int64(b.N))
			before := sum(sessions)
			b.ResetTimer()
			var wg sync.WaitGroup
			for _, m := range mutexes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for left.Add(-1) >= 0 {
						if _, err := m.Lock(context.Background()); err != nil {
							b.Error(err)
							return
						}
						if r := released.Load(); r != 0 {
							d := time.Since(time.Unix(0, r))
							mu.Lock()
							lat = append(lat, d)
							mu.Unlock()
						}
						released.Store(time.Now().UnixNano())
						if err := m.Unlock(context.Background()); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			after := sum(sessions)
			if len(lat) > 0 {
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			}
			b.ReportMetric(float64(after.Writes-before.Writes)/float64(b.N), "zk-writes/acquire")
			b.ReportMetric(float64(after.WatchEvents-before.WatchEvents)/float64(b.N), "wakeups/acquire")
		})
	}
}

func sum(ss []*lock.Session) lock.Stats {
	var t lock.Stats
	for _, s := range ss {
		st := s.Stats()
		t.Writes += st.Writes
		t.WatchEvents += st.WatchEvents
	}
	return t
}
