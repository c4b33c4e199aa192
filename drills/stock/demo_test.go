package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/txkit/txkit/drills/internal/drilltest"
	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// config is a small run: the scenario, 120 orders from 16 buyers on 2 SKUs of 30, and two
// holders SIGKILLed.
func config(t *testing.T, lock string) Config {
	return Config{
		Lock: lock, Orders: 120, Buyers: 16, SKUs: 2, Stock: 30, Instances: 2, Kills: 2,
		TTL: 2 * time.Second, Window: 2 * time.Millisecond,
		PG: testenv.PGURL(t), Dir: t.TempDir(), Log: t.Output(),
	}
}

// TestIntegrationStockDemo: on every lock backend, the documents' scenario serves
// exactly one buyer, the load never oversells, each operation is applied once, stock + sold =
// initial, and each SIGKILLed holder's deduction is answered once its lock expires. On ZooKeeper
// the run leaves no lock node behind.
func TestIntegrationStockDemo(t *testing.T) {
	testenv.ZK(t)
	testenv.Redis(t)
	testenv.Redlock(t)
	testenv.RedisSentinel(t)
	for _, lock := range exapp.LockKinds() {
		t.Run(lock, func(t *testing.T) {
			rep := drilltest.Run(t, 2*time.Minute, Run, config(t, lock))
			if rep.Load.Deducted == 0 || rep.Load.Refused == 0 {
				t.Fatalf("load: %s; want both deducted and refused orders (the stock sells out)", rep.Load)
			}
			if len(rep.Recoveries) != 2 {
				t.Fatalf("%d recoveries measured, want 2", len(rep.Recoveries))
			}
			if lock == "zk" || lock == "zk-unfair" {
				noZKNode(t, "/txkit/"+lockPrefix(rep.Schema))
			}
		})
	}
}

// TestIntegrationStockChecksCatchNoLock: without the lock the same load oversells, and the checks
// must say so — a check that cannot fail proves nothing.
func TestIntegrationStockChecksCatchNoLock(t *testing.T) {
	cfg := config(t, "none")
	cfg.Kills = 0
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	t.Logf("report (err %v):\n%s", err, rep)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(rep.Violations, func(v string) bool { return strings.HasPrefix(v, "oversold:") }) {
		t.Fatalf("without a lock the checks found no oversell: %v", rep.Violations)
	}
}

// noZKNode fails t when ZooKeeper has the node p.
func noZKNode(t *testing.T, p string) {
	t.Helper()
	conn, _, err := zk.Connect(testenv.ZK(t), 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if ok, _, err := conn.Exists(p); err != nil || ok {
		t.Fatalf("%s after the run: exists %v, %v; want it deleted", p, ok, err)
	}
}
