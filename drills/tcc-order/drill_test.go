package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txkit/txkit/drills/internal/drilltest"
	"github.com/txkit/txkit/examples/tcc-order/app"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

func config(t *testing.T, orders int) Config {
	return Config{
		Orders: orders, Instances: 2, Concurrency: 8, Kills: 3, KillEvery: 2 * time.Second,
		PG: testenv.PGURL(t), ZK: strings.Join(testenv.ZK(t), ","),
		Dir: t.TempDir(), Log: t.Output(),
	}
}

// TestIntegrationTCCOrderDemo: 50 orders without faults, some refused for lack of stock or funds:
// every transaction ends confirmed or cancelled, stock and money are conserved, no op runs twice.
func TestIntegrationTCCOrderDemo(t *testing.T) {
	cfg := config(t, 50)
	rep := drilltest.Run(t, 4*time.Minute, Run, cfg)
	if rep.Globals["confirmed"] == 0 || rep.Globals["cancelled"] == 0 {
		t.Fatalf("want both confirmed and cancelled transactions, got %v", rep.Globals)
	}
	if rep.Unanswered != 0 {
		t.Fatalf("%d orders unanswered without faults", rep.Unanswered)
	}
}

// TestIntegrationTCCOrderDrill: 200 orders while stock and account inject refusals, 500s, lost
// replies and slow calls, the leading order instance is SIGKILLed three times and stock and account
// once each: the invariants hold, and each leader kill is followed by the next leader's recovery.
func TestIntegrationTCCOrderDrill(t *testing.T) { drill(t, app.ModeTCC) }

// TestIntegrationSagaOrderDrill: the same drill with every order a saga (deduct stock, then debit
// money) and the saga coordinators' leader SIGKILLed: every saga succeeded or compensated, no
// action or compensation applied twice, stock and money conserved.
func TestIntegrationSagaOrderDrill(t *testing.T) { drill(t, app.ModeSaga) }

// TestIntegrationWorkflowOrderDrill: the drill's short form with every order a workflow (record
// the order row, deduct stock, debit money: package workflow), two kills of the workflow
// coordinators' leader and one each of stock and account: every workflow succeeded or
// compensated, no call or compensation applied twice, stock and money conserved, every succeeded
// workflow has its order row. make drill-workflow runs 2000 orders.
func TestIntegrationWorkflowOrderDrill(t *testing.T) {
	cfg := drillConfig(t, app.ModeWorkflow, "zk", 120) // about 12 s of load at 10/s
	cfg.Kills = 2
	runDrill(t, cfg)
}

// TestIntegrationTCCOrderDrillOnOtherLocks: the TCC drill with the recovery elections on
// PostgreSQL lease rows, then on Redis: the same invariants hold and every leader kill is
// followed by the next leader's recovery, whatever the lock backend (the fence refuses a deposed
// leader's writes by token on each).
func TestIntegrationTCCOrderDrillOnOtherLocks(t *testing.T) {
	testenv.Redis(t) // the servers of both backends must be up
	for _, kind := range []string{"pg", "redis"} {
		t.Run(kind, func(t *testing.T) {
			rep := drillOn(t, app.ModeTCC, kind)
			t.Logf("leadership on %s: leader death → next leader's first recovery, max %v", kind, rep.MaxFailover())
		})
	}
}

// drill runs a short drill in mode m and checks its report.
func drill(t *testing.T, m app.Mode) { drillOn(t, m, "zk") }

