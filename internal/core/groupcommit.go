package core

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Group commit: the starters' writes of concurrent transactions in one process — recording a
// transaction (CreateIn), a branch (AddBranch), a decision (Decide), a clean finish (Record
// without a token) and a workflow's step (PutStep, RecordStep, FinishStep: steps.go) — share
// PostgreSQL round trips and commits, as a database's group commit shares WAL flushes.
//
// A write that finds no flush of its log in flight is sent at once, alone, by its own goroutine,
// with the same statement as without group commit: a lone transaction waits for no partner. A
// write that arrives while a flush is in flight queues. When a flush ends, the writes queued
// meanwhile (up to maxGroup, one per gid) are handed to the first of them, which sends them as one
// batch: each write's own statement, pipelined in one implicit transaction — one round trip, one
// commit. A queued write never waits longer than the window: then it sends what
// is queued itself, beside the flush in flight. The writers take turns: a lone write is sent by
// its caller's goroutine; a batch by a goroutine of the log's own (counted like a deferred finish's,
// [Log.Flush] waits for it), so that the writer leading it returns when its own ctx ends — its
// outcome unknown, [ErrInDoubt] — while the batch goes on for the others. A batch is bounded by
// the latest of its writers' deadlines, and by the log's lease when one of them has none. A batch
// whose other writes are all deferred finishes (a lone transaction's write carrying the previous
// one's finish) has nobody else waiting: its caller's goroutine sends it, under its ctx, as a lone
// write — no hand-off; if that ctx ends first, the finishes are in doubt like the write, and left
// to the leader (deferred.go).
//
// Each write keeps its condition (the gid not taken, the status expected): each caller learns its
// own outcome from its own statement's count of rows. (A create sent by its own caller is a plain
// insert, whose unique violation tells the gid taken: see [Log.statement].)
// When PostgreSQL refuses a batch (one bad row fails the whole transaction, which rolls back),
// each of its writes is made again alone by its own caller, so that the others are unaffected.
// An error that may come after the commit (the session ended: a FATAL error such as 57P01 in a
// failover, a connection lost) is not a refusal: each writer gets an error wrapping [ErrInDoubt].
// Fenced writes (a leader's) and partial records are never grouped: they run as before.
//
// Deferred finishes ([WithDeferredFinish], deferred.go) queue as lazy writes: a lazy write starts
// no flush and has no goroutine waiting for it; every flush, a lone write's too, takes the lazy
// writes queued with it, and one timer per log sends a lazy write whose finishHold ran out (a kick
// — a read of its transaction, [Log.Flush] — sends it at once, from a goroutine per kick). With
// a window of 0 (group commit off, deferred finish on) a write never waits for another: it is sent
// at once, with the lazy writes queued.

// maxGroup bounds the writes of one batch.
const maxGroup = 128

// MaxGroupCommitWindow bounds a coordinator's group commit window (Config.GroupCommit): the
// longest a write may wait for a flush in flight before it sends itself.
const MaxGroupCommitWindow = time.Second

// WithGroupCommit makes the log group the writes of concurrent transactions (see [Log]): a write
// arriving while another is being flushed waits at most window for it to end, then it is flushed
// with the other writes that queued meanwhile. A write that finds nothing in flight is flushed at
// once. Zero (the default) disables it: every write is sent at once, with no other transaction's
// write but a deferred finish's ([WithDeferredFinish]). A negative window is refused with an error
// wrapping [ErrInvalidOption].
func WithGroupCommit(window time.Duration) LogOption {
	return func(o *options) { o.groupWindow = window }
}

// GroupCommitStats counts a log's group commit ([WithGroupCommit]) and the deferred finishes that
// rode on its flushes ([WithDeferredFinish]); all zero with neither.
type GroupCommitStats struct {
	Flushes   int64 // round trips made: batches and writes sent alone
	Writes    int64 // writes they carried
	Immediate int64 // flushes sent at once by a write that found no flush in flight
	Windowed  int64 // flushes sent by a write whose window (or a deferred finish's hold) ran out
	Fallbacks int64 // batches PostgreSQL refused, whose writes were then made one by one
	Queued    int   // writes waiting now
}

// GroupCommitStats returns the counts of the log's group commit.
func (l *Log) GroupCommitStats() GroupCommitStats {
	if l.gw == nil {
		return GroupCommitStats{}
	}
	l.gw.mu.Lock()
	defer l.gw.mu.Unlock()
	s := l.gw.stats
	s.Queued = len(l.gw.queue)
	return s
}

