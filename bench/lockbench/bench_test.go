package lockbench_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/txkit/txkit/internal/testkit/lockproc"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/pglock"
)

// envSchemaURL passes the benchmark's PostgreSQL schema to a holder process.
const envSchemaURL = "TXKIT_LOCKBENCH_PG"

// Holder processes: the test binary runs itself with these variables set (see TestMain).
const (
	envHold = "TXKIT_LOCKBENCH_HOLD" // the backend kind to hold a lock on
	envName = "TXKIT_LOCKBENCH_NAME" // the lock name
)

func TestMain(m *testing.M) {
	if kind := os.Getenv(envHold); kind != "" {
		os.Exit(hold(kind, os.Getenv(envName)))
	}
	testenv.VerifyNoLeaks(m)
}

// hold takes the lock, prints "HELD", and holds until the process is killed.
func hold(kind, name string) int {
	ctx := context.Background()
	c, err := newContender(ctx, envFromOS(), kind, name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	if _, err := c.Lock(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	fmt.Println("HELD")
	select {}
}

// servers returns where the backends' servers are, with a fresh schema for the PostgreSQL lock.
func servers(b *testing.B) env {
	b.Helper()
	db := testenv.PG(b)
	cl, err := pglock.New(db.Pool)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	return env{zk: testenv.ZK(b), pgURL: db.URL, redis: testenv.Redis(b), redlock: testenv.Redlock(b)}
}

func contenderFor(b *testing.B, e env, kind, name string) *contender {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), 30*time.Second)
	defer cancel()
	c, err := newContender(ctx, e, kind, name)
	if err != nil {
		b.Fatalf("%s: %v", kind, err)
	}
	b.Cleanup(c.close)
	return c
}

// BenchmarkLocks measures every backend in one run, on the same servers:
//
//   - uncontended: Lock+Unlock by one contender; acquisitions per second, and the round trips
//     and writes it sent per acquisition (counted at the client: ZooKeeper Session.Stats, a pgx
//     tracer, a go-redis hook);
//   - handoff: 16 contenders, each with its own connections, pass the lock around; the latency
//     from a holder's Unlock to the next holder's Lock returning, p50 and p99, the round trips per
//     acquisition, and on ZooKeeper the watch notifications that woke a waiter (one per release
//     on the fair lock, a herd on the unfair one).
func BenchmarkLocks(b *testing.B) {
	e := servers(b)
	b.Run("uncontended", func(b *testing.B) {
		for _, kind := range kinds {
			b.Run(kind, func(b *testing.B) {
				c := contenderFor(b, e, kind, "u-"+uuid.NewString()[:8])
				ctx := b.Context()
				cycle := func() {
					if _, err := c.Lock(ctx); err != nil {
						b.Fatal(err)
					}
					if err := c.Unlock(ctx); err != nil {
						b.Fatal(err)
					}
				}
				cycle() // paths, rows and scripts exist before the timed part
				r0, w0, _ := c.count.snapshot()
				for b.Loop() {
					cycle()
				}
				r1, w1, _ := c.count.snapshot()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acquires/s")
				b.ReportMetric(float64(r1-r0)/float64(b.N), "rtt/acquire")
				b.ReportMetric(float64(w1-w0)/float64(b.N), "writes/acquire")
			})
		}
	})
	b.Run("handoff16", func(b *testing.B) {
		for _, kind := range kinds {
			b.Run(kind, func(b *testing.B) { handoff(b, e, kind, 16) })
		}
	})
}

func handoff(b *testing.B, e env, kind string, n int) {
	name := "h-" + uuid.NewString()[:8]
	cs := make([]*contender, n)
	for i := range cs {
		cs[i] = contenderFor(b, e, kind, name)
	}
	var (
		released atomic.Int64 // unix nanos of the last Unlock's start
		mu       sync.Mutex
		lat      []time.Duration
		left     atomic.Int64
		r0, k0   int64
	)
	for _, c := range cs {
		r, _, k := c.count.snapshot()
		r0, k0 = r0+r, k0+k
	}
	left.Store(int64(b.N))
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, c := range cs {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if _, err := c.Lock(context.Background()); err != nil {
					errs <- err
					return
				}
				if r := released.Load(); r != 0 {
					d := time.Since(time.Unix(0, r))
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				}
				released.Store(time.Now().UnixNano())
				if err := c.Unlock(context.Background()); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	var r1, k1 int64
	for _, c := range cs {
		r, _, k := c.count.snapshot()
		r1, k1 = r1+r, k1+k
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
	b.ReportMetric(float64(r1-r0)/float64(b.N), "rtt/acquire")
	if cs[0].count.zk != nil {
		b.ReportMetric(float64(k1-k0)/float64(b.N), "wakeups/acquire")
	}
}

// BenchmarkLocksKill: a holder process is SIGKILLed while a contender waits; the time from the
// kill to the contender's Lock returning. Every backend's expiry (session timeout, lease TTL) is
// the same 3 s, so the figures compare.
func BenchmarkLocksKill(b *testing.B) {
	e := servers(b)
	for _, kind := range kinds {
		b.Run(kind, func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				total += killOnce(b, e, kind)
			}
			b.ReportMetric(total.Seconds()*1000/float64(b.N), "kill-to-next-ms")
		})
	}
}

