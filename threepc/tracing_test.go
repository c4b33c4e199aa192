package threepc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/threepc"
)

// Three-phase commit's spans: "3pc begin" where the transaction is recorded (before PreCommit), a
// client span per participant call — "3pc cancommit", "3pc precommit", then "3pc docommit" or
// "3pc abort" — and a "3pc docommit" or "3pc abort" per database branch (a database's vote and its
// PREPARE TRANSACTION are no calls), all children of the caller's span, with the in-process
// participant's barrier span under each of its calls. A refusal at CanCommit records nothing (no
// begin span: presumed abort) and its cancommit span has status Error.
func TestIntegrationTracing(t *testing.T) {
	exp, tp := coretest.Tracing(t)
	w := newWorld(t)
	bar := coretest.TracedBarrier(t, w.East, tp)
	c := w.coordinator(coordinator.WithTelemetry(nil, tp))
	points := coretest.Register(t, c, "points", bar.Participant(func(_ context.Context, _ pgx.Tx, req participant.Request) error {
		if req.Op == participant.OpCanCommit && req.GID == "traced-no" {
			return fmt.Errorf("points frozen: %w", participant.ErrRefused)
		}
		return nil
	}))
	commit := func(gid string) (trace.SpanContext, error) {
		t.Helper()
		exp.Reset()
		ctx, root := tp.Tracer("test").Start(t.Context(), "transfer")
		defer root.End()
		g, err := c.Begin(ctx, coordinator.WithGID(gid))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Enlist("west", threepc.DBWork{PreCommit: update("bob", 3)}); err != nil {
			t.Fatal(err)
		}
		if err := g.EnlistParticipant(threepc.Branch{Name: "points", Participant: points, Payload: json.RawMessage(`{"n":3}`)}); err != nil {
			t.Fatal(err)
		}
		return root.SpanContext(), g.Commit(ctx)
	}
	under := func(root trace.SpanContext, got map[string][]tracetest.SpanStub, calls, barrier []string) {
		t.Helper()
		for _, name := range calls {
			for _, s := range got[name] {
				if s.Parent.SpanID() != root.SpanID() {
					t.Errorf("span %q of %s: parent %s, want the caller's %s", s.Name, coretest.Attr(s, "txkit.branch"), s.Parent.SpanID(), root.SpanID())
				}
			}
		}
		for _, name := range barrier {
			for _, s := range got[name] {
				ok := false
				for _, call := range got["3pc "+coretest.Attr(s, "txkit.op")] {
					ok = ok || (call.SpanContext.SpanID() == s.Parent.SpanID() && coretest.Attr(call, "txkit.branch") == "points")
				}
				if !ok || s.SpanKind != trace.SpanKindInternal {
					t.Errorf("span %q (kind %v) is not the internal child of the call of its op", s.Name, s.SpanKind)
				}
			}
		}
	}

	root, err := commit("traced-1")
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	got := coretest.WantSpans(t, exp.GetSpans(), root.TraceID(), "traced-1", map[string]int{"3pc begin": 1, "3pc cancommit": 1,
		"3pc precommit": 1, "3pc docommit": 2, "participant cancommit": 1, "participant precommit": 1, "participant docommit": 1})
	under(root, got, []string{"3pc begin", "3pc cancommit", "3pc precommit", "3pc docommit"},
		[]string{"participant cancommit", "participant precommit", "participant docommit"})
	if s := got["3pc begin"][0]; s.InstrumentationScope.Name != "github.com/txkit/txkit/threepc" {
		t.Errorf("3pc begin: scope %q", s.InstrumentationScope.Name)
	}

	root, err = commit("traced-no")
	if !errors.Is(err, threepc.ErrAborted) {
		t.Fatalf("Commit = %v, want ErrAborted", err)
	}
	got = coretest.WantSpans(t, exp.GetSpans(), root.TraceID(), "traced-no", map[string]int{"3pc begin": 0, "3pc cancommit": 1,
		"3pc precommit": 0, "participant cancommit": 1})
	under(root, got, []string{"3pc cancommit"}, []string{"participant cancommit"})
	if s := got["3pc cancommit"][0]; s.Status.Code != codes.Error {
		t.Errorf("refused cancommit: status %v, want Error", s.Status)
	}
}
