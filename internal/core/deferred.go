package core

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Deferred finish: with [WithDeferredFinish], a starter's clean finish — the write that marks a
// transaction done once its last phase succeeded — is made in the background while the starter
// returns: it waits in the group writer's queue, with no goroutine of its own (groupcommit.go).
// Nothing waits for that write: the participants' work is done, and until the write lands the
// transaction only looks unfinished. If it is lost (the process dies, PostgreSQL
// refuses), the leader finds the transaction in its last phase once the starter's lease has passed
// and drives that phase again, which the participants' barrier makes a no-op. With
// [WithGroupCommit] the background finishes of concurrent transactions share batches.
//
// A deferred finish does not send itself at once: it waits, up to finishHold, for the log's next
// write (any starter's, of any transaction) and rides in that write's round trip and commit — one
// pipeline, one implicit transaction — so that under a steady stream of transactions, even one at a
// time, the finish costs no commit of its own. With nothing to ride on the group writer's timer
// sends it after finishHold. Reads of the transaction in this process ([Log.Get], and the status
// a refused write looks up) first wait for its pending finish, sending it at once: a starter reads
// its own writes; other processes see the last running status until the write lands.

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

// deferral is a deferred finish in flight: p is its lazy write in the group writer's queue, done
// is closed once it is written (or failed). One allocation holds the write's wait and its outcome's
// handling (settle), so that a deferred finish costs no closures.
type deferral struct {
	p      pending
	done   chan struct{}
	l      *Log
	next   Status
	cancel context.CancelFunc // p.ctx's
}

// deferrals are a log's deferred finishes in flight, by gid.
type deferrals struct {
	mu sync.Mutex
	m  map[string]*deferral
}

func (d *deferrals) add(gid string, x *deferral) {
	d.mu.Lock()
	if d.m == nil {
		d.m = map[string]*deferral{}
	}
	d.m[gid] = x
	d.mu.Unlock()
}

func (d *deferrals) remove(gid string, x *deferral) {
	d.mu.Lock()
	if d.m[gid] == x {
		delete(d.m, gid)
	}
	d.mu.Unlock()
	close(x.done)
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
	l.gw.kick(func(q *pending) bool { return q == &x.p })
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
	idle chan struct{} // closed when n falls to 0; made by the first wait while n > 0, else nil
}

func (b *background) add() {
	b.mu.Lock()
	b.n++
	b.mu.Unlock()
}

func (b *background) done() {
	b.mu.Lock()
	b.n--
	if b.n == 0 && b.idle != nil {
		close(b.idle)
		b.idle = nil
	}
	b.mu.Unlock()
}

// wait returns once no write is in flight, or ctx's error.
func (b *background) wait(ctx context.Context) error {
	b.mu.Lock()
	if b.n == 0 {
		b.mu.Unlock()
		return nil
	}
	if b.idle == nil {
		b.idle = make(chan struct{})
	}
	idle := b.idle
	b.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// deferFinish parks w, a starter's clean finish to next, in the group writer's queue: it rides
// on the log's next write or is sent by the writer's timer after finishHold (no goroutine of its
// own), bounded by CleanupTimeout and detached from ctx's cancellation (ctx's values, its span
// among them, stay). Its outcome is handled by whichever goroutine delivers it.
func (l *Log) deferFinish(ctx context.Context, w *write, next Status) {
	l.bg.add()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	x := &deferral{done: make(chan struct{}), l: l, next: next, cancel: cancel}
	x.p = pending{w: w, ctx: wctx, lazy: true, df: x}
	l.df.add(w.gid, x)
	l.gw.park(&x.p) // queued now: the starter's next write carries it
}

// settle handles the outcome r of x's write, delivered by whichever goroutine sent it. A batch it
// rides in runs detached from its other writers' ctx: an error is the batch's own (refused: then
// it is sent again alone, on a goroutine of its own — the rare path; lost: left to the leader, as
// alone).
func (x *deferral) settle(r result) {
	if r.solo {
		go func() { x.end(x.l.writeOne(x.p.ctx, x.p.w)) }()
		return
	}
	x.end(r.ok, r.err)
}

// end records the outcome of x's write and retires x.
func (x *deferral) end(moved bool, err error) {
	l, w, ctx := x.l, x.p.w, x.p.ctx
	switch {
	case err != nil:
		l.lg.WarnContext(ctx, "core: deferred finish failed; the leader finishes the transaction once its lease has passed",
			slog.String("gid", w.gid), slog.String("status", x.next.String()), slog.Any("err", err))
	case moved:
		l.m.finished(x.next)
	default:
		// Someone else (the leader, after the lease) moved it first: it is theirs to finish.
		l.lg.DebugContext(ctx, "core: deferred finish found the transaction moved on", slog.String("gid", w.gid))
	}
	x.cancel()
	l.df.remove(w.gid, x)
	l.bg.done()
}

// Flush waits until the finishes deferred so far ([WithDeferredFinish]) are written, or returns
// an error wrapping ctx's error. Without the option it returns nil at once.
func (l *Log) Flush(ctx context.Context) error {
	if l.gw != nil {
		cut := time.Now().Add(finishHold) // the finishes parked so far
		l.gw.kick(func(q *pending) bool { return !q.due.After(cut) })
	}
	if err := l.bg.wait(ctx); err != nil {
		return fmt.Errorf("core: flush %s: %w", l.name, err)
	}
	return nil
}