// writeKind is what a [write] records.
type writeKind uint8

const (
	writeCreate writeKind = iota // a transaction, with its branches if any (CreateIn)
	writeBranch                  // a branch while the transaction is in a status (AddBranch)
	writeDecide                  // a starter's decision (DecideWrote)
	writeFinish                  // a starter's clean finish (Record without a token)
	writeAddAll                  // several branches while the transaction is in a status (AddBranches)
	writeStep                    // a workflow's step record, its status change if any (steps.go)
)

// write is one of the log's conditional writes of one gid: it takes effect (ok) or finds its
// condition unmet (the gid is taken; the transaction is not in the status expected).
type write struct {
	kind writeKind
	gid  string
	// writeCreate (and writeAddAll: the branch arrays)
	txKind, status string
	timeout, due   float64 // seconds
	payload        []byte
	trace          string
	names          []string
	seqs           []int32
	targetKinds    []string
	refs           []string
	payloads       [][]byte
	callOpts       []*string // call_options, nil: NULL
	// writeBranch
	branch Branch
	// writeBranch, writeAddAll (from: the status required), writeDecide, writeFinish
	from, to string
	// writeFinish
	done       []string
	doneStatus string
	// writeStep: put_step's arguments but the last; async: its commit need not wait for the WAL
	// flush (RecordStep), which its statement then turns off for its transaction (put_step's $15)
	args  []any
	async bool
	argv  [13]any // statement's arguments, in the write's own array: no slice made per statement
}

// write makes w, through the group writer when the log has one.
func (l *Log) write(ctx context.Context, w *write) (bool, error) {
	if l.gw == nil {
		return l.writeOne(ctx, w)
	}
	return l.gw.do(ctx, w)
}

// writeOne makes w with a statement of its own. An error that may come after PostgreSQL committed
// it wraps [ErrInDoubt] (see [unknownOutcome]). A create whose gid is taken is not made (false).
func (l *Log) writeOne(ctx context.Context, w *write) (bool, error) {
	sql, args := l.statement(w, false)
	tag, err := l.pool.Exec(ctx, sql, args...)
	if err != nil {
		if w.kind == writeCreate && l.gidTaken(err) {
			return false, nil
		}
		return false, unknownOutcome(err)
	}
	return tag.RowsAffected() > 0, nil
}

// gidTaken reports whether err is a create's plain insert failing on a gid already in the log
// (unique_violation on the global table).
func (l *Log) gidTaken(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && pe.TableName == l.o.prefix+"global"
}

// unknownOutcome returns err, the error of a statement or transaction sent on its own, wrapped in
// [ErrInDoubt] when the write may have been committed all the same: the connection was lost, or
// the session ended (a FATAL error: 57P01 when a failover or an administrator terminates the
// backend), after the request was sent — the commit may have been made before the answer was
// lost. A refusal (an ERROR: nothing committed) and a failure before anything was sent
// (pgconn.SafeToRetry) are returned as they are. In a failover the caller learns "unknown", never
// "failed", and its retry finds what was written.
func unknownOutcome(err error) error {
	var pe *pgconn.PgError
	switch {
	case err == nil || pgconn.SafeToRetry(err):
		return err
	case errors.As(err, &pe):
		if !sessionEnded(pe) {
			return err
		}
	case !connectionLost(err):
		return err // not PostgreSQL's nor the connection's: a fence's refusal, say
	}
	return fmt.Errorf("%w: %w", ErrInDoubt, err)
}

