package obstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestValueAndHistogram(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, []string{"op", "result"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds", Help: "h"})
	reg.MustRegister(c, h)
	c.WithLabelValues("try", "ok").Add(3)
	c.WithLabelValues("try", "error").Add(1)
	h.Observe(0.5)
	h.Observe(1.5)
	for _, tc := range []struct {
		labels []string
		want   float64
	}{{[]string{"op", "try", "result", "ok"}, 3}, {[]string{"result", "error"}, 1}, {[]string{"result", "refused"}, 0}} {
		if got := Value(t, reg, "c_total", tc.labels...); got != tc.want {
			t.Errorf("Value(c_total, %v) = %v, want %v", tc.labels, got, tc.want)
		}
	}
	if sum, n := Histogram(t, reg, "h_seconds"); sum != 2 || n != 2 {
		t.Errorf("Histogram = %v, %v; want 2, 2", sum, n)
	}
	if Value(t, reg, "h_seconds") != 2 || Value(t, reg, "missing") != 0 {
		t.Error("a histogram's Value is its count, a missing metric's 0")
	}
}
