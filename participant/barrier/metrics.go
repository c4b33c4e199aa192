package barrier

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/participant"
)

// The results of a barrier op, the values of txkit_barrier_ops_total's result label.
const (
	resultRan            = "ran"             // the business function was called
	resultDuplicate      = "duplicate"       // the op had run before: not called again
	resultEmptyRollback  = "empty_rollback"  // a cancel whose try never ran: answered success, not called
	resultHangingRefused = "hanging_refused" // a try after its cancel: refused with ErrHanging, not called
)

// metrics is a Barrier's Prometheus counter (see [WithTelemetry]).
type metrics struct {
	ops *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	ops, err := obs.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: obs.Namespace, Name: "barrier_ops_total",
		Help: "Barrier calls by op and result: ran (the business code was called), duplicate, empty_rollback, hanging_refused."},
		[]string{"op", "result"}))
	if err != nil {
		return nil, fmt.Errorf("barrier: metrics: %w: %w", err, ErrInvalidOption)
	}
	return &metrics{ops: ops}, nil
}

// count counts one call of op with result.
func (m *metrics) count(op participant.Op, result string) {
	m.ops.WithLabelValues(op.String(), result).Inc()
}