// connectionLost reports whether err is the connection's: it broke (EOF, a network error) or ctx
// ended while the request was in flight (pgx then closes the connection).
func connectionLost(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// statement returns w's statement and its arguments. Each changes rows only when w's condition
// holds (the gid not taken, the status expected), and finds its rows by the primary key's gid, so
// its plan does not depend on the tables' statistics. A create on a gid taken fails (a plain
// insert: unique_violation) unless grouped, with other callers' writes in one batch, where it
// changes no row instead, so that the batch goes through for the others.
func (l *Log) statement(w *write, grouped bool) (string, []any) {
	a := &w.argv
	switch w.kind {
	case writeCreate:
		if len(w.names) == 0 {
			w.createHead(a[:7])
			if grouped {
				return l.q["create_grouped"], a[:7]
			}
			return l.q["create"], a[:7]
		}
		if n := len(w.names); n <= maxValuesRows {
			args := w.branchRows(7)
			w.createHead(args)
			if grouped {
				return l.createN[n][1], args
			}
			return l.createN[n][0], args
		}
		*a = [13]any{w.gid, w.txKind, w.status, w.timeout, w.due, w.payload,
			w.names, w.seqs, w.targetKinds, w.refs, w.payloads, w.trace, w.callOpts}
		if grouped {
			return l.q["create_with_branches_grouped"], a[:13]
		}
		return l.q["create_with_branches"], a[:13]
	case writeBranch:
		b := w.branch
		return l.q["add_branch"], []any{w.gid, b.Name, b.Seq, b.Target.Kind.String(), b.Target.Ref, b.Payload, w.from,
			encodeCallOptions(b.Target)}
	case writeAddAll:
		if n := len(w.names); n <= maxValuesRows {
			args := w.branchRows(2)
			args[0], args[1] = textArg{&w.gid}, textArg{&w.from}
			return l.addN[n], args
		}
		return l.q["add_branches"], []any{w.gid, w.names, w.seqs, w.targetKinds, w.refs, w.payloads, w.from, w.callOpts}
	case writeStep:
		return l.q["put_step"], append(w.args[:len(w.args):len(w.args)], w.async)
	}
	// writeDecide, writeFinish. A finish that marks no branch (a final status implying them,
	// Record) moves the status as a decision does: no transition leads to trying, the one status
	// finish treats apart.
	*a = [13]any{textArg{&w.gid}, textArg{&w.from}, textArg{&w.to}, l.leaseArg, w.done, textArg{&w.doneStatus}}
	if w.kind == writeDecide || len(w.done) == 0 {
		return l.q["decide"], a[:4]
	}
	return l.q["finish"], a[:6]
}

// createHead sets args[:7] to a create's parameters $1..$7 (sql/queries.sql "create_row"),
// pointing into w (args.go: no boxing).
func (w *write) createHead(args []any) {
	args[0], args[1], args[2] = textArg{&w.gid}, textArg{&w.txKind}, textArg{&w.status}
	args[3], args[4], args[5], args[6] = floatArg{&w.timeout}, floatArg{&w.due}, bytesArg{&w.payload}, textArg{&w.trace}
}

// branchRows returns head empty arguments (the caller's to set) followed by w's branches'
// parameters, six per branch: the arguments of a statement that lists them as VALUES rows
// (sql/queries.sql "branch_values"), pointing into w's arrays (args.go: no boxing).
func (w *write) branchRows(head int) []any {
	args := make([]any, head, head+6*len(w.names))
	for i := range w.names {
		args = append(args, textArg{&w.names[i]}, int4Arg{&w.seqs[i]}, textArg{&w.targetKinds[i]}, textArg{&w.refs[i]},
			bytesArg{&w.payloads[i]}, w.callOpts[i])
	}
	return args
}

// writeBatch makes ws (distinct gids) in one round trip and one PostgreSQL transaction: each
// write's own statement, in gid order so that concurrent batches lock rows in one order, sent
// together in one pipeline (one Sync: one implicit transaction). refused reports that err means
// nothing was written: PostgreSQL refused a statement, or the commit, and the transaction rolled
// back. Otherwise the outcome of an error is unknown: the connection failed, or the session ended
// (a FATAL error) after the statements ran, when the commit may have been made. Only a batch
// whose writes are all async commits without waiting for the WAL flush. grouped: the writes are
// several callers' (see [Log.statement]); otherwise one caller's with deferred finishes riding.
//
// One statement per write rather than one per kind of write over arrays: a join of unnest arrays
// with the log's tables is planned for ten rows of each array, and PostgreSQL's generic plan
// hashes them against a sequential scan of the whole table while its statistics are those of a
// small table — a new deployment's for minutes, read in full by every batch.
func (l *Log) writeBatch(ctx context.Context, ws []*write, grouped bool) (ok []bool, refused bool, err error) {
	order := make([]int, len(ws))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int { return strings.Compare(ws[i].gid, ws[j].gid) })
	// The batch's entries in one allocation, its list in another.
	qs := make([]pgx.QueuedQuery, len(ws))
	b := pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, len(ws))}
	async := !slices.ContainsFunc(ws, func(w *write) bool { return !w.async })
	for n, i := range order {
		w := ws[i]
		if w.async && !async { // the batch's commit is the others' too: it waits for the flush
			c := *w
			c.async, w = false, &c
		}
		qs[n].SQL, qs[n].Arguments = l.statement(w, grouped)
		b.QueuedQueries[n] = &qs[n]
	}
	res := l.pool.SendBatch(ctx, &b)
	ok = make([]bool, len(ws))
	var pe *pgconn.PgError
	for _, i := range order {
		tag, err := res.Exec()
		if err != nil {
			_ = res.Close()
			// Before the last statement's answer: the commit, at the Sync after it, was not made.
			return nil, errors.As(err, &pe), err
		}
		ok[i] = tag.RowsAffected() > 0
	}
	if err := res.Close(); err != nil {
		// Every statement ran: an ERROR is the commit's (rolled back); a FATAL one ends the
		// session, which may have committed first.
		return nil, errors.As(err, &pe) && !sessionEnded(pe), err
	}
	return ok, false, nil
}

