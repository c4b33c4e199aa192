package core_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/participant"
)

type panicking struct{}

func (panicking) Do(context.Context, participant.Request) error { panic("participant blew up") }

// A participant that panics makes Call return an error ("panic: <value>", a *core.PanicError),
// never a refusal, and logs the panic with the stack of the panicking goroutine.
func TestIntegrationCallRecoversPanic(t *testing.T) {
	var logs coretest.LogBuffer
	b, err := core.NewBase(testenv.PG(t).Pool, core.Protocol{Name: "tcc", Kind: core.KindTCC, Prefix: "txkit_", Timeout: time.Minute},
		[]core.Option{func(c *core.Config) { c.Logger = logs.Logger() }})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Call(t.Context(), panicking{}, participant.Request{GID: "g1", Branch: "b1", Op: participant.OpConfirm})
	if err == nil || err.Error() != "panic: participant blew up" || errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Call = %v, want the error \"panic: participant blew up\"", err)
	}
	out := logs.String()
	for _, want := range []string{"core: participant panicked", "gid=g1", "branch=b1", "op=confirm",
		`panic="participant blew up"`, "stack=", "panic_test.go"} {
		if !strings.Contains(out, want) {
			t.Fatalf("log %q lacks %q", out, want)
		}
	}
}

// A Driver that panics does not crash the leader: the drive is rescheduled with backoff (the
// delay before the next attempt grows), the panic is stored as last_error and logged with its
// stack, the recoverer keeps leading, and the transaction finishes once the driver stops
// panicking. (Before the recover, the test binary crashed.)
func TestIntegrationRecovererDriverPanics(t *testing.T) {
	ctx := t.Context()
	l := newLog(t, core.WithBackoff(100*time.Millisecond, 10*time.Second))
	if err := l.Create(ctx, "g", core.KindTCC, time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.AddBranch(ctx, "g", core.StatusTrying, httpBranch("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Decide(ctx, "g", core.StatusTrying, core.StatusConfirming); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, lock.Token{}, core.Progress{GID: "g", From: core.StatusConfirming, Err: errors.New("starter gave up")}); err != nil {
		t.Fatal(err) // due at once for the leader, attempts 1
	}
	var panics atomic.Bool
	panics.Store(true)
	var drives atomic.Int64
	drv := core.DriverFunc(func(ctx context.Context, tok lock.Token, tx *core.Transaction) error {
		drives.Add(1)
		if panics.Load() {
			var bug *core.Transaction
			_ = bug.GID // a nil dereference: a runtime panic, as a bug in a driver would be
		}
		return l.Record(ctx, tok, core.Progress{GID: tx.GID, From: tx.Status, Done: []string{"a"}, Next: core.StatusConfirmed})
	})
	var logs coretest.LogBuffer
	el := elector(t, testenv.ZKRoot(t)+"/leader", "r1")
	r, err := core.NewRecoverer(l, el, map[core.Kind]core.Driver{core.KindTCC: drv},
		core.WithSchedule("@every 20ms"), core.WithLogger(logs.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	run(t, r.Run)
	delays := coretest.WatchBackoff(t, l.Lease(), 5, func() *core.Transaction { return get(t, l, "g") }, func(tx *core.Transaction) bool {
		return drives.Load() >= 4 && strings.HasPrefix(tx.LastError, "panic: runtime error: invalid memory address or nil pointer dereference")
	})
	coretest.Leads(t, el, "r1")
	if st := r.Stats(); st.Failed < 3 {
		t.Fatalf("stats %+v, want Failed ≥ 3", st)
	}
	out := logs.String()
	for _, want := range []string{"core: driver panicked; rescheduled", "gid=g", "stack=", "panic_test.go"} {
		if !strings.Contains(out, want) {
			t.Fatalf("log lacks %q:\n%s", want, out)
		}
	}
	t.Logf("backoff delays by attempt: %v", delays)
	panics.Store(false)
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		return get(t, l, "g").Status == core.StatusConfirmed
	}, "the transaction finishes once the driver stops panicking")
}
