package obs

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// LogHandler returns a handler that passes every record to h, adding the attributes trace_id and
// span_id (lowercase hex, as in traceparent) when the record's context carries a valid span
// context — the span a component started, or one it continues — so that a log line can be found
// from a trace and the other way round. Records logged without a context (Info rather than
// InfoContext), or under a context without a span, pass unchanged. The ids are added with the
// record's other attributes, so inside the groups opened by WithGroup. It is safe for concurrent
// use when h is.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h: h} }

type logHandler struct{ h slog.Handler }

func (l logHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return l.h.Enabled(ctx, level)
}

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone() // the caller's record may share its attributes with other copies
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return l.h.Handle(ctx, r)
}

func (l logHandler) WithAttrs(as []slog.Attr) slog.Handler { return logHandler{h: l.h.WithAttrs(as)} }

func (l logHandler) WithGroup(name string) slog.Handler { return logHandler{h: l.h.WithGroup(name)} }
