package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// Worker is a worker process of a multi-process test: the test binary run again by [StartWorker]
// with a configuration in an environment variable, which its TestMain hands to [RunWorker]. It
// stands for one instance of a deployment (its own sessions and pools), so a test can SIGKILL it.
type Worker struct {
	Pid  int
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // cmd.Wait's result; read after done is closed
}

// StartWorker runs the test binary again, without tests, with env set to the JSON form of cfg
// and its output in the test's log behind prefix. When the test ends, a worker still running gets
// SIGTERM and must exit with status 0 within 30 s (else it is SIGKILLed and the test fails).
func StartWorker(tb testing.TB, env string, cfg any, prefix string) *Worker {
	tb.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), env+"="+string(b))
	out := LogWriter(tb, prefix)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", prefix, err)
	}
	w := &Worker{Pid: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	go func() {
		w.err = cmd.Wait() // also waits for the output to be copied
		close(w.done)
	}()
	tb.Cleanup(func() {
		if err := w.Stop(); err != nil {
			tb.Errorf("%s %d: %v", prefix, w.Pid, err)
		}
	})
	return w
}

// Kill SIGKILLs the worker and returns once it is reaped.
func (w *Worker) Kill() {
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.done
}

// Stop SIGTERMs the worker and returns once it is reaped: an error when it did not exit with
// status 0, or not within 30 s (then it is SIGKILLed). A worker that has exited already (killed,
// say) is left as it is.
func (w *Worker) Stop() error {
	select {
	case <-w.done:
		return nil
	default:
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
		return w.err
	case <-time.After(30 * time.Second):
		w.Kill()
		return errors.New("did not exit within 30s of SIGTERM")
	}
}

// RunWorker is what a TestMain calls first: in a worker started by [StartWorker] with env, it
// decodes the configuration into a C, runs fn with a ctx that ends on SIGTERM or SIGINT, and
// returns the exit code (0 when fn returned nil; 1, with the error on stderr, otherwise) and
// true; in the test process itself it returns (0, false).
func RunWorker[C any](env string, fn func(ctx context.Context, cfg C) error) (int, bool) {
	raw := os.Getenv(env)
	if raw == "" {
		return 0, false
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var c C
	err := json.Unmarshal([]byte(raw), &c)
	if err == nil {
		err = fn(ctx, c)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker %d (%s): %v\n", os.Getpid(), env, err)
		return 1, true
	}
	return 0, true
}

// KillDrill loads total items in three bursts (load(from, to)) while workers do them, and
// SIGKILLs a worker in the middle of each of the first two: once progress reports half the items
// loaded so far done, it kills workers[0] (and starts restart's replacement), then after the
// second burst workers[1]. It returns once progress reports total (within a minute per step, or
// the test fails), with the workers, the replacement last.
func KillDrill(t testing.TB, workers []*Worker, restart func() *Worker, load func(from, to int), progress func() int, total int) []*Worker {
	t.Helper()
	third := total / 3
	for i, victim := range workers[:2] {
		load(i*third, (i+1)*third)
		want := i*third + third/2
		Eventually(t, time.Minute, 50*time.Millisecond, func() bool { return progress() >= want },
			"fewer than %d of %d items done before kill %d", want, (i+1)*third, i+1)
		victim.Kill()
		t.Logf("SIGKILLed worker %d after %d items were done", victim.Pid, want)
		if i == 0 {
			workers = append(workers, restart())
		}
	}
	load(2*third, total)
	var done int
	Eventually(t, time.Minute, 100*time.Millisecond, func() bool { done = progress(); return done >= total },
		"%d of %d items done after the kills", &done, total)
	return workers
}
