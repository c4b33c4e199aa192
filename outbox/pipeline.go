package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/lock"
)

// pipeline is one drain of one partition in one leadership term; it keeps publishes in flight
// across batches (docs/outbox.md, "The pipelined relay"). Three kinds of goroutine share it: the
// fetcher (the drain's own goroutine) reads due rows it does not hold yet whenever a batch fits
// under the in-flight bound and hands each to its key; one sender per key publishes the key's rows
// in id order, each after the previous one's acknowledgement, and stops the key at a failure; the
// recorder writes the results as they come, in fenced transactions. A row leaves the held set only
// once its result is committed, so no row is read twice in one drain and a key's later rows are
// never read before the failure that must hold them back is visible.
//
// The drain ends when a read comes back short and every held row is recorded or released, when
// the term yields (nothing more is read; held rows are recorded first), or at the first error: the
// rows not recorded stay pending, and are published again with the same IDs.
type pipeline struct {
	r    *Relay
	part int
	log  *slog.Logger
	out  *outage
	in   *inbox // the rows Outbox.Do hands over

	mu    sync.Mutex
	held  map[int64]struct{}   // rows read and not yet recorded or released
	keys  map[string]*keyQueue // keys with rows queued, publishing, or stopped by a failure
	done  []result             // finished publishes, not yet recorded
	reset bool                 // rows were made due at once: read from the start again
	// released holds the keys whose failure the recorder released while a read was under way
	// (nil when none is): that read's snapshot may predate the failure's commit, so it may return
	// the key's later rows, which the failure must hold back.
	released map[string]struct{}
	results  chan struct{} // wakes the recorder (buffered 1)
	freed    chan struct{} // wakes the fetcher when held rows were recorded (buffered 1)
	sem      chan struct{} // concurrency: senders publishing at once
	// publishing counts the publishes under way (started, result not yet handed to the recorder).
	publishing atomic.Int64

	sent, failed, dead, batches int
}

// keyQueue is one key's state in a pipeline.
type keyQueue struct {
	queue   []row   // rows to publish after the one publishing now, in id order
	active  bool    // a sender works on the key
	stopped bool    // a publish failed and its failure is not recorded yet
	dropped []int64 // rows of the key held back while stopped
}

