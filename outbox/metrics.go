package outbox

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
)

// relayMetrics are a [Relay]'s Prometheus collectors (see [WithTelemetry]). They exist, and
// count, whether or not a registerer was given; without one nothing exposes them, and the relay
// skips the query that only the gauges need.
type relayMetrics struct {
	gauges          bool // a registerer was given: the relay measures the backlog each pass
	backlog         prometheus.Gauge
	oldest          prometheus.Gauge
	published       prometheus.Counter
	failures        prometheus.Counter
	dead            prometheus.Counter
	batchSize       prometheus.Histogram
	commitToPublish prometheus.Histogram
}

// batchSizeBuckets are the buckets of txkit_outbox_batch_size: 1 to 512 messages, doubling.
func batchSizeBuckets() []float64 { return prometheus.ExponentialBuckets(1, 2, 10) }

// newRelayMetrics builds the relay's collectors and registers them on reg (nil: nowhere). A
// collector of the same description registered before — by another relay on the same registry —
// is used instead, so relays of one process add to the same series. A name taken by a metric of
// another kind is an error wrapping ErrInvalidOption.
func newRelayMetrics(reg prometheus.Registerer) (*relayMetrics, error) {
	const sub = "outbox"
	if pgutil.IsNil(reg) { // a nil *prometheus.Registry, say
		reg = nil
	}
	m := &relayMetrics{gauges: reg != nil}
	var err error
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: obs.Namespace, Subsystem: sub, Name: name, Help: help})
		if err == nil {
			g, err = obs.Register(reg, g)
		}
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: obs.Namespace, Subsystem: sub, Name: name, Help: help})
		if err == nil {
			c, err = obs.Register(reg, c)
		}
		return c
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: obs.Namespace, Subsystem: sub, Name: name,
			Help: help, Buckets: buckets})
		if err == nil {
			h, err = obs.Register(reg, h)
		}
		return h
	}
	m.backlog = gauge("backlog",
		"Pending outbox messages (due or waiting out a backoff), counted by the leading relay each pass; 0 on a relay that does not lead.")
	m.oldest = gauge("oldest_pending_seconds",
		"Age of the oldest pending outbox message (since its enqueue), measured by the leading relay each pass; 0 when none is pending or the relay does not lead.")
	m.published = counter("published_total", "Outbox messages whose publish the broker acknowledged.")
	m.failures = counter("publish_failures_total", "Failed publish attempts of outbox messages (each failed attempt counts).")
	m.dead = counter("dead_total", "Outbox messages the relay made dead: too many failed publishes, or a message the broker can never carry.")
	m.batchSize = histogram("batch_size", "Messages in each non-empty batch the relay read.", batchSizeBuckets())
	m.commitToPublish = histogram("commit_to_publish_seconds",
		"Time from an outbox message's enqueue (its row's created_at) to the broker's acknowledgement of its publish.",
		obs.DurationBuckets())
	if err != nil {
		return nil, fmt.Errorf("outbox: relay: %w: %w", err, ErrInvalidOption)
	}
	return m, nil
}

// setBacklog sets the gauges from one count of the pending rows.
func (m *relayMetrics) setBacklog(pending int64, oldest time.Duration) {
	m.backlog.Set(float64(pending))
	m.oldest.Set(oldest.Seconds())
}
