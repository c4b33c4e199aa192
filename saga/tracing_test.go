package saga_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/saga"
)

// barrier returns a migrated, unsigned barrier on the test's schema that traces with tp.
func (e *env) barrier(tp trace.TracerProvider) *barrier.Barrier {
	e.T.Helper()
	return coretest.TracedBarrier(e.T, e.Schema, tp, barrier.WithLogger(testLogger(e.T)), barrier.WithUnsignedRequests())
}

// checkParticipantSpans checks that every "participant <op>" span of spans is the child of a
// coordinator's "saga <op>" span of the same step (its branch attribute), the child of one of
// parents (span ids), of kind internal for the in-process steps and server for the others, and
// that there are want of them. It returns the coordinator's spans it found under parents.
func checkParticipantSpans(t *testing.T, spans tracetest.SpanStubs, parents map[trace.SpanID]bool, inProc map[string]bool, want int) []tracetest.SpanStub {
	t.Helper()
	calls := map[trace.SpanID]tracetest.SpanStub{}
	var out []tracetest.SpanStub
	for _, name := range []string{"saga action", "saga compensate"} {
		for _, s := range coretest.Named(spans, name) {
			if parents[s.Parent.SpanID()] {
				calls[s.SpanContext.SpanID()] = s
				out = append(out, s)
			}
		}
	}
	n := 0
	for _, name := range []string{"participant action", "participant compensate"} {
		for _, s := range coretest.Named(spans, name) {
			call, ok := calls[s.Parent.SpanID()]
			if !ok {
				continue
			}
			n++
			branch := coretest.Attr(s, "txkit.branch")
			kind := trace.SpanKindServer
			if inProc[branch] {
				kind = trace.SpanKindInternal
			}
			if call.Name != "saga "+coretest.Attr(s, "txkit.op") || coretest.Attr(call, "txkit.branch") != branch ||
				s.SpanKind != kind || s.Parent.IsRemote() == inProc[branch] || s.SpanContext.TraceID() != call.SpanContext.TraceID() {
				t.Errorf("span %q of %s (kind %v, remote parent %v) under %q of %s", s.Name, branch, s.SpanKind, s.Parent.IsRemote(),
					call.Name, coretest.Attr(call, "txkit.branch"))
			}
		}
	}
	if n != want {
		t.Errorf("%d participant spans under the saga's calls, want %d: %v", n, want, coretest.Names(spans))
	}
	return out
}

// A saga whose second step is refused: "saga begin", its actions and its compensations are one
// trace under the caller's span, the participants' spans — the in-process barrier's internal
// ones, the HTTP handler's server ones — are children of the calls, and the compensation path
// logs with the trace's ids.
func TestIntegrationTracing(t *testing.T) {
	exp, tp := coretest.Tracing(t)
	var logs coretest.LogBuffer
	e := newEnv(t)
	bar := e.barrier(tp)
	fn := func(_ context.Context, _ pgx.Tx, req participant.Request) error {
		if req.Op == participant.OpAction && req.Branch == "pay" {
			return fmt.Errorf("no funds: %w", participant.ErrRefused)
		}
		return nil
	}
	srv := httptest.NewServer(bar.Handler(fn))
	t.Cleanup(srv.Close)
	c := e.coordinator(coordinator.WithTelemetry(nil, tp), coordinator.WithLogger(logs.TraceLogger()),
		coordinator.WithHTTPClient(srv.Client()))
	stock := register(t, c, "stock", bar.Participant(fn))

	ctx, root := tp.Tracer("test").Start(t.Context(), "order")
	s, err := c.Begin(ctx, coordinator.WithGID("traced-1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []saga.Step{{Name: "stock", Participant: stock}, {Name: "pay", Participant: participant.HTTP{URL: srv.URL, Client: srv.Client()}}} {
		if err := s.Add(st); err != nil {
			t.Fatal(err)
		}
	}
	err = s.Submit(ctx)
	root.End()
	if !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Submit = %v, want the refusal", err)
	}

	rc := root.SpanContext()
	spans := exp.GetSpans()
	got := coretest.WantSpans(t, spans, rc.TraceID(), "traced-1", map[string]int{"saga begin": 1, "saga action": 2,
		"saga compensate": 2, "participant action": 2, "participant compensate": 2})
	if b := got["saga begin"][0]; b.Parent.SpanID() != rc.SpanID() || b.InstrumentationScope.Name != "github.com/txkit/txkit/saga" {
		t.Errorf("saga begin: parent %s scope %q, want the caller's span %s and the saga's scope", b.Parent.SpanID(), b.InstrumentationScope.Name, rc.SpanID())
	}
	calls := checkParticipantSpans(t, spans, map[trace.SpanID]bool{rc.SpanID(): true}, map[string]bool{"stock": true}, 4)
	if len(calls) != 4 {
		t.Errorf("%d calls under the caller's span, want 4", len(calls))
	}
	for _, s := range got["saga action"] {
		if refused := coretest.Attr(s, "txkit.branch") == "pay"; refused != (s.Status.Code == codes.Error) {
			t.Errorf("action of %s: status %v", coretest.Attr(s, "txkit.branch"), s.Status)
		}
	}
	if !logs.Logged("saga: compensating", rc) {
		t.Errorf("no compensating line with the trace's ids:\n%s", logs.String())
	}
}