// result is a finished publish: err nil (acknowledged) or the publish error.
type result struct {
	x   row
	err error
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// maxInFlight returns the in-flight bound: the test seam MaxInFlightForTest, or by default twice the batch size
// plus twice the concurrency.
func (o relayOptions) maxInFlight() int {
	if o.inFlight > 0 {
		return o.inFlight
	}
	return 2*o.batch + 2*o.concurrency
}

// drainPipelined runs one drain of partition part (see [pipeline]).
// It reads the table first when read is set; else it starts with the rows in the partition's
// inbox, and reads only when one of them needs it.
func (r *Relay) drainPipelined(ctx context.Context, t *leader.Term, part int, out *outage, log *slog.Logger, read bool) error {
	p := &pipeline{r: r, part: part, log: log, out: out, in: r.inboxes[part],
		held: map[int64]struct{}{}, keys: map[string]*keyQueue{},
		results: make(chan struct{}, 1), freed: make(chan struct{}, 1), sem: make(chan struct{}, r.o.concurrency)}
	start := time.Now()
	defer func() { p.logDone(ctx, start) }()
	g, gctx := errgroup.WithContext(ctx)
	stop := make(chan struct{})
	g.Go(func() error { return p.recordLoop(gctx, t, stop) })
	err := p.fetchLoop(gctx, g, t, read)
	close(stop)
	if werr := g.Wait(); werr != nil && (err == nil || errors.Is(err, context.Canceled)) {
		err = werr
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// logDone logs the drain at debug level, with the backlog when it is measured.
func (p *pipeline) logDone(ctx context.Context, start time.Time) {
	r := p.r
	debug := p.batches > 0 && p.log.Enabled(ctx, slog.LevelDebug)
	backlog := int64(-1)
	if ctx.Err() == nil && (debug || r.m.gauges) {
		backlog = r.measure(ctx)
	}
	if !debug {
		return
	}
	attrs := []slog.Attr{slog.Int("partition", p.part), slog.Int("batches", p.batches), slog.Int("sent", p.sent),
		slog.Int("failed", p.failed), slog.Int("dead", p.dead), slog.Duration("elapsed", time.Since(start))}
	if backlog >= 0 {
		attrs = append(attrs, slog.Int64("backlog", backlog))
	}
	p.log.LogAttrs(ctx, slog.LevelDebug, "outbox: drained", attrs...)
}

// fetchLoop reads and dispatches batches until a read comes back short and nothing is held
// (nil), or ctx ends (ctx's error).
func (p *pipeline) fetchLoop(ctx context.Context, g *errgroup.Group, t *leader.Term, read bool) error {
	r := p.r
	bound := r.o.maxInFlight()
	measured := time.Now()
	if !read {
		read = p.takeHanded(ctx, g, bound)
	}
	for {
		if t.Yielding() {
			return p.settle(ctx)
		}
		if read {
			more, err := p.readBatch(ctx, g, t, bound, &measured)
			if err != nil || more {
				if errors.Is(err, errYield) {
					return p.settle(ctx)
				}
				if err != nil {
					return err
				}
				continue
			}
		}
		read = true
		// Caught up: read again when woken (new rows, rows made due at once), publish what Do
		// hands over, end when every held row is recorded.
		for waiting := true; waiting; {
			p.mu.Lock()
			n, reset := len(p.held), p.reset
			p.mu.Unlock()
			if reset {
				break
			}
			if n == 0 {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.Yield():
				return p.settle(ctx)
			case <-t.Wake():
				waiting = false
			case <-p.in.wake:
				waiting = !p.takeHanded(ctx, g, bound)
			case <-p.freed:
			}
		}
	}
}

// errYield ends readBatch when the term yields while it waits for room.
var errYield = errors.New("outbox: the term yields")

// readBatch waits until a whole batch fits under the in-flight bound (or nothing is held), reads
// one and dispatches it; more reports whether more rows may be due.
func (p *pipeline) readBatch(ctx context.Context, g *errgroup.Group, t *leader.Term, bound int, measured *time.Time) (more bool, err error) {
	r := p.r
	for {
		p.mu.Lock()
		n := len(p.held)
		p.mu.Unlock()
		if n == 0 || n+r.o.batch <= bound {
			break
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-t.Yield():
			return false, errYield
		case <-p.freed:
		}
	}
	if r.m.gauges && time.Since(*measured) >= gaugeInterval {
		r.measure(ctx)
		*measured = time.Now()
	}
	p.mu.Lock()
	exclude := make([]int64, 0, len(p.held))
	for id := range p.held {
		exclude = append(exclude, id)
	}
	p.reset = false
	p.released = map[string]struct{}{}
	p.mu.Unlock()
	batch, more, err := r.fetch(ctx, p.part, exclude)
	p.mu.Lock()
	defer p.mu.Unlock()
	released := p.released
	p.released = nil
	if err != nil {
		return false, err
	}
	if len(released) > 0 {
		// Leave those keys' rows to the next read, which sees the failure (the due statement then
		// holds them back). A failure released from here on finds them dispatched: p.mu orders
		// the two.
		kept := batch[:0]
		for _, x := range batch {
			if _, ok := released[x.msg.Key]; !ok || x.msg.Key == "" {
				kept = append(kept, x)
			}
		}
		more = more || len(kept) < len(batch)
		batch = kept
	}
	if len(batch) > 0 {
		p.batches++
		r.stats.batches.Add(1)
		r.m.batchSize.Observe(float64(len(batch)))
		ids := make([]int64, len(batch))
		for i, x := range batch {
			ids[i] = x.id
		}
		p.in.hold(ids...) // a hand-over of these rows arriving later is not published again
		p.dispatchLocked(ctx, g, batch)
	}
	return more, nil
}

// takeHanded dispatches the rows Do handed over that may be published at once, within the
// in-flight bound, and reports whether the table must be read for the others.
func (p *pipeline) takeHanded(ctx context.Context, g *errgroup.Group, bound int) bool {
	p.mu.Lock()
	room := bound - len(p.held)
	p.mu.Unlock()
	rows, read := p.in.take(max(room, 0))
	if len(rows) > 0 {
		p.r.stats.handed.Add(int64(len(rows)))
		p.dispatch(ctx, g, rows)
	}
	return read
}

// settle reads nothing more and returns nil once every held row is recorded or released: the
// publishes in flight finish and the recorder writes them, so that the next leader of the
// partition does not publish them again. ctx's error if it ends first.
func (p *pipeline) settle(ctx context.Context) error {
	for {
		p.mu.Lock()
		n := len(p.held)
		p.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.freed:
		}
	}
}

// dispatch holds the batch's rows and queues each on its key, starting the key's sender.
func (p *pipeline) dispatch(ctx context.Context, g *errgroup.Group, batch []row) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dispatchLocked(ctx, g, batch)
}

func (p *pipeline) dispatchLocked(ctx context.Context, g *errgroup.Group, batch []row) {
	for _, x := range batch {
		p.held[x.id] = struct{}{}
		if x.msg.Key == "" { // a group of its own
			g.Go(func() error {
				p.send(ctx, "", x)
				return nil
			})
			continue
		}
		q := p.keys[x.msg.Key]
		if q == nil {
			q = &keyQueue{}
			p.keys[x.msg.Key] = q
		}
		if q.stopped {
			q.dropped = append(q.dropped, x.id)
			continue
		}
		q.queue = append(q.queue, x)
		if !q.active {
			q.active = true
			key := x.msg.Key
			g.Go(func() error {
				p.sendKey(ctx, key)
				return nil
			})
		}
	}
}

// sendKey publishes the key's queued rows one after the other until the queue is empty, a
// publish fails, or ctx ends.
func (p *pipeline) sendKey(ctx context.Context, key string) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-p.sem }()
	for {
		p.mu.Lock()
		q := p.keys[key]
		if len(q.queue) == 0 {
			q.active = false
			if !q.stopped {
				delete(p.keys, key)
			}
			p.mu.Unlock()
			return
		}
		x := q.queue[0]
		q.queue = q.queue[1:]
		p.mu.Unlock()
		if !p.publish(ctx, key, x) {
			return
		}
	}
}