// sessionEnded reports whether pe ended its session (FATAL, PANIC) rather than a statement.
func sessionEnded(pe *pgconn.PgError) bool {
	sev := pe.SeverityUnlocalized
	if sev == "" {
		sev = pe.Severity
	}
	return sev == "FATAL" || sev == "PANIC"
}

// groupWriter groups a log's writes (see the top of this file).
type groupWriter struct {
	l        *Log
	window   time.Duration
	mu       sync.Mutex
	queue    []*pending
	inflight int // flushes being made
	stats    GroupCommitStats
	// timers are the window timers of writes no longer waiting (wait), kept stopped for the next.
	timers sync.Pool
	// timer sends the lazy writes whose hold ran out (expire); armed for timerAt, zero: unarmed.
	timer   *time.Timer
	timerAt time.Time
}

type pendingState uint8

const (
	queued  pendingState = iota // in the queue
	batched                     // taken into a batch another writer flushes
	leading                     // flushing a batch (its own among them)
)

// pending is a write waiting for its outcome.
type pending struct {
	w     *write
	ctx   context.Context
	state pendingState // guarded by groupWriter.mu
	// ch hands it the batch it is to flush, then (or instead) its outcome: one at a time, buffered;
	// nil for a lazy write, and until it queued or handed off its batch.
	ch chan turn
	// A lazy write (a deferred finish) starts no flush and has no goroutine waiting: it is sent by
	// the next flush, or by the timer once due (finishHold after it was parked), or when kicked;
	// its deferral (deferred.go) is handed its outcome by the goroutine that delivers it.
	lazy bool
	due  time.Time
	df   *deferral
}

// turn is what a waiting writer is handed: a batch to flush (its turn), or else its outcome.
type turn struct {
	batch []*pending
	r     result
}

type result struct {
	ok   bool
	err  error
	solo bool // the batch was refused: make the write alone
}

// do makes w with the writes of other goroutines, and returns its own outcome.
func (g *groupWriter) do(ctx context.Context, w *write) (bool, error) {
	p := &pending{w: w, ctx: ctx} // its channel made when it queues (or, leading, hands off)
	var r result
	g.mu.Lock()
	if g.inflight == 0 || g.window == 0 {
		g.inflight++
		g.stats.Immediate++
		batch := g.takeLocked(p) // p, and the lazy writes queued: nothing else queues then
		g.mu.Unlock()
		r = g.lead(ctx, p, batch)
	} else {
		p.ch = make(chan turn, 1)
		g.queue = append(g.queue, p)
		g.mu.Unlock()
		r = g.wait(ctx, p)
	}
	if r.solo {
		return g.l.writeOne(ctx, w)
	}
	return r.ok, r.err
}

// park queues p, a lazy write, to ride on the next flush of the log, or to be sent by the timer
// after finishHold. It queues before it returns, so that the caller's next write carries it.
func (g *groupWriter) park(p *pending) {
	g.mu.Lock()
	p.due = time.Now().Add(finishHold) // under mu: the queue's lazy writes are in order of due
	g.queue = append(g.queue, p)
	g.armLocked()
	g.mu.Unlock()
}

// armLocked arms the timer for the first lazy write queued (the earliest due), unless it is armed.
func (g *groupWriter) armLocked() {
	if !g.timerAt.IsZero() {
		return
	}
	i := slices.IndexFunc(g.queue, func(q *pending) bool { return q.lazy })
	if i < 0 {
		return
	}
	g.timerAt = g.queue[i].due
	if g.timer == nil {
		g.timer = time.AfterFunc(time.Until(g.timerAt), g.expire)
	} else {
		g.timer.Reset(time.Until(g.timerAt))
	}
}

