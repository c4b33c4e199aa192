package obs

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRegisterSharesSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Namespace: Namespace, Name: "things_total", Help: "Things."}
	a, err := Register(reg, prometheus.NewCounterVec(opts, []string{"kind"}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Register(reg, prometheus.NewCounterVec(opts, []string{"kind"}))
	if err != nil {
		t.Fatal(err)
	}
	a.WithLabelValues("x").Inc()
	b.WithLabelValues("x").Inc()
	if got := testutil.ToFloat64(a.WithLabelValues("x")); got != 2 {
		t.Fatalf("shared counter = %v, want 2", got)
	}
	// The same name with other labels is an error, not a silent second series.
	if _, err := Register(reg, prometheus.NewCounterVec(opts, []string{"other"})); err == nil {
		t.Fatal("a clashing registration was accepted")
	}
	// No registerer: counts, exposes nothing.
	c, err := Register(nil, prometheus.NewCounter(prometheus.CounterOpts{Name: "n"}))
	if err != nil {
		t.Fatal(err)
	}
	c.Inc()
	if testutil.ToFloat64(c) != 1 {
		t.Fatal("an unregistered counter does not count")
	}
}
