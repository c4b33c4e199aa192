package rocketmq

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/txkit/txkit/internal/obs"
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
// No message body or property reaches l: a field holding messages (the client logs the pulled
// batch whenever a handler fails) is logged as their count and message ids, any other struct, map
// or pointer as its type name. A line the client repeats is written at most once per 5 s per
// level and text, with "suppressed" counting those held back (docs/outbox.md).
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
	return newRlogAdapter(l, level, nil)
}

func newRlogAdapter(l *slog.Logger, level slog.Level, now func() time.Time) *rlogAdapter {
	a := &rlogAdapter{l: l, repeats: obs.NewLogLimiter(obs.LogInterval, now)}
	a.level.Set(level)
	return a
}

type rlogAdapter struct {
	l       *slog.Logger
	level   slog.LevelVar
	repeats *obs.LogLimiter // keyed by level and text
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
	a.repeats.Flush() // any line of the client's, of any level, writes the repeats held back
	if msg == "" && len(fields) == 0 {
		return
	}
	if level >= slog.LevelWarn && shuttingDown(fields) {
		level = slog.LevelDebug // the client's own goroutines failing while Close stops it: expected
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
		attrs = append(attrs, slog.Attr{Key: k, Value: clientValue(fields[k])})
	}
	a.repeats.Log(ctx, a.l, level.String()+"\x00"+msg, level, msg, attrs...)
}

// shuttingDown reports whether a field of a client line holds the client's "service close is not
// running" error: its pull and rebalance goroutines fail with it while Shutdown stops the client
// (v2.1.2 logs "fetch offset of mq from broker error" at ERROR then), which is a clean exit.
func shuttingDown(fields map[string]any) bool {
	for _, v := range fields {
		var text string
		switch v := v.(type) {
		case error:
			text = v.Error()
		case string:
			text = v
		}
		if strings.Contains(text, "service close is not running") {
			return true
		}
	}
	return false
}

// maxLoggedIDs bounds the message ids logged for a field holding messages.
const maxLoggedIDs = 16

// clientValue is what the adapter logs for the value of a field of the client's: never a
// message's body or properties. Messages become their count and broker message ids (at most
// maxLoggedIDs of them); queues their description; errors their text; bytes their count; values
// of basic kinds and slices of them stay as they are; any other struct, map, pointer or interface
// value becomes its type name, since it might hold a message.
func clientValue(v any) slog.Value {
	switch x := v.(type) {
	case nil:
		return slog.AnyValue(nil)
	case *primitive.MessageExt:
		return messagesValue([]*primitive.MessageExt{x}, 0)
	case []*primitive.MessageExt:
		return messagesValue(x, 0)
	case primitive.MessageExt:
		return messagesValue([]*primitive.MessageExt{&x}, 0)
	case *primitive.Message:
		return messagesValue(nil, 1)
	case []*primitive.Message:
		return messagesValue(nil, len(x))
	case primitive.Message:
		return messagesValue(nil, 1)
	case *primitive.MessageQueue:
		if x == nil {
			return slog.AnyValue(nil)
		}
		return slog.StringValue(x.String())
	case primitive.MessageQueue:
		return slog.StringValue(x.String())
	case []*primitive.MessageQueue:
		qs := make([]string, 0, len(x))
		for _, q := range x {
			if q != nil {
				qs = append(qs, q.String())
			}
		}
		return slog.StringValue(strings.Join(qs, ", "))
	case []byte: // a body, perhaps
		return slog.StringValue(fmt.Sprintf("(%d bytes, not logged)", len(x)))
	case error:
		return slog.StringValue(x.Error())
	case time.Duration, time.Time:
		return slog.AnyValue(x)
	}
	if basic(reflect.TypeOf(v)) {
		return slog.AnyValue(v)
	}
	return slog.StringValue(fmt.Sprintf("(%T, not logged)", v))
}

// basic reports whether t is a bool, number or string kind, or a slice or array of one.
func basic(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		return basic(t.Elem())
	case reflect.Bool, reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// messagesValue is the logged form of a field holding messages: the count, and the broker message
// ids of msgs (count: n when msgs is nil, the messages having no id yet).
func messagesValue(msgs []*primitive.MessageExt, n int) slog.Value {
	if msgs == nil {
		return slog.GroupValue(slog.Int("count", n))
	}
	ids := make([]string, 0, min(len(msgs), maxLoggedIDs))
	for _, m := range msgs {
		if len(ids) == maxLoggedIDs {
			break
		}
		if m != nil {
			ids = append(ids, m.MsgId)
		}
	}
	return slog.GroupValue(slog.Int("count", len(msgs)), slog.String("msg_ids", strings.Join(ids, ",")))
}
