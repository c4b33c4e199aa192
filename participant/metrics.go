package participant

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/internal/obs"
)

// The results of a barrier op, the values of txkit_barrier_ops_total's result label.
const (
	barrierRan            = "ran"             // the business function was called
	barrierDuplicate      = "duplicate"       // the op had run before: not called again
	barrierEmptyRollback  = "empty_rollback"  // a cancel whose try never ran: answered success, not called
	barrierHangingRefused = "hanging_refused" // a try after its cancel: refused with ErrHanging, not called
)

// barrierMetrics is a Barrier's Prometheus counter (see [WithBarrierRegisterer]).
type barrierMetrics struct {
	ops *prometheus.CounterVec
}

func newBarrierMetrics(reg prometheus.Registerer) (*barrierMetrics, error) {
	ops, err := obs.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: obs.Namespace, Name: "barrier_ops_total",
		Help: "Barrier calls by op and result: ran (the business code was called), duplicate, empty_rollback, hanging_refused."},
		[]string{"op", "result"}))
	if err != nil {
		return nil, fmt.Errorf("participant: barrier: metrics: %w: %w", err, ErrInvalidOption)
	}
	return &barrierMetrics{ops: ops}, nil
}

// count counts one call of op with result.
func (m *barrierMetrics) count(op Op, result string) {
	m.ops.WithLabelValues(op.String(), result).Inc()
}
