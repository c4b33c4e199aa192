package grpccall_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/grpctest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/participant/grpccall"
	"github.com/txkit/txkit/saga"
	"github.com/txkit/txkit/tcc"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/twopc"
)

// envStarter makes the test binary the starter of TestIntegrationGRPCRecoverAfterStarterKill:
// its value is a starterConfig in JSON.
const envStarter = "TXKIT_GRPCCALL_STARTER"

// starterConfig is what the starter process runs: one global transaction of Kind with gid GID,
// logged in Schema of URL, whose branches are the gRPC participant at Addr.
type starterConfig struct {
	URL, Schema, Addr, Kind, GID string
}

// killAt is the op during which the test SIGKILLs each protocol's starter: the decision is
// recorded (or, for the saga, the first step done), the second branch's op is in flight.
var killAt = map[string]participant.Op{
	"tcc": participant.OpConfirm, "saga": participant.OpAction, "2pc": participant.OpCommit, "3pc": participant.OpDoCommit,
}

// TestIntegrationGRPCRecoverAfterStarterKill: for each protocol, a starter process runs a
// global transaction over gRPC and is SIGKILLed (by the participant, while serving the second
// branch's phase-two op, or the saga's second action); the leader — another process's
// coordinator, here the test's — finishes it over gRPC, each op once, and its branch calls, the
// participant's server spans among them, are in the starter's trace.
func TestIntegrationGRPCRecoverAfterStarterKill(t *testing.T) {
	exp, tp := coretest.Tracing(t)
	p := newParty(t, barrier.WithTelemetry(nil, tp)) // the participant's spans too, in this process
	logs := testenv.PG(t)
	root := testenv.ZKRoot(t)
	opts := func(kind string) []coordinator.Option {
		return []coordinator.Option{coordinator.WithTelemetry(nil, tp), coordinator.WithLease(200 * time.Millisecond),
			coordinator.WithElector(zkenv.Elector(t, root+"/"+kind, "leader"))}
	}
	tc := coretest.New(t, tcc.New, logs.Pool, logs.Name, opts("tcc")...)
	coretest.Register(t, tc, "party", p.caller(t, grpctest.TCC))
	testenv.Run(t, tc.Run)
	sc := coretest.New(t, saga.New, logs.Pool, logs.Name, opts("saga")...)
	coretest.Register(t, sc, "party", p.caller(t, grpctest.Saga))
	testenv.Run(t, sc.Run)
	twc := coretest.New(t, twopc.New, logs.Pool, logs.Name, opts("2pc")...)
	coretest.Register(t, twc, "party", p.caller(t, grpctest.TwoPC))
	testenv.Run(t, twc.Run)
	thc := coretest.New(t, threepc.New, logs.Pool, logs.Name, opts("3pc")...)
	t.Cleanup(func() { _ = thc.Close() })
	coretest.Register(t, thc, "party", p.caller(t, grpctest.ThreePC))
	testenv.Run(t, thc.Run)
	statusOf := map[string]func() coordinator.Status{
		"tcc":  func() coordinator.Status { return coretest.Status(t, tc, "killed-tcc") },
		"saga": func() coordinator.Status { return coretest.Status(t, sc, "killed-saga") },
		"2pc":  func() coordinator.Status { return coretest.Status(t, twc, "killed-2pc") },
		"3pc":  func() coordinator.Status { return coretest.Status(t, thc, "killed-3pc") },
	}
	final := map[string]coordinator.Status{"tcc": tcc.StatusConfirmed, "saga": saga.StatusSucceeded,
		"2pc": twopc.StatusCommitted, "3pc": threepc.StatusCommitted}

	for _, kind := range []string{"tcc", "saga", "2pc", "3pc"} {
		t.Run(kind, func(t *testing.T) {
			gid := "killed-" + kind
			cfg, _ := json.Marshal(starterConfig{URL: logs.URL, Schema: logs.Name, Addr: p.Addr, Kind: kind, GID: gid})
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envStarter+"="+string(cfg))
			var out, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &stderr
			var (
				once sync.Once
				proc atomic.Pointer[os.Process] // the starter, once started
			)
			p.SetHook(func(_ context.Context, req participant.Request, _ string) error {
				if req.GID == gid && req.Branch == "b" && req.Op == killAt[kind] {
					killed := false
					once.Do(func() { _ = proc.Load().Signal(syscall.SIGKILL); killed = true })
					if killed {
						return status.Error(codes.Unavailable, "the starter was killed during this call")
					}
				}
				return nil
			})
			t.Cleanup(func() { p.SetHook(nil) })
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			proc.Store(cmd.Process)
			err := cmd.Wait()
			ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("the starter was not SIGKILLed: %v\n%s%s", err, out.String(), stderr.String())
			}
			var traceID string
			sc := bufio.NewScanner(strings.NewReader(out.String()))
			for sc.Scan() {
				if f := strings.SplitN(sc.Text(), " ", 4); len(f) == 4 && f[3] == "order" {
					traceID = f[0]
				}
			}
			if traceID == "" {
				t.Fatalf("no root span in the starter's output:\n%s", out.String())
			}
			testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool { return statusOf[kind]() == final[kind] },
				"the leader did not finish %s", gid)
			op := killAt[kind]
			for _, b := range []string{"a", "b"} {
				if n := p.Ledger(t, gid, b, op); n != 1 {
					t.Errorf("%s of branch %s ran %d times, want once", op, b, n)
				}
			}
			// The leader's calls of the killed op, and the participant's server spans under them,
			// are in the starter's trace.
			var client, server int
			for _, s := range exp.GetSpans() {
				if s.SpanContext.TraceID().String() != traceID || coretest.Attr(s, "txkit.gid") != gid || coretest.Attr(s, "txkit.op") != op.String() {
					continue
				}
				switch {
				case s.SpanKind == trace.SpanKindClient && s.Name == kind+" "+op.String():
					client++
				case s.SpanKind == trace.SpanKindServer && s.Name == "participant "+op.String() && s.Parent.IsRemote():
					server++
				}
			}
			if client == 0 || server == 0 {
				t.Fatalf("in the starter's trace %s: %d leader spans %q, %d participant server spans of %s, want some of each: %v",
					traceID, client, kind+" "+op.String(), server, op, coretest.Names(exp.GetSpans()))
			}
		})
	}
}

