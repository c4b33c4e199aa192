package notify

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// attempt delivers d unless the receiver's breaker f (a term's, or this process's for Deliver and
// Do) holds it back: while the circuit is open nothing is sent; once the cool-down has passed one
// delivery goes through as a probe, and the others wait for its outcome.
func (n *Notifier) attempt(ctx context.Context, rcv Receiver, f *flight, d due) result {
	wait := n.admit(f)
	if wait > 0 {
		n.metrics.attempt[attemptCircuitOpen].Inc()
		return result{id: d.ID, receiver: rcv.Name, skipped: wait}
	}
	r := n.deliver(ctx, rcv, d)
	n.trip(trace.ContextWithSpanContext(ctx, r.span), f, r)
	return r
}

// trip updates the receiver's breaker with a delivery's outcome, at once, so the receiver's other
// workers see an opened circuit before they send anything more.
func (n *Notifier) trip(ctx context.Context, f *flight, r result) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if r.ok {
		f.failures, f.openUntil, f.probing = 0, time.Time{}, false
		if f.shownOpen {
			f.shownOpen = false
			n.metrics.circuitClosed(r.receiver)
		}
		return
	}
	f.failures++
	f.probing = false
	now := time.Now()
	if f.failures >= n.o.breakerFailures && (f.openUntil.IsZero() || !now.Before(f.openUntil)) {
		f.openUntil = now.Add(n.o.breakerCooldown)
		n.stats.breakerOpen.Add(1)
		if !f.shownOpen && !f.direct { // the gauge shows the leader's circuits
			f.shownOpen = true
			n.metrics.circuitOpened(r.receiver)
		}
		n.o.log.WarnContext(ctx, "notify: receiver keeps failing; holding its deliveries back", slog.String("receiver", r.receiver),
			slog.Int("failures", f.failures), slog.Duration("cooldown", n.o.breakerCooldown))
	}
}
