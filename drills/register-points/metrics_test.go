package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/txkit/txkit/drills/internal/drilltest"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

// TestIntegrationRegisterPointsMetrics: 100 registrations, then the services' real GET /metrics
// over HTTP say what the work did: the relay published 100 messages (summed over the users
// instances: only the elected one relays), each with its commit-to-publish latency, its backlog
// is 0, one users instance leads the relay election, and the points consumer handled 100
// (duplicates are counted apart, so handled is exactly the users awarded).
func TestIntegrationRegisterPointsMetrics(t *testing.T) {
	const users = 100
	cfg := config(t, users)
	client := &http.Client{Timeout: 10 * time.Second}
	var seen scraped
	cfg.Settled = func(ctx context.Context, usersAddrs []string, points string) error {
		// The counters move just after the database does (a relay counts once the broker has
		// acknowledged, the consumer once its transaction has committed): wait until they stop short
		// of nothing, then check them exactly.
		testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() bool {
			s, err := scrapeDemo(ctx, client, usersAddrs, points)
			if err != nil {
				seen.err = err
				return false
			}
			seen = s
			return s.published >= users && s.backlog == 0 && s.handled >= users
		}, "relay and consumer metrics: %v", &seen)
		return nil
	}
	rep := drilltest.Run(t, 5*time.Minute, Run, cfg)
	if rep.Registered != users {
		t.Fatalf("%d users registered, want %d", rep.Registered, users)
	}
	if seen.published != users || seen.lagCount != users || seen.backlog != 0 || seen.leaders != 1 || seen.handled != users {
		t.Fatalf("metrics %v; want published %d, as many latencies, backlog 0, 1 leader, handled %d", &seen, users, users)
	}
	t.Logf("scraped: %v", &seen)
}

// scraped is what the test reads from the demo's services.
type scraped struct {
	published, backlog, leaders, handled, duplicate float64
	lagCount                                        uint64 // txkit_outbox_commit_to_publish_seconds observations
	families                                        int    // metric families on the points service
	err                                             error
}

func (s *scraped) String() string {
	return fmt.Sprintf("txkit_outbox_published_total %v, txkit_outbox_commit_to_publish_seconds_count %d, txkit_outbox_backlog %v, "+
		"txkit_lock_is_leader %v (summed over the users instances); txkit_rocketmq_consumed_total handled %v, duplicate %v "+
		"on points (%d families); last scrape error %v",
		s.published, s.lagCount, s.backlog, s.leaders, s.handled, s.duplicate, s.families, s.err)
}

// scrapeDemo scrapes every users instance and the points service.
func scrapeDemo(ctx context.Context, client *http.Client, users []string, points string) (scraped, error) {
	var s scraped
	for _, addr := range users {
		fams, err := scrape(ctx, client, addr)
		if err != nil {
			return s, err
		}
		s.published += sum(fams, "txkit_outbox_published_total", "", "")
		s.backlog += sum(fams, "txkit_outbox_backlog", "", "")
		s.leaders += sum(fams, "txkit_lock_is_leader", "", "")
		for _, m := range fams["txkit_outbox_commit_to_publish_seconds"].GetMetric() {
			s.lagCount += m.GetHistogram().GetSampleCount()
		}
	}
	fams, err := scrape(ctx, client, points)
	if err != nil {
		return s, err
	}
	s.families = len(fams)
	s.handled = sum(fams, "txkit_rocketmq_consumed_total", "result", "handled")
	s.duplicate = sum(fams, "txkit_rocketmq_consumed_total", "result", "duplicate")
	return s, nil
}

// scrape reads GET http://addr/metrics in Prometheus's text format.
func scrape(ctx context.Context, client *http.Client, addr string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse %s/metrics: %w", addr, err)
	}
	return fams, nil
}

// sum adds the values of the counter or gauge name's series whose label (when not "") has value.
func sum(fams map[string]*dto.MetricFamily, name, label, value string) float64 {
	var total float64
	for _, m := range fams[name].GetMetric() {
		if label != "" && !hasLabel(m, label, value) {
			continue
		}
		total += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
	}
	return total
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}
