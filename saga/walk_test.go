package saga

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// goid returns the id of the calling goroutine (the first line of its stack: "goroutine N [...").
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return string(bytes.Fields(buf)[1])
}

// chain is a sequential saga's walk: each node blocked by the one before it.
func chain(names ...string) []node {
	nodes := make([]node, len(names))
	for i, n := range names {
		nodes[i] = node{name: n, prio: -i}
		if i > 0 {
			nodes[i].blockers = []string{names[i-1]}
		}
	}
	return nodes
}

// TestWalkLoneCallInline: a sequential walk calls each step on the walking goroutine (no goroutine
// per call), in order, and stops at a failure stop approves.
func TestWalkLoneCallInline(t *testing.T) {
	me := goid()
	var called []string
	res := walk(context.Background(), 4, chain("a", "b", "c"), func(_ context.Context, name string) error {
		if g := goid(); g != me {
			t.Errorf("%s called on goroutine %s, want the walk's %s", name, g, me)
		}
		called = append(called, name)
		return nil
	}, nil, nil)
	if want := []string{"a", "b", "c"}; !slices.Equal(called, want) || !slices.Equal(res.done, want) {
		t.Fatalf("called %v, done %v, want %v", called, res.done, want)
	}

	refused := errors.New("refused")
	called = nil
	res = walk(context.Background(), 4, chain("a", "b", "c"), func(_ context.Context, name string) error {
		called = append(called, name)
		if name == "b" {
			return refused
		}
		return nil
	}, func(error) bool { return true }, nil)
	if !slices.Equal(called, []string{"a", "b"}) || len(res.failed) != 1 || res.failed[0].Branch != "b" || !errors.Is(res.failed[0].Err, refused) {
		t.Fatalf("called %v, failed %v: want a and b called, b failed, c never started", called, res.failed)
	}
}

// TestWalkConcurrentCalls: nodes ready together still run at once, up to the limit.
func TestWalkConcurrentCalls(t *testing.T) {
	nodes := []node{{name: "a"}, {name: "b"}, {name: "c"}}
	var mu sync.Mutex
	started := 0
	all := make(chan struct{})
	res := walk(context.Background(), 3, nodes, func(context.Context, string) error {
		mu.Lock()
		if started++; started == len(nodes) {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("the other calls did not start meanwhile")
		}
	}, nil, nil)
	if len(res.done) != len(nodes) || len(res.failed) != 0 {
		t.Fatalf("done %v, failed %v: want all three done at once", res.done, res.failed)
	}
}

// TestWalkAllocs: a sequential saga's walk (three steps, a checkpoint before each dependent step)
// allocates its state in a few slices: 5 allocations (issue 33; 20 before, with a map per kind
// of state, the checkpoint's list copied and the results channel made without a goroutine to use
// it).
func TestWalkAllocs(t *testing.T) {
	nodes := chain("a", "b", "c")
	do := func(context.Context, string) error { return nil }
	stop := func(error) bool { return true }
	checkpoints := 0
	checkpoint := func(done []string) error {
		checkpoints++
		return nil
	}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() { walk(ctx, 16, nodes, do, stop, checkpoint) })
	if checkpoints != 2*101 {
		t.Errorf("%d checkpoints in 101 walks, want 2 per walk", checkpoints)
	}
	if allocs > 5 {
		t.Errorf("%.0f allocations per walk of a 3-step chain, want at most 5", allocs)
	}
}

// TestWalkCheckpointGetsUnsaved: the checkpoint is given the successes not yet checkpointed, in
// completion order, before a node that depends on one of them starts.
func TestWalkCheckpointGetsUnsaved(t *testing.T) {
	// a and b at once; c after both; d after c.
	nodes := []node{{name: "a", prio: 2}, {name: "b", prio: 1}, {name: "c", blockers: []string{"a", "b"}}, {name: "d", blockers: []string{"c"}}}
	var saved [][]string
	res := walk(context.Background(), 4, nodes, func(context.Context, string) error { return nil }, nil,
		func(done []string) error {
			saved = append(saved, slices.Clone(done))
			return nil
		})
	if len(saved) != 2 || len(saved[0]) != 2 || !slices.Contains(saved[0], "a") || !slices.Contains(saved[0], "b") ||
		!slices.Equal(saved[1], []string{"c"}) {
		t.Fatalf("checkpoints %v, want [a b] (either order) then [c]", saved)
	}
	if len(res.done) != 4 || res.done[3] != "d" {
		t.Fatalf("done %v", res.done)
	}
}
