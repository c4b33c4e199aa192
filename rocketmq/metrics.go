package rocketmq

import (
	"fmt"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
)

// WithTelemetry sets where the clients' metrics and traces go; it fits all three constructors.
// reg registers a [Consumer]'s or a [TxProducer]'s txkit_rocketmq_* metrics, all listed in
// docs/metrics.md; a [Publisher] registers nothing (the relay counts its publishes). Default: none;
// [Consumer.Stats] still counts. Clients on one reg share the series; the constructor fails with
// an error wrapping [ErrInvalidOption] when a name is taken on reg by a metric of another kind or
// labels. tp is the OpenTelemetry tracer provider (default: the global one): a [Consumer] applies
// each message under a span "rocketmq consume", the child of the trace context the message's
// properties carry; a [TxProducer] sends under "rocketmq send" and answers check-backs under
// "rocketmq check-back"; a [Publisher] only propagates ctx's trace context (docs/tracing.md). A
// nil reg or tp keeps that part as it was.
func WithTelemetry(reg prometheus.Registerer, tp trace.TracerProvider) Option {
	return commonOption(func(o *commonOptions) {
		if reg != nil {
			o.reg = reg
		}
		if tp != nil {
			o.tp = tp
		}
	})
}

// consumerMetrics are a [Consumer]'s collectors, with the series of each result made at
// construction (so that they exist, at 0, before the first message).
type consumerMetrics struct {
	handled, duplicate, retry, poison prometheus.Counter
	handler                           prometheus.Histogram
}

// register registers c on reg (nil: nowhere) through obs.Register, which reuses an equal collector
// registered before, and wraps a clash in ErrInvalidOption.
func register[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	if pgutil.IsNil(reg) { // a nil *prometheus.Registry, say
		reg = nil
	}
	c, err := obs.Register(reg, c)
	if err != nil {
		return c, fmt.Errorf("%w: %w", err, ErrInvalidOption)
	}
	return c, nil
}

// resultCounters registers the counter vector name, labelled by result, on reg and returns its
// series for results, in order.
func resultCounters(reg prometheus.Registerer, name, help string, results ...string) ([]prometheus.Counter, error) {
	vec, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: obs.Namespace, Subsystem: "rocketmq", Name: name, Help: help,
	}, []string{"result"}))
	if err != nil {
		return nil, err
	}
	out := make([]prometheus.Counter, len(results))
	for i, r := range results {
		out[i] = vec.WithLabelValues(r)
	}
	return out, nil
}

func newConsumerMetrics(reg prometheus.Registerer) (*consumerMetrics, error) {
	consumed, err := resultCounters(reg, "consumed_total",
		"Messages a txkit RocketMQ consumer dealt with, by result: handled, duplicate (already claimed), retry (failed attempt, redelivered), poison (acknowledged without being applied).",
		"handled", "duplicate", "retry", "poison")
	if err != nil {
		return nil, err
	}
	handler, err := register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: obs.Namespace, Subsystem: "rocketmq", Name: "handler_seconds",
		Help:    "Time of the transaction in which a txkit RocketMQ consumer applies one message: claim, handler, commit or rollback.",
		Buckets: obs.DurationBuckets(),
	}))
	if err != nil {
		return nil, err
	}
	return &consumerMetrics{handled: consumed[0], duplicate: consumed[1], retry: consumed[2], poison: consumed[3], handler: handler}, nil
}

// txProducerMetrics are a [TxProducer]'s collectors.
type txProducerMetrics struct {
	commit, rollback, unknown prometheus.Counter
}

func newTxProducerMetrics(reg prometheus.Registerer) (*txProducerMetrics, error) {
	c, err := resultCounters(reg, "checkbacks_total",
		"Transaction check-backs a txkit RocketMQ transactional producer answered, by answer: commit, rollback, unknown.",
		"commit", "rollback", "unknown")
	if err != nil {
		return nil, err
	}
	return &txProducerMetrics{commit: c[0], rollback: c[1], unknown: c[2]}, nil
}

// checkback counts one check-back's answer.
func (m *txProducerMetrics) checkback(s primitive.LocalTransactionState) {
	switch s {
	case primitive.CommitMessageState:
		m.commit.Inc()
	case primitive.RollbackMessageState:
		m.rollback.Inc()
	default:
		m.unknown.Inc()
	}
}
