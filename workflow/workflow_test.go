package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/workflow"
)

type order struct {
	Item string `json:"item"`
	Qty  int    `json:"qty"`
}

type receipt struct {
	Reservation string `json:"reservation"`
	Amount      int    `json:"amount"`
}

type payment struct {
	Reservation string `json:"reservation"`
	Amount      int    `json:"amount"`
}

// TestIntegrationFourSteps: a 4-step workflow whose third step uses the second's result commits;
// every step is recorded, the output is the function's, and the coordinators' metrics count it
// with protocol "workflow".
func TestIntegrationFourSteps(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	c := e.coordinator(coordinator.WithTelemetry(reg, nil))
	var j journal
	var paid []string
	pay := &party{Answer: func(r participant.Request) error {
		if r.Op == participant.OpAction {
			paid = append(paid, string(r.Payload))
		}
		return nil
	}}
	ship := &party{}
	payP, shipP := coretest.Register(t, c, "pay", pay), coretest.Register(t, c, "ship", ship)
	if err := workflow.Register(c, "order", func(ctx workflow.Context, in order) (receipt, error) {
		amount, err := workflow.Step(ctx, "price", func(context.Context) (int, error) {
			j.add("price")
			return in.Qty * 10, nil
		})
		if err != nil {
			return receipt{}, err
		}
		res, err := workflow.StepWithCompensation(ctx, "reserve", func(context.Context) (string, error) {
			j.add("reserve")
			return "R-" + in.Item, nil
		}, func(context.Context, string) error { j.add("release"); return nil })
		if err != nil {
			return receipt{}, err
		}
		if err := workflow.Call(ctx, "pay", payP, payment{Reservation: res, Amount: amount}); err != nil {
			return receipt{}, err
		}
		if err := workflow.Call(ctx, "ship", shipP, nil); err != nil {
			return receipt{}, err
		}
		return receipt{Reservation: res, Amount: amount}, nil
	}); err != nil {
		t.Fatal(err)
	}
	out, err := c.Start(t.Context(), "order", order{Item: "book", Qty: 3})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	var got receipt
	if err := out.Decode(&got); err != nil || got != (receipt{Reservation: "R-book", Amount: 30}) || out.Status != workflow.StatusSucceeded {
		t.Fatalf("outcome %+v %+v (%v), want succeeded with {R-book 30}", out, got, err)
	}
	if want := []string{`{"reservation":"R-book","amount":30}`}; !slices.Equal(paid, want) {
		t.Fatalf("pay got %q, want %q (step 3 uses step 2's result)", paid, want)
	}
	if want := []string{"price", "reserve"}; !slices.Equal(j.get(), want) {
		t.Fatalf("local steps ran %q, want %q", j.get(), want)
	}
	if want := []string{"action/ship"}; !slices.Equal(ship.Log(), want) {
		t.Fatalf("ship got %q, want %q", ship.Log(), want)
	}
	w, err := c.Wait(t.Context(), out.GID)
	if err != nil || string(w.Output) != string(out.Output) {
		t.Fatalf("Wait = %+v, %v; want the output %s", w, err, out.Output)
	}
	if n := testutil.ToFloat64(mustCounter(t, reg, "txkit_coordinator_transactions_finished_total", "outcome=committed", "protocol=workflow")); n != 1 {
		t.Fatalf("finished{protocol=workflow,outcome=committed} = %v, want 1", n)
	}
	if n := testutil.ToFloat64(mustCounter(t, reg, "txkit_coordinator_branch_calls_total", "op=action", "protocol=workflow", "result=ok", "transport=inproc")); n != 2 {
		t.Fatalf("branch_calls{protocol=workflow,op=action} = %v, want 2", n)
	}
}

// mustCounter returns the series of the counter vector name with labels ("name=value", all of
// them, in the order of their names), from reg.
func mustCounter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var vals []string
			for _, l := range m.GetLabel() {
				vals = append(vals, l.GetName()+"="+l.GetValue())
			}
			if slices.Equal(vals, labels) {
				g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
				g.Set(m.GetCounter().GetValue())
				return g
			}
		}
	}
	t.Fatalf("no series %s%q", name, labels)
	return nil
}

