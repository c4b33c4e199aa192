package main

import (
	"strings"
	"testing"
	"time"

	"github.com/txkit/txkit/examples/internal/drilltest"
	"github.com/txkit/txkit/internal/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

func config(t *testing.T) Config {
	return Config{
		Instances: 2, Concurrency: 8, PauseAt: "both",
		PG: testenv.PGURL(t), ZK: strings.Join(testenv.ZK(t), ","),
		Dir: t.TempDir(), Log: t.Output(),
	}
}

// TestIntegrationTransferDemo: the script on two bank instances — three transfers committed in
// both databases, two refused for insufficient funds, one to a missing account rolled back — with
// the balances it should leave, money conserved and no prepared transaction left.
func TestIntegrationTransferDemo(t *testing.T) {
	cfg := config(t)
	rep := drilltest.Run(t, 2*time.Minute, Run, cfg)
	if rep.Globals["committed"] != 3 || rep.NotInLog != 3 {
		t.Fatalf("log: %v and %d transfers not in it; want 3 committed and 3 never recorded", rep.Globals, rep.NotInLog)
	}
}

// TestIntegrationTransferDrill: 200 transfers on two bank instances, a fifth of the commits
// pausing a second between the phases, the leader SIGKILLed twice, each time while it holds a
// transfer between the phases when one comes within 5s: the invariants hold, each kill is followed
// by the next leader's recovery, and the prepared transactions a dead leader left all end.
func TestIntegrationTransferDrill(t *testing.T) {
	cfg := config(t)
	cfg.Transfers, cfg.Rate, cfg.Drill, cfg.Kills, cfg.KillEvery = 200, 8, true, 2, time.Second
	cfg.PauseRate, cfg.Pause = 0.2, time.Second
	rep := drilltest.Run(t, 3*time.Minute, Run, cfg)
	if rep.LeaderKills != cfg.Kills || len(rep.Failovers) != cfg.Kills {
		t.Fatalf("%d leader kills, %d failovers measured; want %d each", rep.LeaderKills, len(rep.Failovers), cfg.Kills)
	}
	stranded := 0
	for _, n := range rep.InDoubt {
		stranded += n
	}
	if stranded == 0 {
		t.Fatalf("no kill left a transfer between the phases (in doubt per kill: %v)", rep.InDoubt)
	}
	if len(rep.InDoubtEnd) == 0 || rep.InDoubtEnd["not in the log"] > 0 {
		t.Fatalf("outcomes of the transfers left in doubt: %v", rep.InDoubtEnd)
	}
}
