package coretest

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/tracelog"
)

// Tracing returns an in-memory exporter and a tracer provider that exports each span to it as
// the span ends (give it to coordinator.WithTelemetry and the other components' options;
// never set it as the global provider). The provider is shut down when t ends.
func Tracing(t testing.TB) (*tracetest.InMemoryExporter, trace.TracerProvider) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return exp, tp
}

// Attr returns the string attribute key of s ("" when s has none).
func Attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == attribute.Key(key) {
			return kv.Value.AsString()
		}
	}
	return ""
}

// Named returns the spans called name, in the order given.
func Named(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// WantSpans checks that spans hold n spans of each name in counts, all in trace tid with the
// attribute txkit.gid gid, failing the test when the counts differ, and returns them by name.
func WantSpans(t testing.TB, spans tracetest.SpanStubs, tid trace.TraceID, gid string, counts map[string]int) map[string][]tracetest.SpanStub {
	t.Helper()
	out := map[string][]tracetest.SpanStub{}
	for name, n := range counts {
		got := Named(spans, name)
		if len(got) != n {
			t.Fatalf("%d spans %q, want %d: %v", len(got), name, n, Names(spans))
		}
		for _, s := range got {
			if s.SpanContext.TraceID() != tid || Attr(s, "txkit.gid") != gid {
				t.Errorf("span %q: trace %s gid %q, want trace %s gid %s", name, s.SpanContext.TraceID(), Attr(s, "txkit.gid"), tid, gid)
			}
		}
		out[name] = got
	}
	return out
}

// Names returns the names of spans with their branch (txkit.branch) when they have one, for a
// test's failure message: "saga action/pay".
func Names(spans []tracetest.SpanStub) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name
		if b := Attr(s, "txkit.branch"); b != "" {
			out[i] += "/" + b
		}
	}
	return out
}

// TraceLogger returns a text logger of every level writing to l through tracelog.Handler, so that
// a line logged with a ctx carrying a span has that span's trace_id and span_id.
func (l *LogBuffer) TraceLogger() *slog.Logger {
	return slog.New(tracelog.Handler(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug})))
}

// Logged reports whether l holds a line containing msg (its quoted text, as the text handler
// writes it: msg="...") that carries the trace and span ids of sc.
func (l *LogBuffer) Logged(msg string, sc trace.SpanContext) bool {
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, "msg=\""+msg+"\"") && strings.Contains(line, "trace_id="+sc.TraceID().String()) &&
			strings.Contains(line, "span_id="+sc.SpanID().String()) {
			return true
		}
	}
	return false
}

// LinkedDrive waits up to 10 s for a "recovery drive" span of gid that ended without error and is
// linked to an ended "recovery pass" span, and returns it; it fails the test when none comes.
func LinkedDrive(t testing.TB, exp *tracetest.InMemoryExporter, gid string) tracetest.SpanStub {
	t.Helper()
	var drive tracetest.SpanStub
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		spans := exp.GetSpans()
		for _, d := range Named(spans, "recovery drive") {
			if Attr(d, "txkit.gid") != gid || d.Status.Code == codes.Error || len(d.Links) != 1 {
				continue
			}
			for _, p := range Named(spans, "recovery pass") {
				if p.SpanContext.SpanID() == d.Links[0].SpanContext.SpanID() {
					drive = d
					return true
				}
			}
		}
		return false
	}, "no successful drive of %s linked to an ended recovery pass: %v", gid, Names(exp.GetSpans()))
	return drive
}

// TracedBarrier returns a migrated barrier on s's schema that traces with tp, logging to the
// test's log, with opts.
func TracedBarrier(t testing.TB, s *testenv.Schema, tp trace.TracerProvider, opts ...barrier.Option) *barrier.Barrier {
	t.Helper()
	bar, err := barrier.New(s.Pool, append([]barrier.Option{barrier.WithTable(s.Name, ""),
		barrier.WithLogger(testenv.Logger(t)), barrier.WithTelemetry(nil, tp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := bar.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return bar
}
