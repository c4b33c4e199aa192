package rocketmq

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
)

// NewPanicHandler returns a function for rocketmq-client-go's process-wide panic hook,
// primitive.PanicHandler. It logs a panic in one of the client's goroutines to l at error level
// (the panic value and the goroutine's stack), and the goroutine ends instead of the process.
//
// v2.1.2 starts most of its goroutines through primitive.WithRecover — the reader of each
// connection, response callbacks, requests from the broker (check-backs), heartbeats, route and
// offset updates, rebalances, consume goroutines — and WithRecover recovers only when
// primitive.PanicHandler is set. It is nil by default, so a panic there ends the process: a
// rogue name server or broker that answers with a negative frame length makes the connection
// reader panic in make (internal/remote/remote_client.go, receiveResponse).
//
// The hook is one process-wide variable, so setting it is a program's decision, like the client's
// logger ([NewRlogAdapter]): this package never sets it on its own. [SetClientLogger] sets both
// from main; to set this one alone, once in main, before creating any Publisher, Consumer or
// TxProducer (the client reads it without synchronization):
//
//	primitive.PanicHandler = rocketmq.NewPanicHandler(log.With("component", "rocketmq-client"))
//
// A recovered goroutine has stopped doing its work: a connection whose reader panicked is no
// longer read, so requests over it time out until the peer closes it. Treat the logged line as an
// alarm. The hook does not cover goroutines the client starts without WithRecover — in v2.1.2 the
// push consumer's pull loop (consumer/push_consumer.go, Start), which decodes and inflates pulled
// messages — so a malformed pull response can still end the process: see the package doc on
// trusting the broker network. The returned function is safe for concurrent use.
func NewPanicHandler(l *slog.Logger) func(any) {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return func(p any) {
		l.LogAttrs(context.Background(), slog.LevelError, "rocketmq: panic in a client goroutine recovered; that goroutine has stopped",
			slog.String("panic", fmt.Sprint(p)), slog.String("stack", string(debug.Stack())))
	}
}
