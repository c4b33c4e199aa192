// Package obs holds what txkit's components share to expose Prometheus metrics, written once:
// the namespace of every metric ("txkit"), the latency buckets, and [Register], which registers a
// collector on the registerer a component was given — never the default registry — and, when a
// collector with the same description is already there (two coordinators of one protocol, two
// relays in one process), returns that one instead, so that they add to the same series. Labels
// are bounded by construction: components label by protocol, op, result, outcome and the like,
// never by gid, key, branch or message id. [LogLimiter] keeps the logs of failures that repeat
// for every message during an outage to a line per key per [LogInterval], with a count.
package obs

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every txkit metric.
const Namespace = "txkit"

// DurationBuckets returns the buckets of txkit's latency histograms, in seconds: 1 ms to 60 s.
func DurationBuckets() []float64 {
	return []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
}

// Register registers c on reg and returns the collector now registered for c's description: c,
// or the equal one registered before (by another component of the same kind). A nil reg
// registers nothing and returns c, so a component built without a registerer still counts
// (cheaply) and exposes nothing. Any other registration error (a name taken by a metric of
// another type or other labels) is returned.
func Register[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	if reg == nil {
		return c, nil
	}
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(T); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("obs: register metrics: %w", err)
}