// A saga its starter gave up on (a step kept failing) is finished by the leader: its "recovery
// drive" is the child of the stored "saga begin" span, in the starter's trace, linked to the
// "recovery pass"; the leader's calls, and the barrier's spans under them, are in that trace, and
// the compensation path logs with the drive's ids.
func TestIntegrationTracingLeaderFinishes(t *testing.T) {
	exp, tp := coretest.Tracing(t)
	var logs coretest.LogBuffer
	e := newEnv(t)
	bar := e.barrier(tp)
	var mu sync.Mutex
	payCalls := 0
	in := bar.Participant(func(_ context.Context, _ pgx.Tx, req participant.Request) error {
		if req.Op != participant.OpAction || req.Branch != "pay" {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if payCalls++; payCalls == 1 {
			return errDown // the starter's attempt: it gives up
		}
		return fmt.Errorf("no funds: %w", participant.ErrRefused) // the leader's
	})
	opts := []coordinator.Option{coordinator.WithTelemetry(nil, tp), coordinator.WithLogger(logs.TraceLogger())}
	c := e.coordinator(append(opts, saga.WithAttempts(1))...)
	leader := e.coordinator(append(opts, coordinator.WithElector(e.Elector("leader")))...)
	var steps []saga.Step
	for _, name := range []string{"stock", "pay"} {
		steps = append(steps, saga.Step{Name: name, Participant: register(t, c, name, in)})
		register(t, leader, name, in)
	}

	const gid = "traced-leader"
	ctx, root := tp.Tracer("test").Start(t.Context(), "order")
	s, err := c.Begin(ctx, coordinator.WithGID(gid))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range steps {
		if err := s.Add(st); err != nil {
			t.Fatal(err)
		}
	}
	err = s.Submit(ctx)
	root.End()
	if !errors.Is(err, coordinator.ErrIncomplete) || errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Submit = %v, want ErrIncomplete", err)
	}
	begins := coretest.Named(exp.GetSpans(), "saga begin")
	if len(begins) != 1 {
		t.Fatalf("%d saga begin spans, want 1", len(begins))
	}
	begin := begins[0]

	run(t, leader)
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		return status(t, leader, gid) == saga.StatusCompensated
	}, "the leader did not compensate %s", gid)
	drive := coretest.LinkedDrive(t, exp, gid)
	rc := root.SpanContext()
	if drive.SpanContext.TraceID() != rc.TraceID() || drive.Parent.SpanID() != begin.SpanContext.SpanID() || !drive.Parent.IsRemote() {
		t.Fatalf("drive span trace %s parent %s (remote %v), want the starter's trace %s and its begin span %s",
			drive.SpanContext.TraceID(), drive.Parent.SpanID(), drive.Parent.IsRemote(), rc.TraceID(), begin.SpanContext.SpanID())
	}
	// The starter recorded stock's success with pay's failure: the leader calls pay's action,
	// which is refused, then compensates both steps (pay's an empty compensation): three calls
	// under the drive, each with the barrier's span.
	calls := checkParticipantSpans(t, exp.GetSpans(), map[trace.SpanID]bool{drive.SpanContext.SpanID(): true}, map[string]bool{"stock": true, "pay": true}, 3)
	if len(calls) != 3 {
		t.Errorf("%d calls under the drive, want 3: %v", len(calls), coretest.Names(calls))
	}
	if !logs.Logged("saga: compensating", drive.SpanContext) {
		t.Errorf("no compensating line with the drive's ids:\n%s", logs.String())
	}
}
