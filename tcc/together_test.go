package tcc_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/tcc"
)

// branches returns tcc branches b<from>..b<to-1> on p.
func branches(p participant.Participant, from, to int) []tcc.Branch {
	var bs []tcc.Branch
	for i := from; i < to; i++ {
		bs = append(bs, tcc.Branch{Name: fmt.Sprint("b", i), Participant: p})
	}
	return bs
}

// recordedBranches returns how many branches of gid the log holds.
func recordedBranches(t *testing.T, e *env, gid string) int {
	t.Helper()
	var n int
	if err := e.Schema.Pool.QueryRow(t.Context(), `select count(*) from txkit_branch where gid = $1`, gid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// holder is a participant that holds every call of op until release, counting those in flight;
// it passes every call to next.
type holder struct {
	op             participant.Op
	next           participant.Participant
	mu             sync.Mutex
	inflight, peak int
	held           chan struct{}
}

func newHolder(op participant.Op, next participant.Participant) *holder {
	return &holder{op: op, next: next, held: make(chan struct{})}
}

func (h *holder) Do(ctx context.Context, req participant.Request) error {
	if err := h.next.Do(ctx, req); err != nil || req.Op != h.op {
		return err
	}
	h.mu.Lock()
	h.inflight++
	h.peak = max(h.peak, h.inflight)
	h.mu.Unlock()
	select { // hold the call until the test has seen the limit reached
	case <-h.held:
	case <-ctx.Done():
	}
	h.mu.Lock()
	h.inflight--
	h.mu.Unlock()
	return nil
}

// release waits until n calls are held, releases them (and every later one), waits for done's
// error (fails t unless nil) and returns the most calls held at once.
func (h *holder) release(t *testing.T, n int, done <-chan error) int {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.inflight == n
	}, "%d calls of %s in flight", n, h.op)
	close(h.held)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.peak
}

// Branches given to one Try are recorded in one write — with the transaction by a first Try,
// alone by a later one — and tried at most WithConcurrency at once; the transaction commits
// every one of them.
func TestIntegrationTryTogether(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	const limit = 2
	c := e.coordinator(coordinator.WithConcurrency(limit))
	p := newParty(nil)
	hold := newHolder(participant.OpTry, p)
	h := register(t, c, "p", hold)
	g, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bs := branches(h, 0, 5)
	done := make(chan error, 1)
	go func() { done <- g.Try(ctx, bs[0], bs[1:3]...) }() // the first Try: records the transaction
	if peak := hold.release(t, limit, done); peak != limit {
		t.Fatalf("peak concurrency %d, want %d", peak, limit)
	}
	if err := g.Try(ctx, bs[3], bs[4]); err != nil { // a later Try: the branches alone
		t.Fatalf("Try of 2: %v", err)
	}
	if n := recordedBranches(t, e, g.GID()); n != 5 {
		t.Fatalf("%d branches recorded, want 5", n)
	}
	if err := g.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if s := status(t, c, g.GID()); s != tcc.StatusConfirmed || p.count("try") != 5 || p.count("confirm") != 5 {
		t.Fatalf("status %s, calls %v", s, p.calls)
	}
}

// A Try of several branches refuses them all when one name is given twice or already tried,
// recording none; one refused try records the rollback, and Rollback cancels every branch.
func TestIntegrationTryTogetherRefused(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	c := e.coordinator()
	p := newParty(func(req participant.Request) error {
		if req.Op == participant.OpTry && req.Branch == "b1" {
			return fmt.Errorf("out of stock: %w", participant.ErrRefused)
		}
		return nil
	})
	h := register(t, c, "p", p)
	g, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bs := branches(h, 0, 4)
	if err := g.Try(ctx, bs[0], bs[2], bs[0]); !errors.Is(err, coordinator.ErrInvalidBranch) {
		t.Fatalf("Try with a name twice = %v, want ErrInvalidBranch", err)
	}
	if _, err := c.Status(ctx, g.GID()); !errors.Is(err, coordinator.ErrNotFound) {
		t.Fatalf("Status after a refused first Try = %v, want ErrNotFound", err)
	}
	if err := g.Try(ctx, bs[0]); err != nil {
		t.Fatal(err)
	}
	if err := g.Try(ctx, bs[3], bs[0]); !errors.Is(err, coordinator.ErrInvalidBranch) {
		t.Fatalf("Try with a name already tried = %v, want ErrInvalidBranch", err)
	}
	if n := p.count("try/b3"); n != 0 {
		t.Fatalf("b3 tried %d times by a refused Try", n)
	}
	err = g.Try(ctx, bs[1], bs[2])
	var be *coordinator.BranchError
	if !errors.Is(err, participant.ErrRefused) || !errors.As(err, &be) || be.Branch != "b1" || be.Op != participant.OpTry {
		t.Fatalf("Try with a refusal = %v, want a BranchError of b1 wrapping participant.ErrRefused", err)
	}
	if s := status(t, c, g.GID()); s != tcc.StatusCancelling {
		t.Fatalf("status after the refusal: %s, want cancelling", s)
	}
	if err := g.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var cause string
	if err := e.Schema.Pool.QueryRow(ctx, `select coalesce(abort_cause, '') from txkit_global where gid = $1`, g.GID()).Scan(&cause); err != nil {
		t.Fatal(err)
	}
	if s, n := status(t, c, g.GID()), recordedBranches(t, e, g.GID()); s != tcc.StatusCancelled || n != 3 || cause != "refused" {
		t.Fatalf("status %s, %d branches, cause %q", s, n, cause)
	}
	for _, b := range []string{"b0", "b1", "b2"} {
		if p.count("cancel/"+b) != 1 {
			t.Fatalf("calls %v", p.calls)
		}
	}
	if p.count("cancel/b3") != 0 || p.count("confirm") != 0 {
		t.Fatalf("calls %v", p.calls)
	}
}

// After a failed try among several, no further try is launched; the transaction stays trying, and
// the leader cancels every branch given, tried or not, at its timeout.
func TestIntegrationTryTogetherFailureCancelledAtTimeout(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	c := e.coordinator(coordinator.WithElector(e.Elector("only")), coordinator.WithConcurrency(1))
	p := newParty(func(req participant.Request) error {
		if req.Op == participant.OpTry && req.Branch == "b1" {
			return errDown
		}
		return nil
	})
	h := register(t, c, "p", p)
	run(t, c)
	g, err := c.Begin(ctx, coordinator.WithTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	bs := branches(h, 0, 3)
	if err := g.Try(ctx, bs[0], bs[1:]...); !errors.Is(err, errDown) || errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Try = %v, want the failure of b1", err)
	}
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		return status(t, c, g.GID()) == tcc.StatusCancelled
	}, "the timed-out transaction is cancelled")
	if p.count("try/b2") != 0 || p.count("cancel") != 3 || p.count("confirm") != 0 {
		t.Fatalf("calls %v", p.calls)
	}
}