// starter runs cfg's transaction, printing every span it ends ("<trace id> <span id> <parent
// span id> <name>", the root "order" first) as it ends, until the test kills it.
func starter(ctx context.Context, cfg starterConfig) error {
	pool, err := pgxpool.New(ctx, cfg.URL)
	if err != nil {
		return err
	}
	defer pool.Close()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(printer{}))
	cc, err := grpc.NewClient("passthrough:///"+cfg.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	ops := map[string][]participant.Op{"tcc": grpctest.TCC, "saga": grpctest.Saga, "2pc": grpctest.TwoPC, "3pc": grpctest.ThreePC}[cfg.Kind]
	call, err := grpccall.New(cc, grpctest.Methods(ops...), grpccall.WithSecret(secret))
	if err != nil {
		return err
	}
	b, err := grpccall.Payload(wrapperspb.String("ok"))
	if err != nil {
		return err
	}
	opts := []coordinator.Option{coordinator.WithSchema(cfg.Schema), coordinator.WithTelemetry(nil, tp), coordinator.WithLease(200 * time.Millisecond)}
	ctx, root := tp.Tracer("starter").Start(ctx, "order")
	fmt.Println(root.SpanContext().TraceID(), root.SpanContext().SpanID(), "-", "order")
	gid := coordinator.WithGID(cfg.GID)
	switch cfg.Kind {
	case "tcc":
		c, err := tcc.New(pool, opts...)
		return drive(c, err, call, func(h participant.Participant) error {
			g, err := c.Begin(ctx, gid)
			for _, name := range []string{"a", "b"} {
				if err == nil {
					err = g.Try(ctx, tcc.Branch{Name: name, Participant: h, Payload: b})
				}
			}
			if err != nil {
				return err
			}
			return g.Commit(ctx)
		})
	case "saga":
		c, err := saga.New(pool, opts...)
		return drive(c, err, call, func(h participant.Participant) error {
			s, err := c.Begin(ctx, gid)
			for _, name := range []string{"a", "b", "c"} {
				if err == nil {
					err = s.Add(saga.Step{Name: name, Participant: h, Payload: b})
				}
			}
			if err != nil {
				return err
			}
			return s.Submit(ctx)
		})
	case "2pc":
		c, err := twopc.New(pool, opts...)
		return drive(c, err, call, func(h participant.Participant) error {
			g, err := c.Begin(ctx, gid)
			for _, name := range []string{"a", "b"} {
				if err == nil {
					err = g.EnlistParticipant(twopc.Branch{Name: name, Participant: h, Payload: b})
				}
			}
			if err != nil {
				return err
			}
			return g.Commit(ctx)
		})
	case "3pc":
		c, err := threepc.New(pool, opts...)
		if err == nil {
			defer c.Close()
		}
		return drive(c, err, call, func(h participant.Participant) error {
			g, err := c.Begin(ctx, gid)
			for _, name := range []string{"a", "b"} {
				if err == nil {
					err = g.EnlistParticipant(threepc.Branch{Name: name, Participant: h, Payload: b})
				}
			}
			if err != nil {
				return err
			}
			return g.Commit(ctx)
		})
	}
	return errors.New("unknown kind " + cfg.Kind)
}

// drive registers call with c (made with err) as "party" and runs the transaction, which
// returns only when the test failed to kill the starter.
func drive(c coordinator.Base, err error, call participant.Participant, run func(h participant.Participant) error) error {
	if err != nil {
		return err
	}
	h, err := c.Register("party", call)
	if err != nil {
		return err
	}
	return fmt.Errorf("not killed: %w", run(h))
}

// printer is a span exporter that prints each span as it ends, so that a SIGKILL loses none.
type printer struct{}

func (printer) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	for _, s := range spans {
		fmt.Println(s.SpanContext().TraceID(), s.SpanContext().SpanID(), s.Parent().SpanID(), s.Name())
	}
	return nil
}

func (printer) Shutdown(context.Context) error { return nil }
