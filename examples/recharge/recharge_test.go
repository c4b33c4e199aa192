package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/txkit/txkit/internal/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

func TestIntegrationRechargeDemo(t *testing.T) {
	var out bytes.Buffer
	rep, err := Run(t.Context(), Config{PG: testenv.PGURL(t), ZK: strings.Join(testenv.ZK(t), ","), Recharges: 12, FailFirst: 3,
		Lost: 5, Out: &out, Log: testenv.Logger(t)})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) > 0 {
		t.Fatalf("checks broken: %v", rep.Violations)
	}
	if rep.ByReconcile != 1 || rep.ByNotification != 11 {
		t.Fatalf("%d by notification, %d by reconcile; want 11 and 1", rep.ByNotification, rep.ByReconcile)
	}
}
