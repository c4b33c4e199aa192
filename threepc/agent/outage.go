package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/threepc"
)

// askTimeout bounds one question to the decision log.
const askTimeout = 15 * time.Second

// errLogDown: a question to the decision log failed earlier in the same pass, so it was not asked.
var errLogDown = errors.New("the decision log could not be reached in this pass")

// outage is what both kinds of agent know of a decision log they cannot reach: the outage as they
// see it — from the first failed question until the log answers or no branch waits any more —
// exported as a gauge of the wait and a counter of the textbook commits an explicit fallback
// made, and whether that fallback is due. It is safe for concurrent use.
type outage struct {
	log     *slog.Logger // where the outage's beginning and end are logged, with attrs
	waiting string       // what waits, in those lines ("timed-out branches")
	attrs   []any

	now       func() time.Time
	fallback  time.Duration // 0: never
	since     atomic.Int64  // now() in Unix ns at the first failed question of the outage; 0: none
	fallbacks prometheus.Counter
}

// newOutage returns the outage of an agent that commits by the textbook rule once the outage has lasted
// fallback (0: never), measured by now, and registers on reg (nil: none) the gauge
// txkit_<metric>_log_wait_seconds and the counter txkit_<metric>_fallbacks_total, both labelled
// label=value; what names what waits, in their help. Agents with the same value on one registerer
// share the series (the gauge: the first one's). A clashing registration is returned.
func newOutage(reg prometheus.Registerer, metric, label, value, what string, fallback time.Duration, now func() time.Time) (*outage, error) {
	w := &outage{now: now, fallback: fallback}
	_, err := obs.Register(reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: obs.Namespace, Name: metric + "_log_wait_seconds",
		Help:        "How long " + what + " have been waiting for a decision log that cannot be reached (0: none waits). Page on it.",
		ConstLabels: prometheus.Labels{label: value}}, func() float64 { return w.waited().Seconds() }))
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

// ask calls ask with ctx bounded by askTimeout, unless a question failed earlier in this pass
// (*down: it returns errLogDown). A failure while ctx lives sets *down and begins the outage, when
// none is under way (began). An answer leaves the outage to the caller's end.
func (w *outage) ask(ctx context.Context, down *bool, ask func(context.Context) error) (began bool, err error) {
	if *down {
		return false, errLogDown
	}
	start := w.now()
	actx, cancel := context.WithTimeout(ctx, askTimeout)
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

// end ends the outage — the log answered, or no branch waits for it any more — and returns how
// long it lasted, and false when none was under way.
func (w *outage) end() (time.Duration, bool) {
	since := w.since.Swap(0)
	if since == 0 {
		return 0, false
	}
	return w.now().Sub(time.Unix(0, since)), true
}

// waited returns how long the outage has lasted (0: none is under way).
func (w *outage) waited() time.Duration {
	since := w.since.Load()
	if since == 0 {
		return 0
	}
	return w.now().Sub(time.Unix(0, since))
}

// fallbackDue reports whether the outage has lasted the fallback.
func (w *outage) fallbackDue() bool {
	return w.fallback > 0 && w.since.Load() != 0 && w.waited() >= w.fallback
}

// fellBack counts one textbook commit the fallback made.
func (w *outage) fellBack() { w.fallbacks.Inc() }

// decide asks dec about gid, unless a question failed earlier in this pass (*down); a failure sets
// *down and, when it begins the outage, is logged; an answer ends the outage.
func (w *outage) decide(ctx context.Context, dec Decider, gid string, down *bool) (threepc.Outcome, error) {
	var o threepc.Outcome
	began, err := w.ask(ctx, down, func(ctx context.Context) (err error) {
		o, err = dec.Decide(ctx, gid)
		return err
	})
	if began {
		w.log.WarnContext(ctx, "agent: cannot reach the decision log; "+w.waiting+" wait for it", append(w.attrs, slog.Any("err", err))...)
	}
	if err != nil {
		return 0, err
	}
	w.over(ctx)
	return o, nil
}

// over ends the outage, logging it if one was under way: the log answered, or nothing waits for
// it any more.
func (w *outage) over(ctx context.Context) {
	if lasted, ok := w.end(); ok {
		w.log.InfoContext(ctx, "agent: "+w.waiting+" no longer wait for the decision log", append(w.attrs, slog.Duration("waited", lasted))...)
	}
}