// send publishes a row without a key.
func (p *pipeline) send(ctx context.Context, key string, x row) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-p.sem }()
	p.publish(ctx, key, x)
}

// publish publishes x and hands the result to the recorder; it reports whether the key may go
// on. A failure stops the key: its queued rows are dropped until the failure is recorded. When ctx
// ends nothing is handed over: the row stays pending.
func (p *pipeline) publish(ctx context.Context, key string, x row) bool {
	p.publishing.Add(1)
	err := p.r.publishOne(ctx, x, p.log)
	if ctx.Err() != nil {
		p.publishing.Add(-1)
		return false
	}
	p.mu.Lock()
	p.done = append(p.done, result{x: x, err: err})
	p.publishing.Add(-1) // with the result handed over, before the signal: linger sees both
	if err != nil && key != "" {
		q := p.keys[key]
		q.stopped, q.active = true, false
		for _, y := range q.queue {
			q.dropped = append(q.dropped, y.id)
		}
		q.queue = nil
	}
	p.mu.Unlock()
	signal(p.results)
	return err == nil
}

// recordLoop records finished publishes until stop is closed (the fetcher ended: nothing is
// left to record then, or the drain is abandoned) or ctx ends.
func (p *pipeline) recordLoop(ctx context.Context, t *leader.Term, stop <-chan struct{}) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-stop:
			return nil
		case <-p.results:
		}
		p.linger(ctx, stop)
		p.mu.Lock()
		res := p.done
		p.done = nil
		p.mu.Unlock()
		if len(res) == 0 {
			continue
		}
		batch := make([]row, len(res))
		errs := make([]error, len(res))
		for i, x := range res {
			batch[i], errs[i] = x.x, x.err
		}
		s, f, d, rescued, err := p.r.record(ctx, p.r.fenceResource(p.part), t.Token(), batch, errs, p.out, p.log)
		if err != nil {
			return err
		}
		p.sent, p.failed, p.dead = p.sent+s, p.failed+f, p.dead+d
		p.mu.Lock()
		for _, x := range res {
			delete(p.held, x.x.id)
			if x.err == nil || x.x.msg.Key == "" {
				continue
			}
			// The failure is visible now: the due statement holds the key's later rows back.
			q := p.keys[x.x.msg.Key]
			for _, id := range q.dropped {
				delete(p.held, id)
			}
			q.dropped, q.stopped = nil, false
			if p.released != nil {
				p.released[x.x.msg.Key] = struct{}{}
			}
			if !q.active && len(q.queue) == 0 {
				delete(p.keys, x.x.msg.Key)
			}
		}
		if rescued > 0 {
			p.reset = true
		}
		p.mu.Unlock()
		signal(p.freed)
	}
}

// linger lets the next record take in the publishes under way: it returns once none is (at once
// when none was: a lone publish is recorded without delay), after the relay's record linger, or
// when the drain ends. The record's commit does not wait for its flush (see writeResults), so
// without it a busy relay would write as many small records as its commits are short: more
// transactions, each with its fence check, for the same rows.
func (p *pipeline) linger(ctx context.Context, stop <-chan struct{}) {
	if p.publishing.Load() == 0 || p.r.o.recordLinger <= 0 {
		return
	}
	t := time.NewTimer(p.r.o.recordLinger)
	defer t.Stop()
	for p.publishing.Load() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-t.C:
			return
		case <-p.results: // one more finished; the recorder takes every result after this
		}
	}
}

// recordLinger bounds how long a record waits for the publishes under way (see linger): about
// what a record's commit took while it waited for its flush.
const recordLinger = 2 * time.Millisecond