// expire, the timer's function, sends the lazy writes whose hold ran out.
func (g *groupWriter) expire() {
	g.mu.Lock()
	g.timerAt = time.Time{}
	g.mu.Unlock()
	now := time.Now()
	g.release(func(q *pending) bool { return !q.due.After(now) })
}

// kick sends the queued lazy writes pick selects at once, from a goroutine of its own (one per
// kick, none when pick selects nothing).
func (g *groupWriter) kick(pick func(*pending) bool) {
	g.mu.Lock()
	found := slices.ContainsFunc(g.queue, func(q *pending) bool { return q.lazy && pick(q) })
	g.mu.Unlock()
	if found {
		go g.release(pick)
	}
}

// release sends the queued lazy writes pick selects, each with the writes queued with it (as a
// write whose window ran out does), beside any flush in flight, on the calling goroutine; then it
// arms the timer for the lazy writes left.
func (g *groupWriter) release(pick func(*pending) bool) {
	for {
		g.mu.Lock()
		i := slices.IndexFunc(g.queue, func(q *pending) bool { return q.lazy && pick(q) })
		if i < 0 {
			g.armLocked()
			g.mu.Unlock()
			return
		}
		p := g.queue[i]
		batch := g.takeLocked(p)
		g.inflight++
		g.stats.Windowed++
		g.mu.Unlock()
		// Detached: the batch goes on, bounded by the latest of its writers' deadlines.
		g.deliver(nil, batch, g.flush(p.ctx, batch, false))
	}
}

// wait waits for p's outcome, or for its turn to flush: when a flush hands it the queue, or when
// its window runs out. When ctx ends first, p leaves the queue (nothing written) or, already
// taken into a batch, returns an error wrapping [ErrInDoubt] and ctx's error.
func (g *groupWriter) wait(ctx context.Context, p *pending) result {
	timer, _ := g.timers.Get().(*time.Timer)
	if timer == nil {
		timer = time.NewTimer(g.window)
	} else {
		timer.Reset(g.window)
	}
	defer func() {
		timer.Stop() // no value is received from it after Stop (Go 1.23 timers): the next may Reset it
		g.timers.Put(timer)
	}()
	expired := timer.C
	for {
		select {
		case t := <-p.ch:
			if t.batch == nil {
				return t.r
			}
			return g.lead(ctx, p, t.batch)
		case <-expired:
			expired = nil
			if batch := g.takeOwn(p); batch != nil {
				return g.lead(ctx, p, batch)
			}
		case <-ctx.Done():
			g.mu.Lock()
			st := p.state
			if st == queued {
				g.queue = slices.DeleteFunc(g.queue, func(q *pending) bool { return q == p })
			}
			g.mu.Unlock()
			switch st {
			case queued: // left the queue: never written
				return result{err: ctx.Err()}
			case batched:
				return result{err: inDoubt(ctx.Err())}
			}
			return g.lead(ctx, p, (<-p.ch).batch) // handed the queue: flush it for the others
		}
	}
}

// takeOwn takes p, still queued, and the writes queued with it into a batch p flushes beside any
// flush in flight; nil when p is no longer queued (taken into a batch, or handed one).
func (g *groupWriter) takeOwn(p *pending) []*pending {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p.state != queued {
		return nil
	}
	batch := g.takeLocked(p)
	g.inflight++
	g.stats.Windowed++
	return batch
}

// takeLocked takes first and up to maxGroup-1 other queued writes, of distinct gids, out of the
// queue; first is to flush them.
func (g *groupWriter) takeLocked(first *pending) []*pending {
	batch := make([]*pending, 1, min(len(g.queue)+1, maxGroup))
	batch[0] = first
	first.state = leading
	seen := map[string]bool{first.w.gid: true}
	rest := g.queue[:0]
	for _, q := range g.queue {
		switch {
		case q == first:
		case len(batch) < maxGroup && !seen[q.w.gid]:
			seen[q.w.gid] = true
			q.state = batched
			batch = append(batch, q)
		default:
			rest = append(rest, q)
		}
	}
	clear(g.queue[len(rest):])
	g.queue = rest
	return batch
}

