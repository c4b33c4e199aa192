package main

import (
	"strings"
	"testing"
	"time"

	"github.com/txkit/txkit/drills/internal/drilltest"
	"github.com/txkit/txkit/internal/testkit/mqtest"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

// TestIntegrationDisruptiveDrillHA is the short form of make drill-ha: register-points (outbox
// mode, its own relay leader and consumer kills) on the DLedger group while the group's leader
// broker is SIGKILLed and started again: every user ends with exactly 100 points, nothing is
// left pending, the group elects a new leader and the publish probe and the registrations go on.
// It kills a node of a shared group, so make test runs it with the other Disruptive tests, alone.
func TestIntegrationDisruptiveDrillHA(t *testing.T) {
	c := mqtest.DLedger(t)
	sentinels, master := testenv.RedisSentinel(t)
	cfg := Config{
		Seed: 1, Faults: []string{FaultDLedgerLeader}, Gap: 4 * time.Second,
		DLedgerNamesrv: strings.Join(c.Namesrv, ","), DLedgerBrokers: strings.Join(c.Brokers, ","),
		Sentinels: sentinels, SentinelMaster: master, PG: testenv.PGURL(t),
		Dir: t.TempDir(), Log: t.Output(),
	}
	cfg.Workloads = StandardWorkloads([]string{"rp-outbox"}, cfg.DLedgerNamesrv, cfg.DLedgerBrokers, "zk", 400, 0, 4*time.Second)
	rep := drilltest.Run(t, 5*time.Minute, Run, cfg)
	if len(rep.Figures) != 1 || rep.Figures[0].NextLeader <= 0 || rep.Figures[0].NextPublish <= 0 || rep.Figures[0].NextCommit <= 0 {
		t.Fatalf("fault figures %+v: want a next leader, publish and commit measured", rep.Figures)
	}
}
