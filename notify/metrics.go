package notify

import (
	"context"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/lock"
)

// The results of an attempt, the values of txkit_notify_attempts_total's result label.
const (
	attemptOK          = "ok"           // the receiver acknowledged
	attemptError       = "error"        // no answer: the connection failed or timed out
	attemptRefused     = "refused"      // an answer that is not an acknowledgement (non-2xx, wrong echo)
	attemptCircuitOpen = "circuit_open" // held back by the receiver's circuit breaker: nothing sent
)

// otherReceivers is the circuit gauge's receiver label of the receivers past the bounded set.
const otherReceivers = "other"

// metrics is a Notifier's Prometheus collectors (see [WithTelemetry]). The due gauge and the
// circuit gauges are shared by the notifiers of one registry, so each notifier adds its own
// part (and takes it back when its term ends) instead of setting them.
type metrics struct {
	due       prometheus.Gauge
	delivered prometheus.Counter
	givenUp   prometheus.Counter
	attempts  *prometheus.CounterVec
	attempt   map[string]prometheus.Counter // attempts' series by result, looked up once
	latency   prometheus.Histogram
	circuit   *prometheus.GaugeVec
	labels    map[string]string // receiver name → its circuit label: its name, or "other"

	mu      sync.Mutex
	terms   int     // terms on (one per partition led): the due gauge may be set while any is
	lastDue float64 // this notifier's part of the due gauge
}

// newMetrics builds the collectors and registers them on reg (nil: none). The first
// maxReceivers of rcvs (in the order given to New) get a circuit series of their own, the others
// share receiver="other". A registration clash returns an error wrapping ErrInvalidOption.
func newMetrics(reg prometheus.Registerer, rcvs []Receiver, maxReceivers int) (*metrics, error) {
	name := func(n string) string { return prometheus.BuildFQName(obs.Namespace, "notify", n) }
	m := &metrics{labels: make(map[string]string, len(rcvs))}
	var err error
	if m.due, err = obs.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: name("due"),
		Help: "Notifications due for delivery, counted by the leader on every tick."})); err != nil {
		return nil, fmt.Errorf("notify: metrics: %w: %w", err, ErrInvalidOption)
	}
	if m.delivered, err = obs.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: name("delivered_total"),
		Help: "Notifications the receiver acknowledged (recorded by the leader)."})); err != nil {
		return nil, fmt.Errorf("notify: metrics: %w: %w", err, ErrInvalidOption)
	}
	if m.givenUp, err = obs.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: name("given_up_total"),
		Help: "Notifications failed: every attempt of the schedule failed."})); err != nil {
		return nil, fmt.Errorf("notify: metrics: %w: %w", err, ErrInvalidOption)
	}
	if m.attempts, err = obs.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("attempts_total"),
		Help: "Delivery attempts by result: ok, error (no answer), refused (an answer that is not an acknowledgement), circuit_open (held back by the breaker)."},
		[]string{"result"})); err != nil {
		return nil, fmt.Errorf("notify: metrics: %w: %w", err, ErrInvalidOption)
	}
	if m.latency, err = obs.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: name("delivery_seconds"),
		Help: "One delivery attempt's HTTP round trip, in seconds.", Buckets: obs.DurationBuckets()})); err != nil {
		return nil, fmt.Errorf("notify: metrics: %w: %w", err, ErrInvalidOption)
	}
	if m.circuit, err = obs.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name("circuit_open"),
		Help: `Receivers whose circuit breaker is open (1 open, 0 closed); receivers past the bounded set are summed under receiver="other".`},
		[]string{"receiver"})); err != nil {
		return nil, fmt.Errorf("notify: metrics: %w: %w", err, ErrInvalidOption)
	}
	for _, r := range rcvs {
		label := otherReceivers
		if len(m.labels) < maxReceivers {
			label = r.Name
		}
		m.labels[r.Name] = label
		m.circuit.WithLabelValues(label).Add(0) // the series exists, at 0, before any circuit opens
	}
	m.attempt = map[string]prometheus.Counter{}
	for _, r := range []string{attemptOK, attemptError, attemptRefused, attemptCircuitOpen} {
		m.attempt[r] = m.attempts.WithLabelValues(r)
	}
	return m, nil
}

// circuitOpened and circuitClosed move receiver's circuit gauge.
func (m *metrics) circuitOpened(receiver string) { m.circuit.WithLabelValues(m.labels[receiver]).Inc() }
func (m *metrics) circuitClosed(receiver string) { m.circuit.WithLabelValues(m.labels[receiver]).Dec() }

// setDue sets this notifier's part of the due gauge to v, while a term is on.
func (m *metrics) setDue(v float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.terms > 0 {
		m.due.Add(v - m.lastDue)
		m.lastDue = v
	}
}

// term starts (leading) or ends a leadership term; at its end this notifier's part of the due
// gauge is taken back: only a leader counts.
func (m *metrics) term(leading bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if leading {
		m.terms++
	} else {
		m.terms--
	}
	if m.terms == 0 {
		m.due.Sub(m.lastDue)
		m.lastDue = 0
	}
}

// countDue is the leader's cron job that sets the due gauge ([WithTelemetry]): it counts the
// pending notifications of its receivers whose attempt is due, each receiver's from its stored
// watermark (due.go).
func (n *Notifier) countDue(ctx context.Context, _ lock.Token) error {
	names := make([]string, 0, len(n.receivers))
	for name := range n.receivers {
		names = append(names, name)
	}
	var due int64
	if err := n.pool.QueryRow(ctx, `select coalesce(sum((select count(*) from `+n.table+` t where t.receiver = r.name
	and t.next_attempt_at >= coalesce(m.due_from, '-infinity') and t.next_attempt_at <= now() and t.status = 'pending')), 0)::int8
from unnest($1::text[]) r(name) left join `+n.marks+` m on m.receiver = r.name`, names).Scan(&due); err != nil {
		return fmt.Errorf("count due notifications: %w", err)
	}
	n.metrics.setDue(float64(due)) // unless the term ended meanwhile
	return nil
}
