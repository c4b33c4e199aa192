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
// mode, 600 users, its own relay leader and consumer kills) and the per-key order workload on the DLedger
// group while the group's leader broker is SIGKILLed and started again, and the relays are cut
// off the leader broker for 4 s (iptables): every user ends with exactly 100 points, nothing is
// left pending, every key's messages are applied once and in order, the group elects a new leader
// and the publish probe and the registrations go on.
// It kills a node of a shared group, so make test runs it with the other Disruptive tests, alone.
func TestIntegrationDisruptiveDrillHA(t *testing.T) {
	c := mqtest.DLedger(t)
	sentinels, master := testenv.RedisSentinel(t)
	cfg := Config{
		// Seed 2 orders the faults relay-cut, then dledger-leader: both while registrations
		// still commit (with seed 1 the cut came after the 400 users were done, and measured no
		// next commit).
		Seed: 2, Faults: []string{FaultDLedgerLeader, FaultRelayCut}, Gap: 4 * time.Second, Cut: 4 * time.Second,
		DLedgerNamesrv: strings.Join(c.Namesrv, ","), DLedgerBrokers: strings.Join(c.Brokers, ","),
		Sentinels: sentinels, SentinelMaster: master, PG: testenv.PGURL(t),
		Dir: t.TempDir(), Log: t.Output(),
	}
	cfg.Workloads = StandardWorkloads([]string{"rp-outbox", "order"}, Load{Namesrv: cfg.DLedgerNamesrv, Brokers: cfg.DLedgerBrokers,
		Lock: "zk", Users: 600, SessionTimeout: 4 * time.Second, PG: cfg.PG, Dir: cfg.Dir})
	rep := drilltest.Run(t, 5*time.Minute, Run, cfg)
	if !strings.Contains(rep.Workloads["order"], "order violations:       0") {
		t.Fatalf("the order workload's report %q: want it, with 0 order violations", rep.Workloads["order"])
	}
	if len(rep.Figures) != 2 {
		t.Fatalf("fault figures %+v: want 2 faults", rep.Figures)
	}
	for _, f := range rep.Figures {
		if (f.Fault == FaultDLedgerLeader && f.NextLeader <= 0) || f.NextPublish <= 0 || f.NextCommit <= 0 {
			t.Fatalf("fault figures %+v: want a next publish and commit measured (and a next leader after the kill)", f)
		}
	}
}
