package rocketmq

import (
	"context"
	"log/slog"
	"sort"
	"strings"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// SetClientLogger points rocketmq-client-go's two process-wide hooks at l, in one call for a
// program's main, so that it need not import the client's rlog and primitive packages:
//
//   - its logger: the client's own lines go to l at level and above ([NewRlogAdapter]; warn is a
//     good level — the client is chatty at info), instead of logrus at info to stdout;
//   - its panic hook: a panic in one of the client's goroutines is logged to l at error level and
//     ends that goroutine instead of the process ([NewPanicHandler] says what this does and does
//     not cover).
//
// Both go together because both decide where the client's own diagnostics go, and a program that
// routes the client's lines to its logger wants the client's panics there too. A program that
// wants one without the other uses NewRlogAdapter or NewPanicHandler alone.
//
//	rocketmq.SetClientLogger(log.With("component", "rocketmq-client"), slog.LevelWarn)
//
// Call it once, before creating any [Publisher], [Consumer] or [TxProducer]: the client reads both
// hooks without synchronization. Library code never calls it (it changes process-wide state); a
// nil l discards the client's lines and still recovers its panics.
func SetClientLogger(l *slog.Logger, level slog.Level) {
	rlog.SetLogger(NewRlogAdapter(l, level))
	primitive.PanicHandler = NewPanicHandler(l)
}

// NewRlogAdapter returns an [rlog.Logger] that writes rocketmq-client-go's own log lines to l, at
// level and above (the client is chatty at info: offsets, rebalances, heartbeats). Each line's
// fields become slog attributes, sorted by name. The client's Fatal lines are logged at error
// level with fatal=true; the adapter never exits the process. Level (what rlog.SetLogLevel calls)
// changes the threshold; OutputPath is ignored (l's handler decides where lines go).
//
// rocketmq-client-go logs through one process-wide logger, so installing the adapter is a
// program's decision, not a library's: this package never calls rlog.SetLogger itself. A main
// calls [SetClientLogger], or, to install the adapter alone:
//
//	rlog.SetLogger(rocketmq.NewRlogAdapter(log.With("component", "rocketmq-client"), slog.LevelWarn))
//
// The adapter is safe for concurrent use.
func NewRlogAdapter(l *slog.Logger, level slog.Level) rlog.Logger {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	a := &rlogAdapter{l: l}
	a.level.Set(level)
	return a
}

type rlogAdapter struct {
	l     *slog.Logger
	level slog.LevelVar
}

func (a *rlogAdapter) Debug(msg string, fields map[string]any) {
	a.log(slog.LevelDebug, msg, fields, false)
}

func (a *rlogAdapter) Info(msg string, fields map[string]any) {
	a.log(slog.LevelInfo, msg, fields, false)
}

func (a *rlogAdapter) Warning(msg string, fields map[string]any) {
	a.log(slog.LevelWarn, msg, fields, false)
}

func (a *rlogAdapter) Error(msg string, fields map[string]any) {
	a.log(slog.LevelError, msg, fields, false)
}

func (a *rlogAdapter) Fatal(msg string, fields map[string]any) {
	a.log(slog.LevelError, msg, fields, true)
}

// Level sets the threshold by rlog's names: debug, info, warn, error, fatal (anything else: info).
func (a *rlogAdapter) Level(level string) {
	switch strings.ToLower(level) {
	case "debug":
		a.level.Set(slog.LevelDebug)
	case "warn", "warning":
		a.level.Set(slog.LevelWarn)
	case "error", "fatal":
		a.level.Set(slog.LevelError)
	default:
		a.level.Set(slog.LevelInfo)
	}
}

// OutputPath is ignored: where lines go is the slog handler's business.
func (a *rlogAdapter) OutputPath(string) error { return nil }

func (a *rlogAdapter) log(level slog.Level, msg string, fields map[string]any, fatal bool) {
	if msg == "" && len(fields) == 0 {
		return
	}
	ctx := context.Background()
	if level < a.level.Level() || !a.l.Enabled(ctx, level) {
		return
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	attrs := make([]slog.Attr, 0, len(names)+1)
	if fatal {
		attrs = append(attrs, slog.Bool("fatal", true))
	}
	for _, k := range names {
		attrs = append(attrs, slog.Any(k, fields[k]))
	}
	a.l.LogAttrs(ctx, level, msg, attrs...)
}
