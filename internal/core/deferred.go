package core

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Deferred finish: with [WithDeferredFinish], a starter's clean finish — the write that marks a
// transaction done once its last phase succeeded — is made by a goroutine of its own while the
// starter returns. Nothing waits for that write: the participants' work is done, and until the
// write lands the transaction only looks unfinished. If it is lost (the process dies, PostgreSQL
// refuses), the leader finds the transaction in its last phase once the starter's lease has passed
// and drives that phase again, which the participants' barrier makes a no-op. With
// [WithGroupCommit] the background finishes of concurrent transactions share batches.
//
// A deferred finish does not send itself at once: it waits, up to finishHold, for the log's next
// write (any starter's, of any transaction) and rides in that write's round trip and commit — one
// pipeline, one implicit transaction — so that under a steady stream of transactions, even one at a
// time, the finish costs no commit of its own. With nothing to ride on it sends itself after
// finishHold. Reads of the transaction in this process ([Log.Get], and the status a refused write
// looks up) first wait for its pending finish, sending it at once: a starter reads its own
// writes; other processes see the last running status until the write lands.

// WithDeferredFinish makes the log write a starter's clean finish ([Log.Record] without a token,
// to a final status, from a status that can end only there: confirming, cancelling,
// compensating, and two-phase commit's voting once every vote is yes) in the background: Record
// returns at once, and [Log.Flush] waits for the writes it deferred. A saga's success (running →
// succeeded) is its decision, written before Record returns.
func WithDeferredFinish() LogOption { return func(o *options) { o.deferFinish = true } }

// Defers reports whether a starter's clean finish from → next ([Log.Record] without a token,
// nothing failed) is deferred: Record then returns at once, so a caller need not overlap it with
// other work on a goroutine of its own.
func (l *Log) Defers(from, next Status) bool {
	return l.o.deferFinish && next.Final() && from.settled()
}

// finishHold bounds how long a deferred finish waits for another write to ride on.
const finishHold = 100 * time.Millisecond

// deferral is a deferred finish in flight: kick (buffered) makes it send itself at once, done is
// closed once it is written (or failed).
type deferral struct {
	kick chan struct{}
	done chan struct{}
}

// deferrals are a log's deferred finishes in flight, by gid.
type deferrals struct {
	mu sync.Mutex
	m  map[string]*deferral
}

func (d *deferrals) add(gid string) *deferral {
	x := &deferral{kick: make(chan struct{}, 1), done: make(chan struct{})}
	d.mu.Lock()
	if d.m == nil {
		d.m = map[string]*deferral{}
	}
	d.m[gid] = x
	d.mu.Unlock()
	return x
}

func (d *deferrals) remove(gid string, x *deferral) {
	d.mu.Lock()
	if d.m[gid] == x {
		delete(d.m, gid)
	}
	d.mu.Unlock()
	close(x.done)
}

// kickAll makes every deferred finish in flight send itself at once.
func (d *deferrals) kickAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, x := range d.m {
		select {
		case x.kick <- struct{}{}:
		default:
		}
	}
}

// settle waits until gid's deferred finish, if one is in flight, is written (sending it at once),
// or ctx ends.
func (l *Log) settle(ctx context.Context, gid string) error {
	l.df.mu.Lock()
	x := l.df.m[gid]
	l.df.mu.Unlock()
	if x == nil {
		return nil
	}
	select {
	case x.kick <- struct{}{}:
	default:
	}
	select {
	case <-x.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

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
	x := l.df.add(w.gid)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	wait := l.gw.park(wctx, w, x.kick) // queued now: the starter's next write carries it
	go func() {
		defer l.bg.done()
		defer l.df.remove(w.gid, x)
		defer cancel()
		// A batch it rides in runs detached from its other writers' ctx: an error is the batch's
		// own (refused: then it is sent again alone; lost: left to the leader, as alone).
		moved, err := wait()
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
	l.df.kickAll()
	if err := l.bg.wait(ctx); err != nil {
		return fmt.Errorf("core: flush %s: %w", l.name, err)
	}
	return nil
}
