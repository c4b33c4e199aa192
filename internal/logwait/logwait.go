// Package logwait is what the three-phase-commit agents (participant.Agent, threepc.PGAgent)
// share about a decision log they cannot reach: the outage as they see it — from the first failed
// question until the log answers or no branch waits any more — exported as a gauge of the wait and
// a counter of the textbook commits an explicit fallback made, and whether that fallback is due.
package logwait

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/internal/obs"
)

// AskTimeout bounds one question to the decision log.
const AskTimeout = 15 * time.Second

// ErrDown: a question to the decision log failed earlier in the same pass, so it was not asked.
var ErrDown = errors.New("the decision log could not be reached in this pass")

// Wait is one agent's view of its decision log's outage. It is safe for concurrent use.
type Wait struct {
	now       func() time.Time
	fallback  time.Duration // 0: never
	since     atomic.Int64  // now() in Unix ns at the first failed question of the outage; 0: none
	fallbacks prometheus.Counter
}

// New returns the Wait of an agent that commits by the textbook rule once the outage has lasted
// fallback (0: never), measured by now, and registers on reg (nil: none) the gauge
// txkit_<metric>_log_wait_seconds and the counter txkit_<metric>_fallbacks_total, both labelled
// label=value; what names what waits, in their help. Agents with the same value on one registerer
// share the series (the gauge: the first one's). A clashing registration is returned.
func New(reg prometheus.Registerer, metric, label, value, what string, fallback time.Duration, now func() time.Time) (*Wait, error) {
	w := &Wait{now: now, fallback: fallback}
	_, err := obs.Register(reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: obs.Namespace, Name: metric + "_log_wait_seconds",
		Help:        "How long " + what + " have been waiting for a decision log that cannot be reached (0: none waits). Page on it.",
		ConstLabels: prometheus.Labels{label: value}}, func() float64 { return w.Waited().Seconds() }))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	fallbacks, err := obs.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: obs.Namespace, Name: metric + "_fallbacks_total",
		Help: "Of the " + what + ", those committed by the textbook rule because the decision log had been unreachable longer than the agent's fallback."},
		[]string{label}))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	w.fallbacks = fallbacks.WithLabelValues(value)
	return w, nil
}

// Ask calls ask with ctx bounded by [AskTimeout], unless a question failed earlier in this pass
// (*down: it returns [ErrDown]). A failure while ctx lives sets *down and begins the outage, when
// none is under way (began). An answer leaves the outage to the caller's [Wait.End].
func (w *Wait) Ask(ctx context.Context, down *bool, ask func(context.Context) error) (began bool, err error) {
	if *down {
		return false, ErrDown
	}
	start := w.now()
	actx, cancel := context.WithTimeout(ctx, AskTimeout)
	err = ask(actx)
	cancel()
	if err == nil {
		return false, nil
	}
	if ctx.Err() == nil {
		*down = true
		began = w.since.CompareAndSwap(0, start.UnixNano())
	}
	return began, err
}

// End ends the outage — the log answered, or no branch waits for it any more — and returns how
// long it lasted, and false when none was under way.
func (w *Wait) End() (time.Duration, bool) {
	since := w.since.Swap(0)
	if since == 0 {
		return 0, false
	}
	return w.now().Sub(time.Unix(0, since)), true
}

// Waited returns how long the outage has lasted (0: none is under way).
func (w *Wait) Waited() time.Duration {
	since := w.since.Load()
	if since == 0 {
		return 0
	}
	return w.now().Sub(time.Unix(0, since))
}

// FallbackDue reports whether the outage has lasted the fallback.
func (w *Wait) FallbackDue() bool {
	return w.fallback > 0 && w.since.Load() != 0 && w.Waited() >= w.fallback
}

// Fallback counts one textbook commit the fallback made.
func (w *Wait) Fallback() { w.fallbacks.Inc() }
