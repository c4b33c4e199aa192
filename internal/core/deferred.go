package core

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// Deferred finish: with [WithDeferredFinish], a starter's clean finish — the write that marks a
// transaction done once its last phase succeeded — is made by a goroutine of its own while the
// starter returns. Nothing waits for that write: the participants' work is done, and until the
// write lands the transaction only looks unfinished. If it is lost (the process dies, PostgreSQL
// refuses), the leader finds the transaction in its last phase once the starter's lease has passed
// and drives that phase again, which the participants' barrier makes a no-op. With
// [WithGroupCommit] the background finishes of concurrent transactions share batches.

// WithDeferredFinish makes the log write a starter's clean finish ([Log.Record] without a token,
// to a final status) in the background: Record returns at once, and [Log.Flush] waits for the
// writes it deferred.
func WithDeferredFinish() LogOption { return func(o *options) { o.deferFinish = true } }

// background counts the writes in flight in goroutines of their own.
type background struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n falls to 0; nil while nothing ran yet
}

func (b *background) add() {
	b.mu.Lock()
	if b.n == 0 {
		b.idle = make(chan struct{})
	}
	b.n++
	b.mu.Unlock()
}

func (b *background) done() {
	b.mu.Lock()
	b.n--
	if b.n == 0 {
		close(b.idle)
	}
	b.mu.Unlock()
}

// wait returns once no write is in flight, or ctx's error.
func (b *background) wait(ctx context.Context) error {
	b.mu.Lock()
	n, idle := b.n, b.idle
	b.mu.Unlock()
	if n == 0 {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// deferFinish makes w, a starter's clean finish to next, in a goroutine of its own, bounded by
// CleanupTimeout and detached from ctx's cancellation (ctx's values, its span among them, stay).
func (l *Log) deferFinish(ctx context.Context, w *write, next Status) {
	l.bg.add()
	go func() {
		defer l.bg.done()
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
		defer cancel()
		moved, err := l.write(wctx, w)
		switch {
		case err != nil:
			l.lg.WarnContext(wctx, "core: deferred finish failed; the leader finishes the transaction once its lease has passed",
				slog.String("gid", w.gid), slog.String("status", next.String()), slog.Any("err", err))
		case moved:
			l.m.finished(next)
		default:
			// Someone else (the leader, after the lease) moved it first: it is theirs to finish.
			l.lg.DebugContext(wctx, "core: deferred finish found the transaction moved on", slog.String("gid", w.gid))
		}
	}()
}

// Flush waits until the finishes deferred so far ([WithDeferredFinish]) are written, or returns
// an error wrapping ctx's error. Without the option it returns nil at once.
func (l *Log) Flush(ctx context.Context) error {
	if err := l.bg.wait(ctx); err != nil {
		return fmt.Errorf("core: flush %s: %w", l.name, err)
	}
	return nil
}
