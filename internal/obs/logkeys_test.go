package obs_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/tracelog"
)

func TestLogger(t *testing.T) {
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	traced := trace.ContextWithRemoteSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	for _, tc := range []struct {
		name string
		log  func(l *slog.Logger)
		want string
	}{
		{"call attributes", func(l *slog.Logger) { l.Info("m", "gid", "g1", "id", "a") },
			`level=INFO msg=m id=app txkit.gid=g1 txkit.id=a`},
		{"With", func(l *slog.Logger) { l.With("branch", "b").Warn("m", "err", "boom") },
			`level=WARN msg=m id=app txkit.branch=b txkit.err=boom`},
		{"group", func(l *slog.Logger) { l.Info("m", slog.Group("lease", "token", "0.1")) },
			`level=INFO msg=m id=app txkit.lease.token=0.1`},
		{"WithGroup", func(l *slog.Logger) { l.WithGroup("relay").Info("m", "topic", "t") },
			`level=INFO msg=m id=app txkit.relay.topic=t`},
		{"inline group", func(l *slog.Logger) { l.Info("m", slog.Group("", "op", "try")) },
			`level=INFO msg=m id=app txkit.op=try`},
		{"prefixed once", func(l *slog.Logger) { obs.Logger(l).Info("m", "txkit.gid", "g") },
			`level=INFO msg=m id=app txkit.gid=g`},
		{"trace ids of the application's handler", func(l *slog.Logger) { l.InfoContext(traced, "m", "gid", "g") },
			`level=INFO msg=m id=app txkit.gid=g trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			app := slog.New(tracelog.Handler(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: noTime}))).With("id", "app")
			tc.log(obs.Logger(app))
			if got := strings.TrimSpace(buf.String()); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
	if obs.Logger(nil) != nil {
		t.Fatal("Logger(nil) is not nil")
	}
	l := obs.Logger(slog.New(slog.DiscardHandler))
	if obs.Logger(l) != l {
		t.Fatal("Logger of a Logger's logger is a new logger")
	}
}
