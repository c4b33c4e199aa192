package zklock_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/internal/testkit/lockproc"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock/zklock"
)

// curatorNode is the name of an InterProcessMutex contender's node: a protected (uuid-prefixed)
// ephemeral-sequential node named "lock-".
var curatorNode = regexp.MustCompile(`^_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-lock-(\d{10})$`)

// goHold is what a Go contender saw during one hold.
type goHold struct {
	node     string   // our node's name
	children []string // the lock path's children, listed through our session while holding
}

// TestIntegrationCuratorInterop runs a Java process taking Apache Curator's InterProcessMutex and
// Go goroutines taking zklock.Mutex on the same path at the same time, and checks that they exclude
// each other (a marker file that every holder creates exclusively and removes before releasing)
// and that they really queue together: Go holders list the path and find the Java contender's
// nodes waiting behind them, and the sequence numbers of all holds form one sequence.
func TestIntegrationCuratorInterop(t *testing.T) {
	const (
		iterations = 25
		goroutines = 2
		hold       = 5 * time.Millisecond
	)
	servers := testenv.ZK(t)
	prog := lockproc.Curator(t)
	lockPath := testenv.ZKRoot(t) + "/curator"
	marker := lockproc.Marker(filepath.Join(t.TempDir(), "held"))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// The Go sessions first, so that the Go side contends as soon as the Java side does.
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	mutexes := make([]*zklock.Mutex, goroutines)
	sessions := make([]*zklock.Session, goroutines)
	for i := range goroutines {
		// Curator's recipe (lockproc.Curator) creates its nodes with the world's ACL and no
		// credentials, so the Go side shares an open lock path.
		s, err := zklock.NewSession(ctx, servers, zklock.WithSessionTimeout(4*time.Second), zklock.WithLogger(log), zklock.WithInsecureWorldACL())
		if err != nil {
			t.Fatalf("NewSession(%v): %v", servers, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		m, err := zklock.NewMutex(s, lockPath)
		if err != nil {
			t.Fatalf("NewMutex(%s): %v", lockPath, err)
		}
		sessions[i], mutexes[i] = s, m
	}

	java, err := prog.Start(ctx, strings.Join(servers, ","), lockPath, iterations, string(marker), hold)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = java.Wait() }) // reaped on every path
	start := time.Now()
	if err := java.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("java contender ready after %v", time.Since(start).Round(time.Millisecond))

	holds := make([][]goHold, goroutines)
	var g errgroup.Group
	for i := range goroutines {
		g.Go(func() error {
			for j := range iterations {
				h, err := holdOnce(ctx, sessions[i], mutexes[i], marker, hold)
				if err != nil {
					return fmt.Errorf("go contender %d, hold %d: %w", i, j, err)
				}
				holds[i] = append(holds[i], h)
			}
			return nil
		})
	}
	goErr := g.Wait()
	javaErr := java.Wait()
	elapsed := time.Since(start)
	if goErr != nil {
		t.Errorf("go side: %v", goErr)
	}
	if javaErr != nil {
		t.Errorf("java side: %v", javaErr)
	}
	if errors.Is(goErr, lockproc.ErrOverlap) || errors.Is(javaErr, lockproc.ErrOverlap) {
		t.Fatal("mutual exclusion between Curator and zklock.Mutex is broken")
	}
	if t.Failed() {
		t.FailNow()
	}

	// Every side held the lock as often as it asked to, through Curator-named nodes.
	javaNodes := java.Acquired()
	if len(javaNodes) != iterations {
		t.Errorf("java contender held the lock %d times, want %d", len(javaNodes), iterations)
	}
	type acquisition struct {
		seq  int64
		side string
	}
	var all []acquisition
	for _, n := range javaNodes {
		all = append(all, acquisition{seqOf(t, n), "java"})
	}
	for i, hs := range holds {
		if len(hs) != iterations {
			t.Errorf("go contender %d held the lock %d times, want %d", i, len(hs), iterations)
		}
		for _, h := range hs {
			all = append(all, acquisition{seqOf(t, h.node), "go" + strconv.Itoa(i)})
		}
	}

	// One path, one sequence counter: no two holds share a sequence number. The fair recipe grants
	// the lock in sequence order, so sorting by it gives the order of the holds; count how often
	// the lock passed between Java and Go.
	slices.SortFunc(all, func(a, b acquisition) int { return cmp.Compare(a.seq, b.seq) })
	handoffs := 0
	for k := 1; k < len(all); k++ {
		if all[k].seq == all[k-1].seq {
			t.Errorf("two holds through sequence number %d (%s and %s)", all[k].seq, all[k-1].side, all[k].side)
		}
		if (all[k].side == "java") != (all[k-1].side == "java") {
			handoffs++
		}
	}
	if handoffs == 0 {
		t.Errorf("the lock never passed between Java and Go: they did not contend")
	}

	// While a Go contender held the lock, its node was the lowest (in Curator's order) of the
	// path's children, and the Java contender's nodes were seen queued behind it.
	isJava := make(map[string]bool, len(javaNodes))
	for _, n := range javaNodes {
		isJava[n] = true
	}
	sawJava := 0
	for _, hs := range holds {
		for _, h := range hs {
			own := seqOf(t, h.node)
			for _, c := range h.children {
				if c != h.node && seqOf(t, c) < own {
					t.Errorf("go contender held through %s while %s, lower, was still there", h.node, c)
				}
			}
			if slices.ContainsFunc(h.children, func(c string) bool { return isJava[c] }) {
				sawJava++
			}
		}
	}
	if sawJava == 0 {
		t.Errorf("no Go hold saw a node of the Java contender under %s", lockPath)
	}
	t.Logf("%d holds in %v: java %d, go %d×%d; %d handoffs between Java and Go; %d of %d Go holds saw a Java node waiting",
		len(all), elapsed.Round(time.Millisecond), len(javaNodes), goroutines, iterations, handoffs, sawJava, goroutines*iterations)
}

// holdOnce takes the lock, enters the marker, lists the lock path, holds for d under the lease's
// context, leaves the marker and releases.
func holdOnce(ctx context.Context, s *zklock.Session, m *zklock.Mutex, marker lockproc.Marker, d time.Duration) (h goHold, err error) {
	lease, err := m.Lock(ctx)
	if err != nil {
		return h, err
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if uerr := m.Unlock(uctx); uerr != nil {
			err = errors.Join(err, fmt.Errorf("unlock: %w", uerr))
		}
	}()
	if err := marker.Enter(); err != nil {
		return h, err
	}
	h.node = path.Base(m.Node())
	names, _, lerr := s.Conn().Children(m.Path()) // the same session: at least as recent as Lock's view
	if lerr != nil {
		err = fmt.Errorf("list %s: %w", m.Path(), lerr)
	}
	h.children = names
	if err == nil {
		select {
		case <-time.After(d): // the critical section's work
		case <-lease.Context().Done():
			err = fmt.Errorf("lock lost while held: %w", lease.Err())
		}
	}
	if lerr := marker.Leave(); lerr != nil {
		err = errors.Join(err, lerr)
	}
	return h, err
}

// seqOf returns the sequence number of a Curator lock node, failing the test for any other name.
func seqOf(t testing.TB, name string) int64 {
	t.Helper()
	m := curatorNode.FindStringSubmatch(name)
	if m == nil {
		t.Fatalf("node %q is not named like an InterProcessMutex node (_c_<uuid>-lock-<10 digits>)", name)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		t.Fatalf("node %q: %v", name, err)
	}
	return n
}