// gaugeInterval is how often a drain that goes on counts the backlog for the gauges.
const gaugeInterval = 5 * time.Second

// publishOne calls the publisher with the publish timeout under the message's publish span,
// turning a panic into an error.
//
// A failed publish is logged here, under the publish span, so that the log line carries the trace
// of the request that enqueued the message; at most one line per topic per obs.LogInterval, with
// the count of those held back (an outage fails every publish).
func (r *Relay) publishOne(ctx context.Context, x row, log *slog.Logger) (err error) {
	pctx, cancel := context.WithTimeout(ctx, r.o.publishTimeout)
	defer cancel()
	pctx, span := r.startPublish(pctx, x)
	defer func() { obs.EndSpan(span, err) }() // after the recovery below: a panic is recorded too
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("publisher panicked: %v", p)
		}
		if err != nil {
			r.stats.failed.Add(1)
			r.m.failures.Inc()
			if ctx.Err() == nil {
				permanent := errors.Is(err, ErrInvalidMessage)
				lo, hi := backoffBounds(r.o.backoffBase, r.o.backoffCap, x.attempts+1)
				key := x.msg.Topic
				if permanent {
					key += "\x00permanent"
				}
				r.fails.Log(pctx, log, key, slog.LevelWarn, "outbox: publish failed", slog.String("msg_id", x.msg.ID.String()),
					slog.String("topic", x.msg.Topic), slog.Int("attempt", x.attempts+1), slog.Bool("permanent", permanent),
					slog.Duration("retry_after_min", lo), slog.Duration("retry_after_max", hi), slog.Any("err", err))
			}
		} else {
			r.stats.published.Add(1)
			r.m.published.Inc()
			r.m.commitToPublish.Observe(time.Since(x.created).Seconds())
		}
	}()
	return r.pub.Publish(pctx, x.msg)
}

// record deletes the sent rows and records the failed ones, in one transaction that passes the
// fence first. When the batch has an acknowledged publish after an outage (see [outage]), the same
// transaction makes the rows that failed during the outage due at once. It returns how many were
// sent, failed, made dead and made due again.
func (r *Relay) record(ctx context.Context, resource string, tok lock.Token, batch []row, errs []error, out *outage, log *slog.Logger) (sent, failed, dead, rescued int, err error) {
	res := sortResults(batch, errs)
	if len(res.sent) == 0 && len(res.failed) == 0 {
		return 0, 0, 0, 0, nil
	}
	rescue := out.rescue(batch, errs)
	rescued, deadIDs, err := r.writeResults(ctx, resource, tok, res, rescue)
	if err != nil {
		return 0, 0, 0, 0, fmt.Errorf("outbox: record batch of %s: %w", r.ob.name, err)
	}
	out.recorded(batch, errs)
	if rescued > 0 {
		r.stats.rescued.Add(int64(rescued))
		log.InfoContext(ctx, "outbox: publishing works again; the messages that failed meanwhile are due at once",
			slog.Int("messages", rescued))
	}
	r.logDead(ctx, batch, deadIDs, log)
	return len(res.sent), len(res.failed), len(deadIDs), rescued, nil
}

// logDead counts the messages of batch that record made dead and logs each in the trace of the
// request that enqueued it.
func (r *Relay) logDead(ctx context.Context, batch []row, deadIDs []uuid.UUID, log *slog.Logger) {
	if len(deadIDs) == 0 {
		return
	}
	r.stats.dead.Add(int64(len(deadIDs)))
	r.m.dead.Add(float64(len(deadIDs)))
	traces := make(map[uuid.UUID]string, len(batch))
	for _, x := range batch {
		traces[x.msg.ID] = x.trace
	}
	for _, id := range deadIDs { // logged in the trace of the request that enqueued it
		log.ErrorContext(obs.DecodeTrace(ctx, traces[id]), "outbox: message dead: too many failed publishes, or the publisher can never carry it", slog.String("msg_id", id.String()),
			slog.Int("max_attempts", r.o.maxAttempts))
	}
}

// backoffBounds returns the range of the delay the fail statement (sql/queries.sql) gives a
// message after its n-th failed publish: [d/2, d], d = min(cap, base·2^(n-1)). Once n-1 reaches
// 62 the exponent stops growing, as in the SQL. Attempts beyond MaxAttempts do not occur (the
// message is dead), but the bounds stay defined.
func backoffBounds(base, cap time.Duration, n int) (lo, hi time.Duration) {
	e := min(max(n-1, 0), 62)
	d := min(float64(cap), float64(base)*math.Pow(2, float64(e)))
	return time.Duration(d / 2), time.Duration(d)
}
