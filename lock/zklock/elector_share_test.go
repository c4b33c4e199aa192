package zklock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
)

// TestIntegrationSharedElector: two components of one process share one Elector. The second
// starts after the first already leads and still runs, with the same token; when one resigns the
// other goes on leading; the candidate's node goes only when both have resigned, and then the
// other candidate leads.
func TestIntegrationSharedElector(t *testing.T) {
	t.Parallel()
	servers := testenv.ZK(t)
	path := testenv.ZKRoot(t) + "/election"
	shared, err := zklock.NewElector(session(t, servers), path, "p1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := zklock.NewElector(session(t, servers), path, "p2")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	relay, err := shared.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recovery, err := shared.Campaign(ctx) // joins the lead it already holds
	if err != nil {
		t.Fatalf("second component's Campaign on a leading Elector: %v", err)
	}
	if relay.Token() != recovery.Token() {
		t.Fatalf("tokens %s and %s, want one token for one candidate", relay.Token(), recovery.Token())
	}
	var otherLeads atomic.Bool
	done := make(chan error, 1)
	go func() {
		l, err := other.Campaign(ctx)
		if err == nil {
			otherLeads.Store(true)
			err = l.Resign(context.WithoutCancel(ctx))
		}
		done <- err
	}()
	waitChildren(t, session(t, servers), path, 2) // p2 waits behind p1
	if err := relay.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := relay.Resign(ctx); err != nil { // again: nothing more
		t.Fatal(err)
	}
	if recovery.Err() != nil {
		t.Fatalf("the other component's leadership ended with the first's resignation: %v", recovery.Err())
	}
	if id, err := other.Leader(ctx); err != nil || id != "p1" {
		t.Fatalf("Leader = %q, %v after one of two resigned; want p1", id, err)
	}
	if otherLeads.Load() {
		t.Fatal("p2 leads while p1's second component still leads")
	}
	if err := recovery.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("p2's Campaign after both of p1's resigned: %v", err)
	}
	if !otherLeads.Load() {
		t.Fatal("p2 never led")
	}
}

// TestIntegrationSharedElectorRunWhileLeader: the shape leader jobs use. A second RunWhileLeader on
// an Elector that already leads runs too (it used to retry "already campaigned" for ever).
func TestIntegrationSharedElectorRunWhileLeader(t *testing.T) {
	t.Parallel()
	el := zkenv.Elector(t, testenv.ZKRoot(t)+"/e", "p1")
	var a, b atomic.Bool
	testenv.Run(t, func(ctx context.Context) error {
		return el.RunWhileLeader(ctx, func(ctx context.Context, _ lock.Leadership) error { a.Store(true); <-ctx.Done(); return nil })
	})
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, a.Load, "the first component leads")
	testenv.Run(t, func(ctx context.Context) error {
		return el.RunWhileLeader(ctx, func(ctx context.Context, _ lock.Leadership) error { b.Store(true); <-ctx.Done(); return nil })
	})
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, b.Load, "the second component leads on the shared Elector")
}
