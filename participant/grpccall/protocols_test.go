package grpccall_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/grpctest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/participant/grpccall"
	"github.com/txkit/txkit/saga"
	"github.com/txkit/txkit/tcc"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/twopc"
)

const secret = "a-test-secret-of-32-bytes-length"

// party is a test's gRPC participant: its server (with its own schema, barrier and ledger).
type party struct {
	*grpctest.Server
	bar *barrier.Barrier
}

func newParty(t *testing.T, opts ...barrier.Option) *party {
	s := testenv.PG(t)
	bar, err := barrier.New(s.Pool, append([]barrier.Option{barrier.WithSchema(s.Name), barrier.WithLogger(testenv.Logger(t)),
		barrier.WithSecrets(secret)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := bar.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return &party{Server: grpctest.Start(t, s, bar), bar: bar}
}

// caller returns a signing grpccall participant of p for ops.
func (p *party) caller(t testing.TB, ops []participant.Op) *grpccall.Participant {
	t.Helper()
	c, err := grpccall.New(p.Conn, grpctest.Methods(ops...), grpccall.WithSecret(secret))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func payload(t testing.TB, v string) []byte {
	t.Helper()
	b, err := grpccall.Payload(wrapperspb.String(v))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// want fails the test unless the ledger has n rows of op for each of branches of gid.
func (p *party) want(t *testing.T, gid string, op participant.Op, n int, branches ...string) {
	t.Helper()
	for _, b := range branches {
		if got := p.Ledger(t, gid, b, op); got != n {
			t.Errorf("%s %s/%s: %d ledger rows, want %d", op, gid, b, got, n)
		}
	}
}

// TestIntegrationGRPCProtocols: TCC, saga, 2PC and 3PC branches over gRPC commit, and roll back
// when a participant refuses (FailedPrecondition), each op once in the participant's transaction;
// the branch-call metrics say transport="grpc".
func TestIntegrationGRPCProtocols(t *testing.T) {
	p := newParty(t)
	logs := testenv.PG(t)
	reg := prometheus.NewRegistry()
	opts := []coordinator.Option{coordinator.WithRegisterer(reg)}

	t.Run("tcc", func(t *testing.T) {
		c := coretest.New(t, tcc.New, logs.Pool, logs.Name, opts...)
		h := coretest.Register(t, c, "party", p.caller(t, grpctest.TCC))
		for _, refuse := range []bool{false, true} {
			g, err := c.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Try(t.Context(), tcc.Branch{Name: "a", Participant: h, Payload: payload(t, "ok")}); err != nil {
				t.Fatalf("Try a: %v", err)
			}
			v := map[bool]string{false: "ok", true: "refuse"}[refuse]
			err = g.Try(t.Context(), tcc.Branch{Name: "b", Participant: h, Payload: payload(t, v)})
			if refuse {
				if !errors.Is(err, participant.ErrRefused) || !strings.Contains(err.Error(), "insufficient stock") {
					t.Fatalf("Try b = %v, want ErrRefused with the reason", err)
				}
				if err := g.Rollback(t.Context()); err != nil {
					t.Fatalf("Rollback: %v", err)
				}
				if st := coretest.Status(t, c, g.GID()); st != tcc.StatusCancelled {
					t.Fatalf("status %s, want cancelled", st)
				}
				p.want(t, g.GID(), participant.OpTry, 1, "a")
				p.want(t, g.GID(), participant.OpCancel, 1, "a")
				p.want(t, g.GID(), participant.OpTry, 0, "b")    // refused: rolled back
				p.want(t, g.GID(), participant.OpCancel, 0, "b") // its cancel is an empty rollback
				continue
			}
			if err != nil {
				t.Fatalf("Try b: %v", err)
			}
			if err := g.Commit(t.Context()); err != nil {
				t.Fatalf("Commit: %v", err)
			}
			if st := coretest.Status(t, c, g.GID()); st != tcc.StatusConfirmed {
				t.Fatalf("status %s, want confirmed", st)
			}
			p.want(t, g.GID(), participant.OpTry, 1, "a", "b")
			p.want(t, g.GID(), participant.OpConfirm, 1, "a", "b")
		}
	})

	t.Run("saga", func(t *testing.T) {
		c := coretest.New(t, saga.New, logs.Pool, logs.Name, opts...)
		h := coretest.Register(t, c, "party", p.caller(t, grpctest.Saga))
		for _, last := range []string{"ok", "refuse"} {
			s, err := c.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range []saga.Step{{Name: "a", Participant: h, Payload: payload(t, "ok")},
				{Name: "b", Participant: h, Payload: payload(t, "ok")}, {Name: "c", Participant: h, Payload: payload(t, last)}} {
				if err := s.Add(st); err != nil {
					t.Fatal(err)
				}
			}
			err = s.Submit(t.Context())
			if last == "refuse" {
				if !errors.Is(err, participant.ErrRefused) {
					t.Fatalf("Submit = %v, want ErrRefused", err)
				}
				if st := coretest.Status(t, c, s.GID()); st != saga.StatusCompensated {
					t.Fatalf("status %s, want compensated", st)
				}
				p.want(t, s.GID(), participant.OpAction, 1, "a", "b")
				p.want(t, s.GID(), participant.OpCompensate, 1, "a", "b")
				p.want(t, s.GID(), participant.OpAction, 0, "c")
				continue
			}
			if err != nil {
				t.Fatalf("Submit: %v", err)
			}
			if st := coretest.Status(t, c, s.GID()); st != saga.StatusSucceeded {
				t.Fatalf("status %s, want succeeded", st)
			}
			p.want(t, s.GID(), participant.OpAction, 1, "a", "b", "c")
		}
	})

	t.Run("2pc", func(t *testing.T) {
		c := coretest.New(t, twopc.New, logs.Pool, logs.Name, opts...)
		h := coretest.Register(t, c, "party", p.caller(t, grpctest.TwoPC))
		for _, last := range []string{"ok", "refuse"} {
			g, err := c.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range []twopc.Branch{{Name: "a", Participant: h, Payload: payload(t, "ok")}, {Name: "b", Participant: h, Payload: payload(t, last)}} {
				if err := g.EnlistParticipant(b); err != nil {
					t.Fatal(err)
				}
			}
			err = g.Commit(t.Context())
			if last == "refuse" {
				if !errors.Is(err, participant.ErrRefused) {
					t.Fatalf("Commit = %v, want ErrRefused", err)
				}
				if st := coretest.Status(t, c, g.GID()); st != twopc.StatusAborted {
					t.Fatalf("status %s, want aborted", st)
				}
				p.want(t, g.GID(), participant.OpPrepare, 1, "a")
				p.want(t, g.GID(), participant.OpAbort, 1, "a")
				p.want(t, g.GID(), participant.OpCommit, 0, "a", "b")
				continue
			}
			if err != nil {
				t.Fatalf("Commit: %v", err)
			}
			if st := coretest.Status(t, c, g.GID()); st != twopc.StatusCommitted {
				t.Fatalf("status %s, want committed", st)
			}
			p.want(t, g.GID(), participant.OpPrepare, 1, "a", "b")
			p.want(t, g.GID(), participant.OpCommit, 1, "a", "b")
		}
	})

	t.Run("3pc", func(t *testing.T) {
		c := coretest.New(t, threepc.New, logs.Pool, logs.Name, opts...)
		t.Cleanup(func() { _ = c.Close() })
		h := coretest.Register(t, c, "party", p.caller(t, grpctest.ThreePC))
		for _, last := range []string{"ok", "refuse"} {
			g, err := c.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range []threepc.Branch{{Name: "a", Participant: h, Payload: payload(t, "ok")}, {Name: "b", Participant: h, Payload: payload(t, last)}} {
				if err := g.EnlistParticipant(b); err != nil {
					t.Fatal(err)
				}
			}
			err = g.Commit(t.Context())
			if last == "refuse" {
				if !errors.Is(err, participant.ErrRefused) || !errors.Is(err, threepc.ErrAborted) {
					t.Fatalf("Commit = %v, want ErrRefused and ErrAborted", err)
				}
				// Refused at CanCommit: nothing executed, nothing recorded.
				if st, err := c.Status(t.Context(), g.GID()); !errors.Is(err, coordinator.ErrNotFound) && st != threepc.StatusAborted {
					t.Fatalf("status %s, %v: want aborted or not recorded", st, err)
				}
				p.want(t, g.GID(), participant.OpPreCommit, 0, "a", "b")
				p.want(t, g.GID(), participant.OpDoCommit, 0, "a", "b")
				continue
			}
			if err != nil {
				t.Fatalf("Commit: %v", err)
			}
			if st := coretest.Status(t, c, g.GID()); st != threepc.StatusCommitted {
				t.Fatalf("status %s, want committed", st)
			}
			p.want(t, g.GID(), participant.OpCanCommit, 1, "a", "b")
			p.want(t, g.GID(), participant.OpPreCommit, 1, "a", "b")
			p.want(t, g.GID(), participant.OpDoCommit, 1, "a", "b")
		}
	})

	// Every call above went over gRPC, and is counted so.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var grpcCalls, others float64
	for _, mf := range mfs {
		if mf.GetName() != "txkit_coordinator_branch_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "transport" {
					if l.GetValue() == "grpc" {
						grpcCalls += m.GetCounter().GetValue()
					} else {
						others += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	if grpcCalls < 20 || others != 0 {
		t.Fatalf("branch_calls_total: %v calls with transport=grpc, %v with another, want >= 20 and 0", grpcCalls, others)
	}
}
