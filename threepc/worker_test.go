package threepc_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/threepc"
)

// envWorker makes the test binary a starter that SIGKILLs itself in the middle of a commit (see
// worker): the value is "<phase>|<gid>|<log URL>|<log schema>|<east URL>|<west URL>".
const envWorker = "TXKIT_3PC_KILLED_STARTER"

// killedStarter runs, in a process of its own, a transfer of 40 from alice to bob with gid that
// SIGKILLs itself at phase p, and waits for it to die.
func (w *world) killedStarter(gid string, p core.Phase) {
	w.T.Helper()
	cmd := exec.CommandContext(w.T.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorker+"="+strings.Join([]string{string(p), gid, w.Log.URL, w.Log.Name, w.East.URL, w.West.URL}, "|"))
	out, err := cmd.CombinedOutput()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		w.T.Fatalf("the starter was not SIGKILLed at %s: %v\n%s", p, err, out)
	}
}

// worker is the killed starter's process: it commits the transfer and SIGKILLs itself from the
// hook at the phase it was given. It returns an exit code when it was not killed.
func worker() int {
	parts := strings.Split(os.Getenv(envWorker), "|")
	if len(parts) != 6 {
		fmt.Fprintln(os.Stderr, "bad", envWorker)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pools := make([]*pgxpool.Pool, 3)
	for i, url := range []string{parts[2], parts[4], parts[5]} {
		p, err := pgxpool.New(ctx, url)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer p.Close()
		pools[i] = p
	}
	c, err := threepc.New(pools[0], coordinator.WithSchema(parts[3]), threepc.WithTimeouts(500*time.Millisecond, time.Second, participantTimeout),

		coordinator.WithDefaultTimeout(6*time.Second), coordinator.WithLease(200*time.Millisecond), core.WithPhaseHook(func(_ context.Context, _ string, p core.Phase) error {
			if string(p) == parts[0] {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				time.Sleep(time.Minute)
			}
			return nil
		}))
	if err == nil {
		err = c.RegisterDB("east", pools[1])
	}
	if err == nil {
		err = c.RegisterDB("west", pools[2])
	}
	var g *threepc.Global
	if err == nil {
		g, err = c.Begin(ctx, coordinator.WithGID(parts[1]))
	}
	if err == nil {
		err = move(g, 40)
	}
	if err == nil {
		err = g.Commit(ctx)
	}
	fmt.Fprintf(os.Stderr, "the starter was not killed at %s: commit returned %v\n", parts[0], err)
	return 1
}
