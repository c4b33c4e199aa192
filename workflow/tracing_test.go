package workflow_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/workflow"
)

// TestIntegrationTraceAcrossResume: the leader's resume of a workflow its starter left (a call
// kept failing) continues the starter's trace: the leader's drive, the re-sent call and the
// steps after it are in the trace of the starter's "workflow begin" span; the step the starter
// recorded is not run (nor traced) again.
func TestIntegrationTraceAcrossResume(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	exp, tp := coretest.Tracing(t)
	e := newEnv(t)
	define := func(c *workflow.Coordinator, b participant.Participant) {
		t.Helper()
		bP := coretest.Register(t, c, "b", b)
		if err := workflow.Register(c, "traced", func(ctx workflow.Context, _ int) (int, error) {
			if _, err := workflow.Step(ctx, "a", func(context.Context) (int, error) { return 1, nil }); err != nil {
				return 0, err
			}
			if err := workflow.Call(ctx, "b", bP, nil); err != nil {
				return 0, err
			}
			return workflow.Step(ctx, "c", func(context.Context) (int, error) { return 3, nil })
		}); err != nil {
			t.Fatal(err)
		}
	}
	starter := e.coordinator(coordinator.WithTelemetry(nil, tp))
	define(starter, &party{Answer: func(participant.Request) error { return errors.New("unavailable") }})
	out, err := starter.Start(t.Context(), "traced", 0)
	if !errors.Is(err, coordinator.ErrIncomplete) {
		t.Fatalf("Start = %v, want ErrIncomplete", err)
	}
	leader := e.leader(coordinator.WithTelemetry(nil, tp))
	define(leader, &party{})
	testenv.Run(t, leader.Run)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := leader.Wait(ctx, out.GID); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	drive := coretest.LinkedDrive(t, exp, out.GID)
	spans := exp.GetSpans()
	begin := coretest.Named(spans, "workflow begin")
	if len(begin) != 1 {
		t.Fatalf("%d begin spans: %v", len(begin), coretest.Names(spans))
	}
	tid := begin[0].SpanContext.TraceID()
	if drive.SpanContext.TraceID() != tid {
		t.Fatalf("the leader's drive is in trace %s, want the starter's %s", drive.SpanContext.TraceID(), tid)
	}
	got := coretest.WantSpans(t, spans, tid, out.GID, map[string]int{"workflow step": 2, "workflow action": 3 + 1})
	var steps []string
	for _, s := range got["workflow step"] {
		steps = append(steps, coretest.Attr(s, "txkit.branch"))
	}
	if len(steps) != 2 || steps[0] != "a" || steps[1] != "c" {
		t.Fatalf("steps traced %v, want a (starter) then c (leader)", steps)
	}
	var inDrive int
	for _, s := range got["workflow action"] {
		if s.Parent.SpanID() == drive.SpanContext.SpanID() {
			inDrive++
		}
	}
	if inDrive != 1 {
		t.Fatalf("%d actions under the leader's drive, want 1 (b re-sent)", inDrive)
	}
}
