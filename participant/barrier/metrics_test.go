package barrier_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
)

// Every barrier decision is counted by op and result: ran, duplicate, empty_rollback and
// hanging_refused; two barriers on one registry share the series; a clashing registry fails
// NewBarrier with ErrInvalidOption.
func TestIntegrationBarrierMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFixture(t, barrier.WithTelemetry(reg, nil))
	g := newFixture(t, barrier.WithTelemetry(reg, nil))
	ctx := t.Context()
	p, q := f.Bar.Participant(f.Record), g.Bar.Participant(g.Record)
	for _, r := range []participant.Request{
		req("g1", "b", participant.OpTry),     // ran
		req("g1", "b", participant.OpTry),     // duplicate
		req("g1", "b", participant.OpConfirm), // ran
		req("g2", "b", participant.OpCancel),  // empty rollback
	} {
		if err := p.Do(ctx, r); err != nil {
			t.Fatalf("Do(%s %s/%s): %v", r.Op, r.GID, r.Branch, err)
		}
	}
	if err := p.Do(ctx, req("g2", "b", participant.OpTry)); !errors.Is(err, barrier.ErrHanging) {
		t.Fatalf("try after its empty rollback = %v, want ErrHanging", err)
	}
	if err := q.Do(ctx, req("g1", "b", participant.OpTry)); err != nil { // the other barrier: its own table
		t.Fatal(err)
	}
	want := `
# HELP txkit_barrier_ops_total Barrier calls by op and result: ran (the business code was called), duplicate, empty_rollback, hanging_refused.
# TYPE txkit_barrier_ops_total counter
txkit_barrier_ops_total{op="cancel",result="empty_rollback"} 1
txkit_barrier_ops_total{op="confirm",result="ran"} 1
txkit_barrier_ops_total{op="try",result="duplicate"} 1
txkit_barrier_ops_total{op="try",result="hanging_refused"} 1
txkit_barrier_ops_total{op="try",result="ran"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "txkit_barrier_ops_total"); err != nil {
		t.Fatal(err)
	}

	clash := prometheus.NewRegistry()
	clash.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "txkit_barrier_ops_total", Help: "not a counter"}))
	if _, err := barrier.New(f.Pool, barrier.WithTelemetry(clash, nil)); !errors.Is(err, barrier.ErrInvalidOption) {
		t.Fatalf("NewBarrier on a clashing registry = %v, want ErrInvalidOption", err)
	}
}