func killOnce(b *testing.B, e env, kind string) time.Duration {
	b.StopTimer()
	defer b.StartTimer()
	name := "k-" + uuid.NewString()[:8]
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHold+"="+kind, envName+"="+name, envSchemaURL+"="+e.pgURL)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	held := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "HELD" {
				held <- true
				break
			}
		}
		held <- false
		for sc.Scan() { // drain
		}
	}()
	select {
	case ok := <-held:
		if !ok {
			b.Fatalf("%s: the holder process exited before holding", kind)
		}
	case <-time.After(30 * time.Second):
		b.Fatalf("%s: the holder process did not hold within 30 s", kind)
	}
	c := contenderFor(b, e, kind, name)
	if _, err := c.TryLock(b.Context()); !errors.Is(err, lock.ErrLocked) {
		b.Fatalf("%s: TryLock while the holder holds: %v, want ErrLocked", kind, err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := c.Lock(b.Context())
		got <- err
	}()
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		b.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			b.Fatalf("%s: Lock after the kill: %v", kind, err)
		}
	case <-time.After(expiry + 10*time.Second):
		b.Fatalf("%s: no new holder within %v of the kill", kind, expiry+10*time.Second)
	}
	d := time.Since(start)
	if err := c.Unlock(context.Background()); err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkDisruptiveLocksRestart restarts the server under a held lock, with a second contender
// waiting: the ZooKeeper node the holder's session is connected to, PostgreSQL, the Redis instance.
// It reports how long the restart took, whether the holder lost its hold (holder-lost 1, and when
// it learned, counted from the stop), and whether the waiter got in while the holder still
// believed it held (overlap 1: two holders at once). The holder is given the backend's expiry
// after the restart to notice a loss before it releases what it still holds. It stops servers the
// other tests use: `make bench-locks` runs it alone; `make bench` skips it.
func BenchmarkDisruptiveLocksRestart(b *testing.B) {
	e := servers(b)
	for _, tc := range []struct{ name, kind string }{{"zk-node", "zk"}, {"pg", "pg"}, {"redis", "redis"}} {
		b.Run(tc.name, func(b *testing.B) {
			var lost, overlap, restart, learned float64
			for b.Loop() {
				r := restartOnce(b, e, tc.kind)
				restart += r.restart.Seconds() * 1000
				if r.lost {
					lost++
					learned += r.learned.Seconds() * 1000
				}
				if r.overlap {
					overlap++
				}
			}
			n := float64(b.N)
			b.ReportMetric(restart/n, "restart-ms")
			b.ReportMetric(lost/n, "holder-lost")
			if lost > 0 {
				b.ReportMetric(learned/lost, "lost-learned-ms")
			}
			b.ReportMetric(overlap/n, "overlap")
		})
	}
}

// restarted is what one restart under a held lock did.
type restarted struct {
	restart time.Duration // the restart command, stop to serving
	lost    bool          // the holder's lease ended with lock.ErrLockLost
	learned time.Duration // stop → the holder's lease ended, when lost
	overlap bool          // the waiter held while the holder's lease had not ended
}

func restartOnce(b *testing.B, e env, kind string) restarted {
	b.StopTimer()
	defer b.StartTimer()
	name := "r-" + uuid.NewString()[:8]
	h := contenderFor(b, e, kind, name)
	w := contenderFor(b, e, kind, name)
	hl, err := h.Lock(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	type acq struct {
		overlap bool
		err     error
	}
	got := make(chan acq, 1)
	go func() {
		for {
			_, err := w.Lock(b.Context())
			if err != nil && b.Context().Err() == nil {
				// The server is down: a backend may fail rather than wait; try again.
				time.Sleep(50 * time.Millisecond)
				continue
			}
			got <- acq{overlap: err == nil && hl.Err() == nil, err: err}
			return
		}
	}()
	ended := make(chan time.Time, 1)
	go func() {
		<-hl.Done()
		ended <- time.Now()
	}()
	script, args := restartCommand(b, kind, h)
	start := time.Now()
	var r restarted
	if out, err := exec.Command(script, args...).CombinedOutput(); err != nil {
		b.Fatalf("%s %v: %v\n%s", script, args, err, out)
	}
	r.restart = time.Since(start)
	// The holder may learn of a loss only at its next renewal: give it the expiry to.
	select {
	case at := <-ended:
		if errors.Is(hl.Err(), lock.ErrLockLost) {
			r.lost, r.learned = true, at.Sub(start)
		}
	case <-time.After(expiry):
	}
	_ = h.Unlock(context.Background()) // the holder finishes: the waiter gets in
	select {
	case a := <-got:
		if a.err != nil {
			b.Fatalf("%s: the waiter's Lock: %v", kind, a.err)
		}
		r.overlap = a.overlap
	case <-time.After(expiry + 30*time.Second):
		b.Fatalf("%s: the waiter did not get the lock within %v of the restart", kind, expiry+30*time.Second)
	}
	if err := w.Unlock(context.Background()); err != nil {
		b.Fatal(err)
	}
	return r
}

// restartCommand returns the deploy/local command that restarts kind's server: for ZooKeeper,
// the node the holder's session is connected to.
func restartCommand(b *testing.B, kind string, h *contender) (string, []string) {
	root, err := lockproc.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	dir := root + "/deploy/local/"
	switch kind {
	case "zk":
		addr := h.count.zk.Conn().Server()
		_, port, _ := strings.Cut(addr, ":")
		var n int
		if _, err := fmt.Sscanf(port, "%d", &n); err != nil {
			b.Fatalf("zk server %q: %v", addr, err)
		}
		return dir + "zk", []string{"restart", fmt.Sprint(n - zkBasePort)}
	case "pg":
		return dir + "postgres", []string{"restart"}
	default:
		return dir + "redis", []string{"restart", "single"}
	}
}

// zkBasePort is deploy/local/lib.sh's ZK_BASE_PORT: node N listens on ZK_BASE_PORT+N.
const zkBasePort = 22180
