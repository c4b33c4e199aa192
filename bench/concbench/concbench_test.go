package concbench_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txkit/txkit/bench/concbench"
)

func TestPercentile(t *testing.T) {
	f := concbench.Figures{Lat: []time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {0, 1}, {1, 10}} {
		if got := f.Percentile(c.p); got != c.want {
			t.Errorf("Percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := (concbench.Figures{}).Percentile(0.5); got != 0 {
		t.Errorf("Percentile of nothing = %v, want 0", got)
	}
	g := concbench.Figures{Ops: 50, Took: 2 * time.Second, Commits: 150}
	if g.PerSecond() != 25 || g.CommitsPerOp() != 3 {
		t.Errorf("PerSecond, CommitsPerOp = %v, %v, want 25, 3", g.PerSecond(), g.CommitsPerOp())
	}
}

// TestRotation: each side runs in its own blocks, with its own client numbers, the first side
// rotating; commits read around a block are the side's.
func TestRotation(t *testing.T) {
	var commits atomic.Int64
	var running [2]atomic.Int64 // clients of each side inside an operation
	var mu sync.Mutex
	var order []int // the sides in the order their operations ran, repeats collapsed
	var maxClient atomic.Int64
	side := func(i int) concbench.Op {
		return func(ctx context.Context, client int) error {
			if running[1-i].Load() != 0 {
				return errors.New("the sides overlapped")
			}
			running[i].Add(1)
			defer running[i].Add(-1)
			if int64(client) > maxClient.Load() {
				maxClient.Store(int64(client))
			}
			commits.Add(int64(i + 1)) // side 0: 1 commit per op, side 1: 2
			time.Sleep(time.Millisecond)
			return nil
		}
	}
	first := func(i int) concbench.Op {
		return func(ctx context.Context, client int) error {
			mu.Lock()
			if len(order) == 0 || order[len(order)-1] != i {
				order = append(order, i)
			}
			mu.Unlock()
			return side(i)(ctx, client)
		}
	}
	r := concbench.NewRotation(3, 30*time.Millisecond, commits.Load, first(0), first(1))
	for range 2 {
		if err := r.Round(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	// Blocks 0, 1 then 1, 0: the second round starts with the side the first ended with.
	if want := []int{0, 1, 0}; !slices.Equal(order, want) {
		t.Errorf("sides in the order they ran %v, want %v", order, want)
	}
	if maxClient.Load() != 2 {
		t.Errorf("highest client number %d, want 2", maxClient.Load())
	}
	for i, f := range r.Figures() {
		if f.Ops == 0 || len(f.Lat) != f.Ops || f.Took < 60*time.Millisecond {
			t.Errorf("side %d: %d ops, %d latencies, took %v", i, f.Ops, len(f.Lat), f.Took)
		}
		if f.CommitsPerOp() != float64(i+1) {
			t.Errorf("side %d: %v commits/op, want %d", i, f.CommitsPerOp(), i+1)
		}
	}
	boom := errors.New("boom")
	bad := concbench.NewRotation(2, time.Second, nil, func(context.Context, int) error { return boom })
	if err := bad.Round(t.Context()); !errors.Is(err, boom) {
		t.Errorf("Round = %v, want boom", err)
	}
}

func TestParseTPS(t *testing.T) {
	out := `pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: /tmp/x.sql
number of failed transactions: 0 (0.000%)
latency average = 0.809 ms
initial connection time = 4.018 ms
tps = 2470.737453 (without initial connection time)
`
	if v, err := concbench.ParseTPS(out); err != nil || v != 2470.737453 {
		t.Errorf("ParseTPS = %v, %v", v, err)
	}
	if _, err := concbench.ParseTPS("pgbench: error: connection refused"); err == nil {
		t.Error("ParseTPS of an error report: no error")
	}
}

func TestDurationEnv(t *testing.T) {
	t.Setenv("CONCBENCH_TEST_D", "")
	if d, err := concbench.DurationEnv("CONCBENCH_TEST_D", time.Second); err != nil || d != time.Second {
		t.Errorf("unset: %v, %v", d, err)
	}
	t.Setenv("CONCBENCH_TEST_D", "250ms")
	if d, err := concbench.DurationEnv("CONCBENCH_TEST_D", time.Second); err != nil || d != 250*time.Millisecond {
		t.Errorf("250ms: %v, %v", d, err)
	}
	t.Setenv("CONCBENCH_TEST_D", "soon")
	if _, err := concbench.DurationEnv("CONCBENCH_TEST_D", time.Second); err == nil {
		t.Error("soon: no error")
	}
}
