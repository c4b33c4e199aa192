package core

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/participant"
)

// metrics are a coordinator's Prometheus collectors (coordinator.WithRegisterer), labelled by
// protocol ([Kind.String]) and bounded values only: op, phase, result, outcome. Coordinators of
// one process registered on one registerer share them ([obs.Register]).
type metrics struct {
	exposed            bool                  // registered: the leader also measures its backlog
	reg                prometheus.Registerer // where they are registered: partitioned recovery's unled gauge too
	begun, finished    *prometheus.CounterVec
	calls              *prometheus.CounterVec
	phase              *prometheus.HistogramVec
	backlog, oldest    *prometheus.GaugeVec
	attempts, timedOut *prometheus.CounterVec
}

// newMetrics builds the collectors and registers them on reg (none when reg is nil). A clash with
// a collector registered before under one of their names returns the registration's error.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	counter := func(sub, name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: obs.Namespace, Subsystem: sub, Name: name, Help: help}, labels)
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: obs.Namespace, Subsystem: "recovery", Name: name, Help: help}, []string{"protocol"})
	}
	m := &metrics{
		exposed: reg != nil,
		reg:     reg,
		begun:   counter("coordinator", "transactions_begun_total", "Global transactions recorded (begun) by this process.", "protocol"),
		finished: counter("coordinator", "transactions_finished_total",
			"Global transactions whose final status this process recorded, by outcome (committed, aborted).", "protocol", "outcome"),
		calls: counter("coordinator", "branch_calls_total",
			"Branch op calls made by this process, by op, transport (http, grpc, inproc) and result (ok, refused, error).", "protocol", "op", "transport", "result"),
		phase: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: obs.Namespace, Subsystem: "coordinator", Name: "phase_seconds",
			Help: "Duration of one branch op call, by phase (the op).", Buckets: obs.DurationBuckets()}, []string{"protocol", "phase"}),
		backlog: gauge("backlog", "Unfinished global transactions due for recovery, measured by the leader at each recovery pass."),
		oldest:  gauge("oldest_unfinished_seconds", "Age of the oldest unfinished global transaction, measured by the leader at each recovery pass."),
		attempts: counter("recovery", "attempts_total",
			"Transactions driven by the recovering leader, by result (ok, error: rescheduled with backoff).", "protocol", "result"),
		timedOut: counter("recovery", "timed_out_total", "Trying transactions the leader moved to cancelling at their timeout.", "protocol"),
	}
	var err error
	register := func(c prometheus.Collector) prometheus.Collector {
		got, rerr := obs.Register(reg, c)
		err = errors.Join(err, rerr)
		return got
	}
	m.begun = register(m.begun).(*prometheus.CounterVec)
	m.finished = register(m.finished).(*prometheus.CounterVec)
	m.calls = register(m.calls).(*prometheus.CounterVec)
	m.phase = register(m.phase).(*prometheus.HistogramVec)
	m.backlog = register(m.backlog).(*prometheus.GaugeVec)
	m.oldest = register(m.oldest).(*prometheus.GaugeVec)
	m.attempts = register(m.attempts).(*prometheus.CounterVec)
	m.timedOut = register(m.timedOut).(*prometheus.CounterVec)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// kindMetrics are the series of one protocol that the hot paths add to, resolved once (the
// branch calls' the first time an op is called), so that counting is a few atomic adds. A nil
// *kindMetrics counts nothing (a [Log] made by [New] outside a coordinator).
type kindMetrics struct {
	m                         *metrics
	kind                      string
	begun, committed, aborted prometheus.Counter
	ops                       [opCount][transportCount]opMetrics
}

// transportCount is the number of transports a branch call is labelled with (transportIndex).
const transportCount = 3

// transportIndex maps a transport ([transportOf]) to its slot in kindMetrics.ops.
func transportIndex(t string) int {
	switch t {
	case transportHTTP:
		return 0
	case transportGRPC:
		return 1
	}
	return 2
}

// opCount bounds the participant ops (participant.Op values) resolved once; others, which no
// coordinator calls, are looked up at each call.
const opCount = 16

type opMetrics struct {
	once                sync.Once
	ok, refused, failed prometheus.Counter
	dur                 prometheus.Observer
}

func (m *metrics) forKind(k Kind) *kindMetrics {
	kind := k.String()
	return &kindMetrics{m: m, kind: kind, begun: m.begun.WithLabelValues(kind),
		committed: m.finished.WithLabelValues(kind, "committed"), aborted: m.finished.WithLabelValues(kind, "aborted")}
}

// began counts a transaction recorded.
func (km *kindMetrics) began() {
	if km != nil {
		km.begun.Inc()
	}
}

// finished counts a transaction that reached the final status st: confirmed (tcc, 2pc, 3pc) and
// succeeded (saga) are committed, cancelled and compensated aborted.
func (km *kindMetrics) finished(st Status) {
	if km == nil {
		return
	}
	switch st {
	case StatusConfirmed, StatusSucceeded:
		km.committed.Inc()
	case StatusCancelled, StatusCompensated:
		km.aborted.Inc()
	}
}

// called counts a branch call of op over transport ([transportOf]) that took d and returned err.
func (km *kindMetrics) called(op participant.Op, transport string, d time.Duration, err error) {
	if km == nil {
		return
	}
	var o *opMetrics
	if int(op) < opCount {
		o = &km.ops[op][transportIndex(transport)]
	} else {
		o = new(opMetrics)
	}
	o.once.Do(func() {
		name := op.String()
		o.ok = km.m.calls.WithLabelValues(km.kind, name, transport, "ok")
		o.refused = km.m.calls.WithLabelValues(km.kind, name, transport, "refused")
		o.failed = km.m.calls.WithLabelValues(km.kind, name, transport, "error")
		o.dur = km.m.phase.WithLabelValues(km.kind, name)
	})
	switch {
	case err == nil:
		o.ok.Inc()
	case errors.Is(err, participant.ErrRefused):
		o.refused.Inc()
	default:
		o.failed.Inc()
	}
	o.dur.Observe(d.Seconds())
}
