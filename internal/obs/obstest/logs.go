package obstest

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
)

// Line is a log line captured by [Logs]: its level and message, its attributes flattened to text
// (a group's as "group.name"), and the whole line as slog's text handler writes it.
type Line struct {
	Level slog.Level
	Msg   string
	Attrs map[string]string
	Text  string
}

// Logs is a slog.Handler that keeps every line logged through it, at every level, for tests that
// assert on what a component logs. It is safe for concurrent use.
type Logs struct {
	store *logStore
	ops   []logOp // WithAttrs and WithGroup, in order
}

type logStore struct {
	mu    sync.Mutex
	lines []Line
}

// logOp is a WithAttrs (attrs) or a WithGroup (group).
type logOp struct {
	attrs []slog.Attr
	group string
}

// NewLogs returns a logger writing to a new Logs, and the Logs.
func NewLogs() (*slog.Logger, *Logs) {
	l := &Logs{store: &logStore{}}
	return slog.New(l), l
}

// Enabled reports true: every level is kept.
func (l *Logs) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps r.
func (l *Logs) Handle(ctx context.Context, r slog.Record) error {
	var buf bytes.Buffer
	var h slog.Handler = slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
	attrs := map[string]string{}
	prefix := ""
	for _, op := range l.ops {
		if op.group != "" {
			h = h.WithGroup(op.group)
			prefix += op.group + "."
			continue
		}
		h = h.WithAttrs(op.attrs)
		for _, a := range op.attrs {
			flatten(attrs, prefix, a)
		}
	}
	if err := h.Handle(ctx, r); err != nil {
		return err
	}
	r.Attrs(func(a slog.Attr) bool {
		flatten(attrs, prefix, a)
		return true
	})
	l.store.mu.Lock()
	l.store.lines = append(l.store.lines, Line{Level: r.Level, Msg: r.Message, Attrs: attrs, Text: strings.TrimSpace(buf.String())})
	l.store.mu.Unlock()
	return nil
}

// WithAttrs returns a handler that adds attrs to every line, sharing l's lines.
func (l *Logs) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Logs{store: l.store, ops: append(l.ops[:len(l.ops):len(l.ops)], logOp{attrs: attrs})}
}

// WithGroup returns a handler that puts the attributes that follow in group name, sharing l's
// lines.
func (l *Logs) WithGroup(name string) slog.Handler {
	if name == "" {
		return l
	}
	return &Logs{store: l.store, ops: append(l.ops[:len(l.ops):len(l.ops)], logOp{group: name})}
}

// Lines returns the lines kept so far whose message is msg, or all of them when msg is "".
func (l *Logs) Lines(msg string) []Line {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	var out []Line
	for _, ln := range l.store.lines {
		if msg == "" || ln.Msg == msg {
			out = append(out, ln)
		}
	}
	return out
}

func flatten(into map[string]string, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() != slog.KindGroup {
		into[prefix+a.Key] = v.String()
		return
	}
	if a.Key != "" {
		prefix += a.Key + "."
	}
	for _, g := range v.Group() {
		flatten(into, prefix, g)
	}
}

// Texts returns the lines' texts, one a line, for a failing test's message.
func Texts(lines []Line) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.Text + "\n")
	}
	return b.String()
}
