// Package obstest reads what a Prometheus registry exposes, for the tests of txkit's metrics: the
// one helper that finds a series by name and labels, written once for every package's tests. For
// the tests of txkit's logs it keeps the lines a component logs ([Logs]) and moves a clock by hand
// ([Clock]).
package obstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Series returns the first series of the metric name gathered from g whose labels include
// labels (name, value pairs), and false when none does. It fails the test when g cannot be
// gathered.
func Series(t testing.TB, g prometheus.Gatherer, name string, labels ...string) (*dto.Metric, bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, labels) {
				return m, true
			}
		}
	}
	return nil, false
}

func hasLabels(m *dto.Metric, labels []string) bool {
	have := map[string]string{}
	for _, lp := range m.GetLabel() {
		have[lp.GetName()] = lp.GetValue()
	}
	for i := 0; i+1 < len(labels); i += 2 {
		if v, ok := have[labels[i]]; !ok || v != labels[i+1] {
			return false
		}
	}
	return true
}

// Value returns the value of the series of name whose labels include labels: a counter's or a
// gauge's value, a histogram's sample count; 0 when no series matches.
func Value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	m, ok := Series(t, g, name, labels...)
	switch {
	case !ok:
		return 0
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

// Histogram returns the sample sum and count of the histogram series of name whose labels include
// labels; zeros when none matches.
func Histogram(t testing.TB, g prometheus.Gatherer, name string, labels ...string) (sum float64, count uint64) {
	t.Helper()
	m, ok := Series(t, g, name, labels...)
	if !ok || m.GetHistogram() == nil {
		return 0, 0
	}
	return m.GetHistogram().GetSampleSum(), m.GetHistogram().GetSampleCount()
}
