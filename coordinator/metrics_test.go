package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/obs/obstest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/saga"
	"github.com/txkit/txkit/tcc"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/twopc"
)

// want checks the metric series name{labels} of reg against v.
func want(t *testing.T, reg *prometheus.Registry, v float64, name string, labels ...string) {
	t.Helper()
	if got := obstest.Value(t, reg, name, labels...); got != v {
		t.Errorf("%s%v = %v, want %v", name, labels, got, v)
	}
}

// refuser is an in-process participant that refuses a try or an action whose payload is "no".
var refuser = participant.ParticipantFunc(func(_ context.Context, req participant.Request) error {
	if string(req.Payload) == `"no"` && (req.Op == participant.OpTry || req.Op == participant.OpAction) {
		return fmt.Errorf("no: %w", participant.ErrRefused)
	}
	return nil
})

// Real transactions of every protocol, by five coordinators on one registry (two of them tcc,
// which share their series), move the counters as the work says.
func TestIntegrationMetricsCount(t *testing.T) {
	ctx := t.Context()
	env := coretest.NewEnv(t, "metrics")
	pool, schema := env.Schema.Pool, env.Schema.Name
	reg := prometheus.NewRegistry()
	withReg := coordinator.WithTelemetry(reg, nil)

	flush := func(cs ...coordinator.Base) { // the finishes are deferred: they count once written
		t.Helper()
		for _, c := range cs {
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// tcc: one committed by c1, one refused and rolled back by c2.
	c1 := coretest.New(t, tcc.New, pool, schema, withReg)
	c2 := coretest.New(t, tcc.New, pool, schema, withReg)
	p1, p2 := coretest.Register(t, c1, "p", refuser), coretest.Register(t, c2, "p", refuser)
	g, err := c1.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"a", "b"} {
		if err := g.Try(ctx, tcc.Branch{Name: b, Participant: p1}); err != nil {
			t.Fatalf("Try %s: %v", b, err)
		}
	}
	if err := g.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	g, err = c2.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Try(ctx, tcc.Branch{Name: "a", Participant: p2, Payload: []byte(`"no"`)}); !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Try = %v, want ErrRefused", err)
	}
	if err := g.Rollback(ctx); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	flush(c1, c2)
	const (
		begun, finished = "txkit_coordinator_transactions_begun_total", "txkit_coordinator_transactions_finished_total"
		calls, phase    = "txkit_coordinator_branch_calls_total", "txkit_coordinator_phase_seconds"
	)
	want(t, reg, 2, begun, "protocol", "tcc")
	want(t, reg, 1, finished, "protocol", "tcc", "outcome", "committed")
	want(t, reg, 1, finished, "protocol", "tcc", "outcome", "aborted")
	want(t, reg, 2, calls, "protocol", "tcc", "op", "try", "result", "ok")
	want(t, reg, 1, calls, "protocol", "tcc", "op", "try", "result", "refused")
	want(t, reg, 0, calls, "protocol", "tcc", "op", "try", "result", "error")
	want(t, reg, 2, calls, "protocol", "tcc", "op", "confirm", "result", "ok")
	want(t, reg, 1, calls, "protocol", "tcc", "op", "cancel", "result", "ok")
	want(t, reg, 3, phase, "protocol", "tcc", "phase", "try")
	want(t, reg, 2, phase, "protocol", "tcc", "phase", "confirm")

	// twopc and threepc: one commit of two participant branches each.
	c3 := coretest.New(t, twopc.New, pool, schema, withReg)
	t.Cleanup(func() { _ = c3.Close() })
	p3 := coretest.Register(t, c3, "p", refuser)
	g3, err := c3.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c4 := coretest.New(t, threepc.New, pool, schema, withReg)
	t.Cleanup(func() { _ = c4.Close() })
	p4 := coretest.Register(t, c4, "p", refuser)
	g4, err := c4.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"a", "b"} {
		if err := g3.EnlistParticipant(twopc.Branch{Name: b, Participant: p3}); err != nil {
			t.Fatal(err)
		}
		if err := g4.EnlistParticipant(threepc.Branch{Name: b, Participant: p4}); err != nil {
			t.Fatal(err)
		}
	}
	if err := g3.Commit(ctx); err != nil {
		t.Fatalf("twopc Commit: %v", err)
	}
	if err := g4.Commit(ctx); err != nil {
		t.Fatalf("threepc Commit: %v", err)
	}
	flush(c3, c4)
	for _, p := range []struct {
		protocol string
		ops      []string
	}{{"2pc", []string{"prepare", "commit"}}, {"3pc", []string{"cancommit", "precommit", "docommit"}}} {
		want(t, reg, 1, begun, "protocol", p.protocol)
		want(t, reg, 1, finished, "protocol", p.protocol, "outcome", "committed")
		for _, op := range p.ops {
			want(t, reg, 2, calls, "protocol", p.protocol, "op", op, "result", "ok")
			want(t, reg, 2, phase, "protocol", p.protocol, "phase", op)
		}
	}

	// saga: one succeeds, one is compensated.
	c5 := coretest.New(t, saga.New, pool, schema, withReg)
	p5 := coretest.Register(t, c5, "p", refuser)
	for _, last := range []string{`"yes"`, `"no"`} {
		s, err := c5.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range []saga.Step{{Name: "a", Participant: p5}, {Name: "b", Participant: p5, Payload: []byte(last)}} {
			if err := s.Add(st); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Submit(ctx); (err != nil) != (last == `"no"`) {
			t.Fatalf("Submit with %s = %v", last, err)
		}
	}
	flush(c5)
	want(t, reg, 2, begun, "protocol", "saga")
	want(t, reg, 1, finished, "protocol", "saga", "outcome", "committed")
	want(t, reg, 1, finished, "protocol", "saga", "outcome", "aborted")
	want(t, reg, 3, calls, "protocol", "saga", "op", "action", "result", "ok")
	want(t, reg, 1, calls, "protocol", "saga", "op", "action", "result", "refused")
	want(t, reg, 2, calls, "protocol", "saga", "op", "compensate", "result", "ok") // the refused step too (an empty compensation)
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// The leader's recovery of a transaction whose starter vanished after deciding, and of one left
// trying past its timeout, shows in its backlog, attempts, timeouts and outcomes.
func TestIntegrationMetricsRecovery(t *testing.T) {
	ctx := t.Context()
	env := coretest.NewEnv(t, "metrics-leader")
	pool, schema := env.Schema.Pool, env.Schema.Name
	release := make(chan struct{})
	released := false
	free := func() {
		if !released {
			released = true
			close(release)
		}
	}
	t.Cleanup(free)
	// Its confirms wait for release, so that the leader's recovery pass is seen under way.
	blocking := participant.ParticipantFunc(func(ctx context.Context, req participant.Request) error {
		if req.Op != participant.OpConfirm {
			return nil
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	starter := coretest.New(t, tcc.New, pool, schema)
	ps := coretest.Register(t, starter, "p", blocking)
	decided, err := starter.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	late, err := starter.Begin(ctx, coordinator.WithTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []*tcc.Global{decided, late} {
		if err := g.Try(ctx, tcc.Branch{Name: "a", Participant: ps}); err != nil {
			t.Fatal(err)
		}
	}
	// The decision as Commit records it, with a short lease; then the starter is gone.
	l, err := core.New(pool, core.WithSchema(schema), core.WithLease(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Decide(ctx, decided.GID(), core.StatusTrying, core.StatusConfirming); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	leader := coretest.New(t, tcc.New, pool, schema, coordinator.WithElector(env.Elector("leader")), coordinator.WithTelemetry(reg, nil))
	coretest.Register(t, leader, "p", blocking)
	testenv.Run(t, leader.Run)
	const backlog, oldest = "txkit_recovery_backlog", "txkit_recovery_oldest_unfinished_seconds"
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return obstest.Value(t, reg, backlog, "protocol", "tcc") >= 1 && obstest.Value(t, reg, oldest, "protocol", "tcc") > 0
	}, "the leader measures its backlog while it drives the decided transaction")
	free()
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return coretest.Status(t, leader, decided.GID()) == tcc.StatusConfirmed &&
			coretest.Status(t, leader, late.GID()) == tcc.StatusCancelled &&
			obstest.Value(t, reg, backlog, "protocol", "tcc") == 0 && obstest.Value(t, reg, oldest, "protocol", "tcc") == 0
	}, "the leader finishes both transactions and its backlog is empty")
	if n, err := testutil.GatherAndCount(reg, backlog, oldest); err != nil || n != 2 {
		t.Errorf("backlog and oldest series: %d, %v; want 2", n, err)
	}
	if n := obstest.Value(t, reg, "txkit_recovery_attempts_total", "protocol", "tcc", "result", "ok"); n < 2 {
		t.Errorf("recovery attempts ok = %v, want at least 2", n)
	}
	want(t, reg, 1, "txkit_recovery_timed_out_total", "protocol", "tcc")
	want(t, reg, 1, "txkit_coordinator_transactions_finished_total", "protocol", "tcc", "outcome", "committed")
	want(t, reg, 1, "txkit_coordinator_transactions_finished_total", "protocol", "tcc", "outcome", "aborted")
	want(t, reg, 0, "txkit_coordinator_transactions_begun_total", "protocol", "tcc")
}

// A metric name already taken on the registerer by a collector with other labels makes every
// coordinator's New fail with ErrInvalidOption.
func TestIntegrationMetricsClash(t *testing.T) {
	pool := testenv.PG(t).Pool
	for name, newC := range constructors() {
		reg := prometheus.NewRegistry()
		reg.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "txkit_coordinator_branch_calls_total",
			Help: "Someone else's."}, []string{"kind"}))
		if err := newC(pool, coordinator.WithTelemetry(reg, nil)); !errors.Is(err, coordinator.ErrInvalidOption) {
			t.Errorf("%s.New on a clashing registry = %v, want ErrInvalidOption", name, err)
		}
		if err := newC(pool, coordinator.WithTelemetry(prometheus.NewRegistry(), nil)); err != nil {
			t.Errorf("%s.New on a fresh registry: %v", name, err)
		}
	}
}
