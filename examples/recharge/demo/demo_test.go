package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// TestIntegrationRechargeDemo: 12 top-ups through the two services; order-005's deliveries are
// all lost, the first two deliveries time out and the account service answers 500 to the next
// three. Every top-up ends credited exactly once: 11 by notification (the retried ones too), the
// lost one by reconciliation through the query API, and reconciling every order again credits
// nothing.
func TestIntegrationRechargeDemo(t *testing.T) {
	cfg := Config{Recharges: 12, Lost: []string{"order-005"}, FailFirst: 3, SlowFirst: 2, Slow: 1500 * time.Millisecond,
		CallTimeout: time.Second, Schedule: []time.Duration{time.Second, time.Second, 2 * time.Second},
		PG: testenv.PGURL(t), ZK: strings.Join(testenv.ZK(t), ","), Dir: t.TempDir(), Log: t.Output()}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.OK(); err != nil {
		t.Fatal(err)
	}
	if rep.ByNotification != 11 || rep.ByReconcile != 1 || rep.Reconcile.Credited != 1 {
		t.Fatalf("%d credited by notification, %d by reconcile (reconcile said %d); want 11, 1, 1",
			rep.ByNotification, rep.ByReconcile, rep.Reconcile.Credited)
	}
	if len(rep.Retried) == 0 {
		t.Fatal("no notification was delivered after a failed attempt")
	}
}
