package obs

import (
	"context"
	"log/slog"
	"strings"
)

// KeyPrefix begins the key of every attribute a txkit component logs (txkit.gid, txkit.id,
// txkit.err), so that its keys never collide with the application's own: an "id" the application
// put on the logger it gives txkit (logger.With("id", requestID)) stays the application's, next
// to txkit's txkit.id. docs/tracing.md ("Log keys") lists them.
const KeyPrefix = "txkit."

// Logger returns l with the keys of the attributes txkit adds to it prefixed with [KeyPrefix]: the
// attributes of each log call, and those added with With. The attributes l carries already (the
// application's) and those its handler adds while handling a record (tracelog's trace_id and
// span_id) keep their keys. Every WithLogger option of the module passes its logger through
// Logger; a logger Logger returned is returned as it is, so that components handing their logger
// on prefix once. A nil l returns nil.
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return nil
	}
	if _, ok := l.Handler().(*keyHandler); ok {
		return l
	}
	return slog.New(&keyHandler{h: l.Handler()})
}

// keyHandler prefixes the keys of the attributes it is given with KeyPrefix, until a WithGroup
// (the group's name is prefixed, the keys inside it are not).
type keyHandler struct {
	h       slog.Handler
	grouped bool
}

func (k *keyHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return k.h.Enabled(ctx, level)
}

func (k *keyHandler) Handle(ctx context.Context, r slog.Record) error {
	if k.grouped || r.NumAttrs() == 0 {
		return k.h.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(prefixed(a))
		return true
	})
	return k.h.Handle(ctx, out)
}

func (k *keyHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if k.grouped {
		return &keyHandler{h: k.h.WithAttrs(attrs), grouped: true}
	}
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = prefixed(a)
	}
	return &keyHandler{h: k.h.WithAttrs(out)}
}

func (k *keyHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return k
	}
	if !k.grouped {
		name = KeyPrefix + name
	}
	return &keyHandler{h: k.h.WithGroup(name), grouped: true}
}

// prefixed returns a with its key prefixed; an inlined group (empty key) has its members' keys
// prefixed instead.
func prefixed(a slog.Attr) slog.Attr {
	if a.Key == "" {
		if v := a.Value.Resolve(); v.Kind() == slog.KindGroup {
			g := v.Group()
			out := make([]slog.Attr, len(g))
			for i, m := range g {
				out[i] = prefixed(m)
			}
			return slog.Attr{Value: slog.GroupValue(out...)}
		}
		return a
	}
	if !strings.HasPrefix(a.Key, KeyPrefix) {
		a.Key = KeyPrefix + a.Key
	}
	return a
}
