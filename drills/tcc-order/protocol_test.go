package main

import (
	"testing"

	"github.com/txkit/txkit/examples/tcc-order/app"
)

// TestAudit: the ledger audit of each mode counts what breaks its protocol, and nothing else.
func TestAudit(t *testing.T) {
	type counts struct{ twice, both, unsettled, stray int }
	for _, tc := range []struct {
		name     string
		mode     app.Mode
		status   string         // the coordinator's status of gid "g" ("": not recorded)
		ops      map[string]int // the ledger's ops of "g"
		want     counts
		noLedger bool // "g" has no ledger row at all
	}{
		{name: "tcc confirmed", mode: app.ModeTCC, status: "confirmed", ops: map[string]int{"try": 1, "confirm": 1}},
		{name: "tcc cancelled after its try", mode: app.ModeTCC, status: "cancelled", ops: map[string]int{"try": 1, "cancel": 1}},
		{name: "tcc cancelled, try refused", mode: app.ModeTCC, status: "cancelled", noLedger: true},
		{name: "tcc confirm applied twice", mode: app.ModeTCC, status: "confirmed", ops: map[string]int{"try": 1, "confirm": 2},
			want: counts{twice: 1}},
		{name: "tcc confirmed and cancelled", mode: app.ModeTCC, status: "confirmed", ops: map[string]int{"try": 1, "confirm": 1, "cancel": 1},
			want: counts{both: 1, stray: 1}},
		{name: "tcc confirmed without its confirm", mode: app.ModeTCC, status: "confirmed", ops: map[string]int{"try": 1},
			want: counts{unsettled: 1}},
		{name: "tcc cancelled, try kept", mode: app.ModeTCC, status: "cancelled", ops: map[string]int{"try": 1},
			want: counts{unsettled: 1}},
		{name: "tcc cancel without try", mode: app.ModeTCC, status: "cancelled", ops: map[string]int{"cancel": 1},
			want: counts{stray: 1}},
		{name: "tcc op of an unknown transaction", mode: app.ModeTCC, ops: map[string]int{"try": 1}, want: counts{stray: 1}},
		{name: "saga succeeded", mode: app.ModeSaga, status: "succeeded", ops: map[string]int{"action": 1}},
		{name: "saga compensated after its action", mode: app.ModeSaga, status: "compensated", ops: map[string]int{"action": 1, "compensate": 1}},
		{name: "saga compensated, action refused", mode: app.ModeSaga, status: "compensated", noLedger: true},
		{name: "saga action applied twice", mode: app.ModeSaga, status: "succeeded", ops: map[string]int{"action": 2},
			want: counts{twice: 1}},
		{name: "saga compensation applied twice", mode: app.ModeSaga, status: "compensated", ops: map[string]int{"action": 1, "compensate": 2},
			want: counts{twice: 1}},
		{name: "saga succeeded without its action", mode: app.ModeSaga, status: "succeeded", noLedger: true,
			want: counts{unsettled: 1}},
		{name: "saga succeeded but compensated", mode: app.ModeSaga, status: "succeeded", ops: map[string]int{"action": 1, "compensate": 1},
			want: counts{stray: 1}},
		{name: "saga compensated, action kept", mode: app.ModeSaga, status: "compensated", ops: map[string]int{"action": 1},
			want: counts{unsettled: 1}},
		{name: "saga compensation without action", mode: app.ModeSaga, status: "compensated", ops: map[string]int{"compensate": 1},
			want: counts{stray: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := ledger{}
			if !tc.noLedger {
				l["g"] = tc.ops
			}
			statuses := map[string]string{}
			if tc.status != "" {
				statuses["g"] = tc.status
			}
			var got counts
			got.twice, got.both, got.unsettled, got.stray = protocolOf(tc.mode).audit(l, statuses)
			if got != tc.want {
				t.Fatalf("audit = %+v, want %+v", got, tc.want)
			}
		})
	}
}
