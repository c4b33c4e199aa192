package tracelog_test

import (
	"context"
	"log/slog"
	"os"

	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/tracelog"
)

// A record logged with a context that carries a span gets the span's ids; one logged without a
// context does not.
func ExampleHandler() {
	// The span context a component would have: here a fixed remote parent, as a participant has
	// after reading a traceparent header.
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithRemoteSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))

	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	log := slog.New(tracelog.Handler(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: noTime})))
	log.WarnContext(ctx, "core: drive failed; rescheduled", "gid", "order-42")
	log.Info("no context, no ids")
	// Output:
	// level=WARN msg="core: drive failed; rescheduled" gid=order-42 trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7
	// level=INFO msg="no context, no ids"
}
