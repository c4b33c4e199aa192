package rocketmq

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/txkit/txkit/internal/obs"
)

// NewPanicHandler returns a function for rocketmq-client-go's process-wide panic hook,
// primitive.PanicHandler: it logs a panic in one of the client's goroutines to l at error level,
// with the stack, and that goroutine ends instead of the process. Set it once in main, before
// creating any client (the client reads it without synchronization), or use [SetClientLogger],
// which sets it and the logger. A recovered goroutine has stopped working: treat the line as an
// alarm. Which goroutines it covers (not the pull loop): docs/outbox.md. It is safe for
// concurrent use.
func NewPanicHandler(l *slog.Logger) func(any) {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	l = obs.Logger(l)
	return func(p any) {
		l.LogAttrs(context.Background(), slog.LevelError, "rocketmq: panic in a client goroutine recovered; that goroutine has stopped",
			slog.String("panic", fmt.Sprint(p)), slog.String("stack", string(debug.Stack())))
	}
}
