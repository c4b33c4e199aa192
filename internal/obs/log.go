package obs

import (
	"log/slog"

	"github.com/txkit/txkit/tracelog"
)

// LogHandler is [tracelog.Handler]: h with trace_id and span_id added to the records logged under
// a span.
func LogHandler(h slog.Handler) slog.Handler { return tracelog.Handler(h) }