// TestIntegrationOrderDrillGRPC: the drill's short form with the order service calling stock and
// account over gRPC (the shoppb methods behind the barrier's interceptor, every call signed) and
// the orders placed over gRPC, in each mode: faults (ABORTED refusals, UNAVAILABLE failures and
// lost replies, calls past the call timeout), two leader kills, stock and account SIGKILLed
// and restarted on their addresses — the same invariants hold, and each leader kill is followed
// by the next leader's recovery, which calls the gRPC participants registered in its own process.
func TestIntegrationOrderDrillGRPC(t *testing.T) {
	bin := t.TempDir() // the services' binaries, built by the first run, and the runs' logs
	// Not the workflow mode: its calls are the saga's.
	for _, m := range []app.Mode{app.ModeTCC, app.ModeSaga} {
		t.Run(m.String(), func(t *testing.T) {
			cfg := drillConfig(t, m, "zk", 120) // about 12 s of load at 10/s
			cfg.Transport, cfg.Kills, cfg.Dir = app.TransportGRPC, 2, bin
			_, err := os.Stat(filepath.Join(bin, "order"))
			cfg.Built = err == nil
			rep := runDrill(t, cfg)
			if rep.Transport != app.TransportGRPC {
				t.Fatalf("transport %q, want grpc", rep.Transport)
			}
		})
	}
}

// drillOn runs a short drill in mode m with the recovery elections on the lock backend kind.
func drillOn(t *testing.T, m app.Mode, kind string) Report {
	return runDrill(t, drillConfig(t, m, kind, 200)) // about 20 s of load, so the three kills land during it
}

// drillConfig is a short drill of orders at 10/s in mode m with the recovery elections on kind:
// faults, three leader kills, two participant kills.
func drillConfig(t *testing.T, m app.Mode, kind string, orders int) Config {
	cfg := config(t, orders)
	cfg.Mode, cfg.Drill, cfg.ParticipantKills, cfg.Lock = m, true, 2, kind
	cfg.Rate = 10
	return cfg
}

// runDrill runs the drill of cfg and checks its report.
func runDrill(t *testing.T, cfg Config) Report {
	rep := drilltest.Run(t, 6*time.Minute, Run, cfg)
	p := protocolOf(cfg.Mode)
	if rep.Globals[p.done] == 0 || rep.Globals[p.undone] == 0 {
		t.Fatalf("want both %s and %s orders, got %v", p.done, p.undone, rep.Globals)
	}
	if rep.Undone["stock"] == 0 {
		t.Fatalf("no stock branch undone (%s after an account refusal): %v", p.undo, rep.Undone)
	}
	if rep.ParticipantKills != cfg.ParticipantKills {
		t.Fatalf("%d participant kills, want %d", rep.ParticipantKills, cfg.ParticipantKills)
	}
	if rep.LeaderKills != cfg.Kills || len(rep.Failovers) != cfg.Kills {
		t.Fatalf("%d leader kills, %d failovers measured; want %d each", rep.LeaderKills, len(rep.Failovers), cfg.Kills)
	}
	return rep
}

// TestIntegrationTCCOrderChecksCatchNoBarrier: the same faults with the participants' barrier
// turned off — lost replies make retried confirms and cancels apply twice, failed tries make
// cancels release what was never reserved — and the checks must say so. This keeps the drill's
// checks honest: a check that cannot fail proves nothing.
func TestIntegrationTCCOrderChecksCatchNoBarrier(t *testing.T) { checksCatchNoBarrier(t, app.ModeTCC) }

// TestIntegrationSagaOrderChecksCatchNoBarrier: the same for sagas — a lost reply makes the
// retried action apply twice, a compensation after a refused or failed action gives back what
// was never taken — and the saga checks must say so.
func TestIntegrationSagaOrderChecksCatchNoBarrier(t *testing.T) {
	checksCatchNoBarrier(t, app.ModeSaga)
}

func checksCatchNoBarrier(t *testing.T, m app.Mode) {
	cfg := config(t, 60)
	cfg.Mode, cfg.Drill, cfg.Kills, cfg.NoBarrier = m, true, 0, true
	// An undo that would drive a column below zero is retried forever, so the run never settles
	// and waits out this timeout. What can finish does so within a second of the last answer
	// (a run with the barrier settles in 6-550 ms; here the count of unfinished ones is the same
	// at 5 s as at 15 s), so 5 s checks the same end state as the 15 s it waited before.
	cfg.SettleTimeout = 5 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	t.Logf("report (err %v):\n%s", err, rep)
	if len(rep.Violations) == 0 {
		t.Fatal("without the barrier the checks found nothing wrong")
	}
}