// TestIntegrationRefusedStepCompensatesInReverse: a participant refusing the fourth step makes
// the workflow compensate the three completed ones, the last first, each once, each recorded.
func TestIntegrationRefusedStepCompensatesInReverse(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	e := newEnv(t)
	c := e.coordinator()
	var j journal
	b := &party{Answer: func(r participant.Request) error {
		j.add(r.Op.String() + "/" + r.Branch)
		return nil
	}}
	d := &party{Answer: func(r participant.Request) error {
		j.add(r.Op.String() + "/" + r.Branch)
		if r.Op != participant.OpAction {
			return nil
		}
		return fmt.Errorf("no funds: %w", participant.ErrRefused)
	}}
	bP, dP := coretest.Register(t, c, "b", b), coretest.Register(t, c, "d", d)
	local := func(name string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { j.add("step/" + name); return name + "-done", nil }
	}
	undo := func(name string) func(context.Context, string) error {
		return func(_ context.Context, res string) error { j.add("undo/" + name + "(" + res + ")"); return nil }
	}
	if err := workflow.Register(c, "refused", func(ctx workflow.Context, _ struct{}) (string, error) {
		if _, err := workflow.StepWithCompensation(ctx, "a", local("a"), undo("a")); err != nil {
			return "", err
		}
		if err := workflow.Call(ctx, "b", bP, nil); err != nil {
			return "", err
		}
		if _, err := workflow.StepWithCompensation(ctx, "c", local("c"), undo("c")); err != nil {
			return "", err
		}
		if err := workflow.Call(ctx, "d", dP, nil); err != nil {
			return "", err
		}
		return "unreachable", nil
	}); err != nil {
		t.Fatal(err)
	}
	out, err := c.Start(t.Context(), "refused", struct{}{})
	if !errors.Is(err, workflow.ErrCompensated) || !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Start = %v, want ErrCompensated and ErrRefused", err)
	}
	want := []string{"step/a", "action/b", "step/c", "action/d", "compensate/d", "undo/c(c-done)", "compensate/b", "undo/a(a-done)"}
	if got := j.get(); !slices.Equal(got, want) {
		t.Fatalf("ran %q, want %q", got, want)
	}
	// A compensated finish is deferred (the default): it reaches the log with the next write or
	// within 100 ms; another log's reader sees it once flushed.
	if err := c.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	tx := coretest.Get(t, e.logOf(t, c), out.GID)
	if tx.Status != workflow.StatusCompensated {
		t.Fatalf("status %s, want compensated", tx.Status)
	}
	status := map[string]string{}
	for _, br := range tx.Branches {
		status[br.Name] = br.Status.String()
		if br.Name == "d" && !strings.Contains(br.Refusal, "no funds") {
			t.Fatalf("d's refusal %q, want the participant's", br.Refusal)
		}
	}
	if want := map[string]string{"a": "compensated", "b": "compensated", "c": "compensated", "d": "compensated", "$result": "succeeded"}; fmt.Sprint(status) != fmt.Sprint(want) {
		t.Fatalf("steps %v, want %v", status, want)
	}
	if _, err := c.Wait(t.Context(), out.GID); !errors.Is(err, workflow.ErrCompensated) || !strings.Contains(err.Error(), "no funds") {
		t.Fatalf("Wait = %v, want ErrCompensated with the refusal", err)
	}
}

// TestIntegrationNondeterministicReplayStops: the leader resuming a workflow whose function now
// asks for another step than the log holds stops it for an operator.
func TestIntegrationNondeterministicReplayStops(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	e := newEnv(t)
	starter := e.coordinator()
	flaky := &party{Answer: func(participant.Request) error { return errors.New("unavailable") }}
	fP := coretest.Register(t, starter, "flaky", flaky)
	if err := workflow.Register(starter, "nd", func(ctx workflow.Context, _ int) (int, error) {
		if _, err := workflow.Step(ctx, "first", func(context.Context) (int, error) { return 1, nil }); err != nil {
			return 0, err
		}
		return 0, workflow.Call(ctx, "second", fP, nil)
	}); err != nil {
		t.Fatal(err)
	}
	out, err := starter.Start(t.Context(), "nd", 1)
	if !errors.Is(err, coordinator.ErrIncomplete) {
		t.Fatalf("Start = %v, want ErrIncomplete (the call keeps failing)", err)
	}
	// Another deployment of "nd": its first step is called otherwise.
	leader := e.leader()
	coretest.Register(t, leader, "flaky", &party{})
	var ran bool
	if err := workflow.Register(leader, "nd", func(ctx workflow.Context, _ int) (int, error) {
		_, err := workflow.Step(ctx, "renamed", func(context.Context) (int, error) { ran = true; return 2, nil })
		return 0, err
	}); err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, leader.Run)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	w, err := leader.Wait(ctx, out.GID)
	if !errors.Is(err, workflow.ErrNondeterministic) || w.Status != workflow.StatusStopped {
		t.Fatalf("Wait = %+v, %v; want stopped, ErrNondeterministic", w, err)
	}
	if ran {
		t.Fatal("the diverging step ran")
	}
	if !strings.Contains(err.Error(), `"renamed"`) || !strings.Contains(err.Error(), `"first"`) {
		t.Fatalf("error %q does not name both steps", err)
	}
}