// lead flushes batch (p's write among them), hands the queue to its next writer, delivers the
// others' outcomes and returns p's. A lone write is made by p's goroutine with p's ctx, and so is
// a batch whose other writes are all lazy; any other batch by a goroutine of the log's own, which
// p leaves when ctx ends (its outcome then unknown, unless ctx had ended before: a write whose ctx
// has ended is left out of the batch).
func (g *groupWriter) lead(ctx context.Context, p *pending, batch []*pending) result {
	gone := ctx.Err()
	if len(batch) == 1 {
		return g.deliver(p, batch, g.flush(ctx, batch, true))
	}
	if gone == nil && !slices.ContainsFunc(batch, func(q *pending) bool { return q != p && !q.lazy }) {
		// The others are deferred finishes: no caller waits for them (see the top of this file).
		return g.deliver(p, batch, g.flush(ctx, batch, true))
	}
	if p.ch == nil { // p led at once, never queued
		p.ch = make(chan turn, 1)
	}
	g.l.bg.add()
	go func() {
		defer g.l.bg.done()
		g.deliver(nil, batch, g.flush(ctx, batch, false))
	}()
	if gone != nil {
		return result{err: gone}
	}
	select {
	case t := <-p.ch:
		return t.r
	case <-ctx.Done():
		return result{err: inDoubt(ctx.Err())}
	}
}

// deliver hands the queue to its next writer and the outcomes rs to batch's writers, and returns
// p's (p nil: every outcome is delivered).
func (g *groupWriter) deliver(p *pending, batch []*pending, rs []result) result {
	g.mu.Lock()
	// The next writer to flush is the first queued that is not lazy: lazy writes wait for one.
	if i := slices.IndexFunc(g.queue, func(q *pending) bool { return !q.lazy }); i < 0 {
		g.inflight--
	} else {
		next := g.queue[i]
		next.ch <- turn{batch: g.takeLocked(next)}
	}
	g.mu.Unlock()
	var own result
	for i, q := range batch {
		switch {
		case q == p:
			own = rs[i]
		case q.lazy:
			q.df.settle(rs[i])
		default:
			q.ch <- turn{r: rs[i]}
		}
	}
	return own
}

// inDoubt is the error of a write whose outcome is unknown.
func inDoubt(err error) error { return fmt.Errorf("group commit: %w: %w", ErrInDoubt, err) }

// flush makes the writes of batch whose callers still wait: one alone with its caller's ctx,
// several in one batch with ctx's values, bounded by the latest of their deadlines — by the lease
// from now when one of them has none, so that a batch lost in a network partition ends — and, when
// attached, by ctx's end too.
func (g *groupWriter) flush(ctx context.Context, batch []*pending, attached bool) []result {
	rs := make([]result, len(batch))
	var live []int
	var deadline time.Time
	unbounded := false
	for i, q := range batch {
		if err := q.ctx.Err(); err != nil {
			rs[i] = result{err: err}
			continue
		}
		live = append(live, i)
		if d, ok := q.ctx.Deadline(); !ok {
			unbounded = true
		} else if d.After(deadline) {
			deadline = d
		}
	}
	if len(live) == 0 {
		return rs
	}
	g.mu.Lock()
	g.stats.Flushes++
	g.stats.Writes += int64(len(live))
	g.mu.Unlock()
	if len(live) == 1 {
		q := batch[live[0]]
		ok, err := g.l.writeOne(q.ctx, q.w)
		rs[live[0]] = result{ok: ok, err: err}
		return rs
	}
	if bound := time.Now().Add(g.l.o.lease); unbounded && bound.After(deadline) {
		deadline = bound
	}
	parent := ctx
	if !attached {
		parent = context.WithoutCancel(ctx)
	}
	fctx, cancel := context.WithDeadline(parent, deadline)
	defer cancel()
	ws := make([]*write, len(live))
	callers := 0 // writes whose caller waits: the others are deferred finishes riding
	for j, i := range live {
		ws[j] = batch[i].w
		if !batch[i].lazy {
			callers++
		}
	}
	oks, refused, err := g.l.writeBatch(fctx, ws, callers > 1)
	if refused {
		g.mu.Lock()
		g.stats.Fallbacks++
		g.mu.Unlock()
	}
	for j, i := range live {
		switch {
		case err == nil:
			rs[i] = result{ok: oks[j]}
		case refused:
			rs[i] = result{solo: true}
		default:
			rs[i] = result{err: fmt.Errorf("group commit of %d writes: %w: %w", len(ws), ErrInDoubt, err)}
		}
	}
	return rs
}
