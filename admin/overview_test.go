package admin_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

// On a schema where no txkit table exists yet, the overview is empty rather than an error, and
// its figures are the gatherer's txkit_ metrics summed over their labels.
func TestIntegrationOverviewFigures(t *testing.T) {
	s := testenv.PG(t)
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "txkit_outbox_published_total", Help: "h"}, []string{"topic"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "txkit_coordinator_phase_seconds", Help: "h"})
	other := prometheus.NewGauge(prometheus.GaugeOpts{Name: "go_goroutines_like", Help: "h"})
	reg.MustRegister(c, h, other)
	c.WithLabelValues("orders").Add(3)
	c.WithLabelValues("points").Add(4)
	h.Observe(0.1)
	h.Observe(0.2)
	other.Set(9)

	a, err := admin.New(s.Pool, admin.WithSchema(s.Name), admin.WithMetrics(nil, reg))
	if err != nil {
		t.Fatal(err)
	}
	ov, err := a.Overview(t.Context())
	if err != nil {
		t.Fatalf("Overview of an empty schema: %v", err)
	}
	if ov.Outbox != nil || ov.OldestUnfinished != nil || ov.Unfinished != 0 || ov.FailedNotifications != 0 || ov.At.IsZero() {
		t.Fatalf("overview of an empty schema: %+v", ov)
	}
	want := map[string]float64{"txkit_outbox_published_total": 7, "txkit_coordinator_phase_seconds_count": 2}
	if len(ov.Figures) != len(want) {
		t.Fatalf("figures %v, want %v", ov.Figures, want)
	}
	for k, v := range want {
		if ov.Figures[k] != v {
			t.Fatalf("figures %v, want %v", ov.Figures, want)
		}
	}
	// Transactions of logs that do not exist: an empty page.
	p, err := a.Transactions(t.Context(), admin.TxFilter{})
	if err != nil || len(p.Items) != 0 || p.Next != "" {
		t.Fatalf("Transactions without tables = %+v, %v", p, err)
	}
}