// TestIntegrationDeadlineCompensates: a workflow whose deadline passes during a durable sleep is
// compensated, with ErrTimeout.
func TestIntegrationDeadlineCompensates(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	e := newEnv(t)
	c := e.coordinator()
	var j journal
	if err := workflow.Register(c, "slow", func(ctx workflow.Context, _ int) (int, error) {
		if _, err := workflow.StepWithCompensation(ctx, "a", func(context.Context) (int, error) { return 1, nil },
			func(context.Context, int) error { j.add("undo/a"); return nil }); err != nil {
			return 0, err
		}
		if err := workflow.Sleep(ctx, time.Minute); err != nil {
			return 0, err
		}
		j.add("after")
		return 2, nil
	}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Start(t.Context(), "slow", 0, coordinator.WithTimeout(300*time.Millisecond))
	if !errors.Is(err, workflow.ErrCompensated) || !errors.Is(err, coordinator.ErrTimeout) {
		t.Fatalf("Start = %v, want ErrCompensated and ErrTimeout", err)
	}
	if want := []string{"undo/a"}; !slices.Equal(j.get(), want) {
		t.Fatalf("ran %q, want %q", j.get(), want)
	}
	// A call in flight at the deadline, its answer unknown, is compensated.
	var xj journal
	xP := coretest.Register(t, c, "x", participant.ParticipantFunc(func(ctx context.Context, r participant.Request) error {
		xj.add(r.Op.String() + "/" + r.Branch)
		if r.Op == participant.OpAction {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}))
	if err := workflow.Register(c, "stuck", func(ctx workflow.Context, _ int) (int, error) {
		return 0, workflow.Call(ctx, "x", xP, nil)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(t.Context(), "stuck", 0, coordinator.WithTimeout(300*time.Millisecond)); !errors.Is(err, coordinator.ErrTimeout) {
		t.Fatalf("Start(stuck) = %v, want ErrTimeout", err)
	}
	if want := []string{"action/x", "compensate/x"}; !slices.Equal(xj.get(), want) {
		t.Fatalf("x got %q, want %q", xj.get(), want)
	}
}

// TestIntegrationBadInput: unregistered names, inputs that are not JSON or too large, and a
// step result too large to record are refused with clear errors.
func TestIntegrationBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	e := newEnv(t)
	c := e.coordinator()
	if _, err := c.Start(t.Context(), "nope", 1); !errors.Is(err, workflow.ErrNotRegistered) {
		t.Fatalf("Start(unregistered) = %v, want ErrNotRegistered", err)
	}
	if err := workflow.Register(c, "big", func(ctx workflow.Context, in string) (string, error) {
		return workflow.Step(ctx, "grow", func(context.Context) (string, error) {
			return strings.Repeat(in, workflow.MaxRecordSize), nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	if err := workflow.Register(c, "big", func(workflow.Context, string) (string, error) { return "", nil }); !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Fatalf("Register twice = %v, want ErrInvalidOption", err)
	}
	if _, err := c.Start(t.Context(), "big", make(chan int)); !errors.Is(err, workflow.ErrEncoding) {
		t.Fatalf("Start(chan) = %v, want ErrEncoding", err)
	}
	if _, err := c.Start(t.Context(), "big", strings.Repeat("x", workflow.MaxRecordSize)); !errors.Is(err, workflow.ErrTooLarge) {
		t.Fatalf("Start(huge input) = %v, want ErrTooLarge", err)
	}
	out, err := c.Start(t.Context(), "big", "xy")
	if !errors.Is(err, workflow.ErrTooLarge) || !errors.Is(err, workflow.ErrCompensated) {
		t.Fatalf("Start(huge result) = %v, want ErrTooLarge and ErrCompensated", err)
	}
	tx := coretest.Get(t, e.logOf(t, c), out.GID)
	if len(tx.Branches) != 2 || !strings.Contains(tx.Branches[0].Refusal+tx.Branches[1].Refusal, "too large") {
		t.Fatalf("rows %+v, want the step's error recorded", tx.Branches)
	}
}

// TestIntegrationTCCSteps: a TCC participant's try is a step; it is confirmed once the function
// succeeded (after the steps that followed it), cancelled when the workflow rolls back.
func TestIntegrationTCCSteps(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	e := newEnv(t)
	c := e.coordinator()
	var j journal
	hold := &party{Answer: func(r participant.Request) error { j.add(r.Op.String() + "/" + r.Branch); return nil }}
	pay := &party{Answer: func(r participant.Request) error {
		j.add(r.Op.String() + "/" + r.Branch)
		if string(r.Payload) == "500" && r.Op == participant.OpAction {
			return participant.ErrRefused
		}
		return nil
	}}
	holdP, payP := coretest.Register(t, c, "hold", hold), coretest.Register(t, c, "pay", pay)
	if err := workflow.Register(c, "tcc", func(ctx workflow.Context, amount int) (int, error) {
		if err := workflow.Try(ctx, "hold", holdP, amount); err != nil {
			return 0, err
		}
		return amount, workflow.Call(ctx, "pay", payP, amount)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(t.Context(), "tcc", 50); err != nil {
		t.Fatalf("Start(50): %v", err)
	}
	if want := []string{"try/hold", "action/pay", "confirm/hold"}; !slices.Equal(j.get(), want) {
		t.Fatalf("ran %q, want %q", j.get(), want)
	}
	j = journal{}
	out, err := c.Start(t.Context(), "tcc", 500)
	if !errors.Is(err, workflow.ErrCompensated) || !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Start(500) = %v, want ErrCompensated, ErrRefused", err)
	}
	if want := []string{"try/hold", "action/pay", "compensate/pay", "cancel/hold"}; !slices.Equal(j.get(), want) {
		t.Fatalf("ran %q, want %q", j.get(), want)
	}
	for _, br := range coretest.Get(t, e.logOf(t, c), out.GID).Branches {
		if br.Name == "hold" && br.Status.String() != "cancelled" {
			t.Fatalf("hold is %s, want cancelled", br.Status)
		}
	}
}

// TestIntegrationLostStepRecord: the starter's step records do not wait for PostgreSQL's flush
// (synchronous_commit off for their transactions; the outcome waits), so a crash of PostgreSQL may
// lose the last of them. A starter that goes on finds its next record refused and leaves the
// workflow to the leader, whose replay sends the calls without a record again with the same
// identity and ends with every step recorded and the output of an uninterrupted run.
func TestIntegrationLostStepRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	e := newEnv(t)
	ctx := t.Context()
	starter := e.coordinator(coordinator.WithLease(time.Second))
	syncs := coretest.SyncCommits(t, e.Schema.Pool, "txkit_workflow_branch")
	var calls journal
	p := &party{Answer: func(r participant.Request) error { calls.add(r.GID + " " + r.Op.String() + "/" + r.Branch); return nil }}
	var lose atomic.Bool
	register := func(c *workflow.Coordinator) {
		pP := coretest.Register(t, c, "p", p)
		if err := workflow.Register(c, "three", func(ctx workflow.Context, in int) (int, error) {
			if err := workflow.Call(ctx, "a", pP, in); err != nil {
				return 0, err
			}
			if lose.CompareAndSwap(true, false) {
				// What a crash of PostgreSQL does to records not yet flushed: a's row is gone.
				if _, err := e.Schema.Pool.Exec(ctx, `delete from txkit_workflow_branch where gid = $1`, ctx.GID()); err != nil {
					return 0, err
				}
			}
			if err := workflow.Call(ctx, "b", pP, in+1); err != nil {
				return 0, err
			}
			return in * 10, workflow.Call(ctx, "c", pP, in+2)
		}); err != nil {
			t.Fatal(err)
		}
	}
	register(starter)

	whole, err := starter.Start(ctx, "three", 4)
	if err != nil {
		t.Fatalf("Start (uninterrupted): %v", err)
	}
	if got, want := syncs(whole.GID), []string{"$result on", "a off", "b off", "c off"}; !slices.Equal(got, want) {
		t.Fatalf("rows written with synchronous_commit %q, want %q", got, want)
	}

	lose.Store(true)
	out, err := starter.Start(ctx, "three", 4)
	if !errors.Is(err, coordinator.ErrIncomplete) || !strings.Contains(err.Error(), "step 0 is missing") {
		t.Fatalf("Start with a's record lost = %v, want ErrIncomplete naming the missing record", err)
	}
	leader := e.leader(coordinator.WithLease(time.Second))
	register(leader)
	testenv.Run(t, leader.Run)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	w, err := leader.Wait(wctx, out.GID)
	if err != nil || string(w.Output) != string(whole.Output) {
		t.Fatalf("Wait = %+v, %v; want succeeded with %s, as uninterrupted", w, err, whole.Output)
	}
	var got []string
	for _, c := range calls.get() {
		if g, call, _ := strings.Cut(c, " "); g == out.GID {
			got = append(got, call)
		}
	}
	// a and b sent by the starter (b's record refused), again by the leader's replay; c once.
	if want := []string{"action/a", "action/b", "action/a", "action/b", "action/c"}; !slices.Equal(got, want) {
		t.Fatalf("calls %q, want %q", got, want)
	}
	status := map[string]string{}
	for _, br := range coretest.Get(t, e.logOf(t, leader), out.GID).Branches {
		status[br.Name] = br.Status.String()
	}
	if want := map[string]string{"a": "succeeded", "b": "succeeded", "c": "succeeded", "$result": "succeeded"}; fmt.Sprint(status) != fmt.Sprint(want) {
		t.Fatalf("steps %v, want %v", status, want)
	}
}
