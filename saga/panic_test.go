package saga_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/saga"
)

// sagaLog opens the test's saga tables as a core.Log, with lease (zero: the default).
func sagaLog(t *testing.T, e *env, lease time.Duration) *core.Log {
	t.Helper()
	opts := []core.LogOption{core.WithSchema(e.Schema.Name), core.WithTablePrefix("txkit_saga_")}
	if lease > 0 {
		opts = append(opts, core.WithLease(lease))
	}
	l, err := core.New(e.Schema.Pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A panicking in-process participant crashes nothing. The starter's Submit returns an error
// naming the panic (a transient failure: not compensated). The leader, running in this test
// process, calls the panicking action again and again: it keeps leading, the step's last error
// records the panic, the attempts are backed off (the delay before the next one grows), and the
// saga succeeds once the participant stops panicking. (Before the recover, the test binary
// crashed.)
func TestIntegrationPanickingParticipant(t *testing.T) {
	e := newEnv(t)
	el := e.Elector("leader")
	c := e.coordinator(coordinator.WithElector(el), coordinator.WithRetry(10*time.Second, 100*time.Millisecond, 10*time.Second),
		coordinator.WithRecovery("@every 20ms", 100, 16), saga.WithAttempts(2))
	var panics atomic.Bool
	panics.Store(true)
	p := newParty(func(req participant.Request) error {
		if panics.Load() && req.Branch == "s2" {
			panic("boom in " + req.Op.String())
		}
		return nil
	})
	h := register(t, c, "p", p)
	run(t, c)

	gid, err := submit(t, c, sequential(h, 3))
	var se *coordinator.BranchError
	if !errors.Is(err, coordinator.ErrIncomplete) || !errors.As(err, &se) || se.Branch != "s2" ||
		!strings.Contains(err.Error(), "panic: boom in action") || errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Submit = %v, want ErrIncomplete with a StepError of s2 naming the panic", err)
	}
	if n := p.Count("action/s2"); n != 2 {
		t.Fatalf("the starter called the panicking action %d times, want 2 (WithAttempts)", n)
	}

	l := sagaLog(t, e, 0)
	get := func() *core.Transaction { return coretest.Get(t, l, gid) }
	step := func(tx *core.Transaction, name string) core.Branch {
		for _, b := range tx.Branches {
			if b.Name == name {
				return b
			}
		}
		t.Fatalf("no step %s in %+v", name, tx.Branches)
		return core.Branch{}
	}
	delays := coretest.WatchBackoff(t, l.Lease(), 4, get, func(tx *core.Transaction) bool {
		b := step(tx, "s2")
		return p.Count("action/s2") >= 5 && b.Attempts >= 4 && b.LastError == "panic: boom in action"
	})
	t.Logf("backoff delays by attempt: %v", delays)
	coretest.Leads(t, el, "leader")
	if tx := get(); tx.Status != saga.StatusRunning || !strings.Contains(tx.LastError, "panic: boom in action") {
		t.Fatalf("saga %s, last error %q", tx.Status, tx.LastError)
	}
	if n := p.Count("action/s3"); n != 0 {
		t.Fatalf("s3 ran %d times before s2 succeeded", n)
	}
	panics.Store(false)
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		return status(t, c, gid) == saga.StatusSucceeded
	}, "the saga succeeds once the participant stops panicking")
	if n := p.Count("compensate/s1"); n != 0 {
		t.Fatalf("s1 was compensated %d times: a panic is not a refusal", n)
	}
}

// A saga in the log whose dependencies name a step it does not have (Submit never writes one;
// a row written by another version or by hand can) made the leader's drive dereference a nil
// step and crash the process, and with it every leader in turn. Now the drive fails: the saga is
// rescheduled with backoff and the error stored, the leader keeps leading, and it still drives
// the other sagas.
func TestIntegrationUnknownDependencyDoesNotCrashLeader(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	el := e.Elector("leader")
	c := e.coordinator(coordinator.WithElector(el), coordinator.WithRecovery("@every 20ms", 100, 16))
	p := newParty(nil)
	register(t, c, "p", p)
	// A short lease: the leader finds the sagas due at once, as if their starter had died.
	l := sagaLog(t, e, 10*time.Millisecond)
	step := core.Branch{Name: "s1", Target: core.Target{Kind: core.TargetInProc, Ref: "p"}}
	if err := l.Create(ctx, "bad", core.KindSaga, time.Hour, []byte(`{"deps":{"s1":["ghost"]}}`), step); err != nil {
		t.Fatal(err)
	}
	run(t, c)
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		tx := coretest.Get(t, l, "bad")
		return tx.Attempts >= 3 && strings.Contains(tx.LastError, `step "s1" depends on "ghost", which is not a step of the saga`)
	}, "the unreadable saga is rescheduled with its error stored")
	coretest.Leads(t, el, "leader")
	if n := p.Count("action/s1"); n != 0 {
		t.Fatalf("the unreadable saga's step ran %d times", n)
	}
	if err := l.Create(ctx, "good", core.KindSaga, time.Hour, nil, step); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		return status(t, c, "good") == saga.StatusSucceeded
	}, "the leader still drives the other sagas")
	if st := status(t, c, "bad"); st != saga.StatusRunning {
		t.Fatalf("the unreadable saga is %s, want running (retried, never dropped)", st)
	}
}
