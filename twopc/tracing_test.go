package twopc_test

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
	"github.com/txkit/txkit/twopc"
)

// Two-phase commit's spans: "2pc begin" where the transaction is recorded, a client span per
// participant call — "2pc prepare" for a participant branch (a database's PREPARE TRANSACTION is
// no call), "2pc commit" or "2pc abort" for every branch — all in the caller's trace, with the
// in-process participant's barrier span under each of its calls.
func TestIntegrationTracing(t *testing.T) {
	exp, tp := coretest.Tracing(t)
	b := newBank(t)
	bar := coretest.TracedBarrier(t, b.East, tp)
	c := b.coordinator(coordinator.WithTelemetry(nil, tp))
	points := coretest.Register(t, c, "points", bar.Participant(func(_ context.Context, _ pgx.Tx, req participant.Request) error {
		if req.Op == participant.OpPrepare && req.GID == "traced-no" {
			return fmt.Errorf("points frozen: %w", participant.ErrRefused)
		}
		return nil
	}))
	commit := func(gid string, withPoints bool) (trace.SpanContext, error) {
		t.Helper()
		exp.Reset()
		ctx, root := tp.Tracer("test").Start(t.Context(), "transfer")
		defer root.End()
		g, err := c.Begin(ctx, coordinator.WithGID(gid))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Enlist(ctx, "west", update("bob", 3)); err != nil {
			t.Fatal(err)
		}
		if withPoints {
			if err := g.EnlistParticipant(twopc.Branch{Name: "points", Participant: points, Payload: json.RawMessage(`{"n":3}`)}); err != nil {
				t.Fatal(err)
			}
		} else if err := g.Enlist(ctx, "east", update("alice", -3)); err != nil {
			t.Fatal(err)
		}
		return root.SpanContext(), g.Commit(ctx)
	}
	// under checks that each span of calls is the child of parent, and that each of the barrier's
	// spans ("participant <op>") is the child of the call of its op.
	under := func(parent trace.SpanID, calls []tracetest.SpanStub, barrier []tracetest.SpanStub) {
		t.Helper()
		for _, s := range calls {
			if s.Parent.SpanID() != parent {
				t.Errorf("span %q of %s: parent %s, want %s", s.Name, coretest.Attr(s, "txkit.branch"), s.Parent.SpanID(), parent)
			}
		}
		for _, s := range barrier {
			ok := false
			for _, call := range calls {
				ok = ok || (call.SpanContext.SpanID() == s.Parent.SpanID() && call.Name == "2pc "+coretest.Attr(s, "txkit.op") &&
					coretest.Attr(call, "txkit.branch") == "points")
			}
			if !ok || s.SpanKind != trace.SpanKindInternal {
				t.Errorf("span %q (kind %v) is not the internal child of the call of its op", s.Name, s.SpanKind)
			}
		}
	}

	// A database and a participant: recorded before phase one.
	root, err := commit("traced-1", true)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	got := coretest.WantSpans(t, exp.GetSpans(), root.TraceID(), "traced-1", map[string]int{"2pc begin": 1, "2pc prepare": 1, "2pc commit": 2,
		"participant prepare": 1, "participant commit": 1})
	under(root.SpanID(), append(got["2pc begin"], append(got["2pc prepare"], got["2pc commit"]...)...),
		append(got["participant prepare"], got["participant commit"]...))
	if s := got["2pc begin"][0]; s.InstrumentationScope.Name != "github.com/txkit/txkit/twopc" {
		t.Errorf("2pc begin: scope %q", s.InstrumentationScope.Name)
	}

	// Only databases: the decision is the first record; the COMMIT PREPAREDs are the calls.
	root, err = commit("traced-dbs", false)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	got = coretest.WantSpans(t, exp.GetSpans(), root.TraceID(), "traced-dbs", map[string]int{"2pc begin": 1, "2pc prepare": 0, "2pc commit": 2})
	under(root.SpanID(), append(got["2pc begin"], got["2pc commit"]...), nil)

	// The participant votes no: its prepare span records the refusal, and both branches are aborted.
	root, err = commit("traced-no", true)
	if !errors.Is(err, twopc.ErrAborted) {
		t.Fatalf("Commit = %v, want ErrAborted", err)
	}
	got = coretest.WantSpans(t, exp.GetSpans(), root.TraceID(), "traced-no", map[string]int{"2pc begin": 1, "2pc prepare": 1, "2pc abort": 2,
		"participant prepare": 1, "participant abort": 1})
	under(root.SpanID(), append(got["2pc begin"], append(got["2pc prepare"], got["2pc abort"]...)...),
		append(got["participant prepare"], got["participant abort"]...))
	if p := got["2pc prepare"][0]; p.Status.Code != codes.Error {
		t.Errorf("refused prepare: status %v, want Error", p.Status)
	}
}
