package twopc_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/twopc"
)

// TestIntegrationDisruptivePGRestart restarts the PostgreSQL server (deploy/local/postgres
// restart) while a decided transaction's branches are prepared and its starter is stuck before
// phase two. The prepared transactions survive the restart, and a leader started afterwards
// commits them. It stops a server the other tests use, so `make test` runs it last, alone.
func TestIntegrationDisruptivePGRestart(t *testing.T) {
	ctx := t.Context()
	b := newBank(t)
	held, release := make(chan string, 1), make(chan struct{})
	starter := b.coordinator(coordinator.WithLease(500*time.Millisecond), core.WithPhaseHook(func(_ context.Context, gid string, p core.Phase) error {
		if p == core.PhaseDecided {
			held <- gid
			<-release
		}
		return nil
	}))
	g, _ := starter.Begin(ctx)
	if err := b.move(ctx, g, 25); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Commit(ctx) }()
	gid := <-held
	defer func() {
		close(release)
		<-done // its phase two ran against a restarted server: whatever it says, the leader finished
	}()

	script, err := filepath.Abs(filepath.Join("..", "deploy", "local", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if out, err := exec.CommandContext(ctx, script, "restart").CombinedOutput(); err != nil {
		t.Fatalf("%s restart: %v\n%s", script, err, out)
	}
	t.Logf("PostgreSQL restarted in %v", time.Since(start).Round(time.Millisecond))
	// The pools' connections died with the old server: drop them, and wait until new ones work.
	for _, p := range []*testenv.Schema{b.Log, b.East, b.West} {
		p.Pool.Reset()
	}
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() bool {
		return b.Log.Pool.Ping(ctx) == nil
	}, "PostgreSQL did not answer after the restart")
	if n := len(b.Prepared(ctx)); n != 2 {
		t.Fatalf("%d prepared transactions after the restart, want the 2 of %s", n, gid)
	}
	b.WantBalances(startBalance, startBalance)

	leader := b.coordinator(coordinator.WithElector(b.elector("leader")))
	run(t, leader)
	testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		s, err := leader.Status(ctx, gid)
		return err == nil && s == twopc.StatusCommitted && len(b.Prepared(ctx)) == 0
	}, "the leader did not commit the prepared transactions after the restart")
	b.WantBalances(startBalance-25, startBalance+25)
}
