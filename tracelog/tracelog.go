// Package tracelog puts OpenTelemetry trace and span ids on log/slog records, so that a log line
// of a txkit component can be found from a trace and the other way round.
//
// Every txkit component logs with the slog *Context methods (InfoContext, WarnContext, ...)
// under the ctx of the work it is doing: a coordinator's branch call, a leader's recovery drive
// (in the trace of the request that began the transaction, even on another process an hour
// later), the relay's publish of one message, a consumer's handling, a notification's delivery
// attempt. Wrap the handler of the logger you give them with [Handler]:
//
//	log := slog.New(tracelog.Handler(slog.NewJSONHandler(os.Stderr, nil)))
//	coord, err := tcc.New(pool, coordinator.WithLogger(log), coordinator.WithTelemetry(nil, tp))
//
// and each line logged under a span carries trace_id and span_id, in the lowercase hex of a W3C
// traceparent header:
//
//	{"time":"…","level":"WARN","msg":"core: drive failed; rescheduled","gid":"…","status":"cancelling","err":"…","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7"}
//
// The package depends only on the OpenTelemetry API: with no SDK installed there are no spans and
// records pass unchanged.
package tracelog

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Handler returns a handler that passes every record to h, adding the attributes trace_id and
// span_id (lowercase hex, as in traceparent) when the record's context carries a valid span
// context — a span a component started, one it continues, or a remote parent extracted from a
// request or a stored record — so that a log line can be found from a trace and the other way
// round. Records logged without a context (Info rather than InfoContext), or under a context
// without a span, pass unchanged. The ids are added with the record's other attributes, so inside
// the groups opened by WithGroup. Levels are h's. It is safe for concurrent use when h is.
func Handler(h slog.Handler) slog.Handler { return handler{h: h} }

type handler struct{ h slog.Handler }

func (l handler) Enabled(ctx context.Context, level slog.Level) bool {
	return l.h.Enabled(ctx, level)
}

func (l handler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone() // the caller's record may share its attributes with other copies
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return l.h.Handle(ctx, r)
}

func (l handler) WithAttrs(as []slog.Attr) slog.Handler { return handler{h: l.h.WithAttrs(as)} }

func (l handler) WithGroup(name string) slog.Handler { return handler{h: l.h.WithGroup(name)} }
