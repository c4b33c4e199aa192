package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/placement"
	"github.com/txkit/txkit/lock"
)

// recordLinger is how long the recorder waits for more results before it writes a batch that is
// not full: one transaction (and one WAL flush) for many results, also when deliveries are slow.
const recordLinger = 10 * time.Millisecond

// Delivery is the JSON body of a delivery, and what a receiver's apply function is given.
type Delivery struct {
	ID        uuid.UUID       `json:"id"`
	Receiver  string          `json:"receiver"`
	Key       string          `json:"key"`
	Payload   json.RawMessage `json:"payload"`
	CreatedAt time.Time       `json:"created_at"`
	// Nonce is new for every post, so that no two posts are the same signed request: the
	// signature covers the body and a timestamp in whole seconds, and an Inbox refuses a
	// signature it has seen as a replay. Without it, a notification posted again within the same
	// second — by a new leader after a dead one's post was applied, its answer lost — was refused
	// and counted a failed attempt. Receivers need not read it.
	Nonce string `json:"nonce,omitempty"`
}

// due is a notification taken for delivery: the delivery, and what its attempt's span needs.
type due struct {
	Delivery
	trace   string // the trace context Enqueue stored (obs.EncodeTrace); "" none
	attempt int    // this attempt's number: 1 + the attempts ever made (redeliveries go on counting)
}

// flight is the leader's view of one receiver: its queue of taken notifications, how many are
// taken and not yet recorded, and the circuit breaker.
type flight struct {
	queue     chan due
	held      int                // taken and not yet attempted (queued or in flight)
	taken     map[uuid.UUID]bool // taken and not yet recorded: not to be taken again
	failures  int                // consecutive failed deliveries
	openUntil time.Time          // the breaker holds deliveries back until then (zero: closed)
	probing   bool               // half open: the one delivery allowed through is in flight
	poke      func()             // wakes the dispatcher
	low       int                // held at which the queue is refilled
	dry       uint64             // 1 + the wake generation at which a take found no more due: 0 none
	shownOpen bool               // the circuit gauge counts this receiver's circuit as open
}

// waker wakes the dispatcher. A take that finds fewer due notifications than it asked for marks
// the receiver dry: the dispatcher takes for it again only after something may have made more
// due — a NOTIFY (enqueue, redeliver), the tick, a failed attempt recorded — so that a receiver
// whose due notifications are all taken costs no query per delivery.
type waker struct {
	ch  chan struct{}
	gen atomic.Uint64 // bumped by fresh, and by the dispatcher for each of the leader job's wake-ups
}

// poke wakes the dispatcher because there is room in a receiver's queue.
func (w *waker) poke() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// fresh wakes the dispatcher because more notifications may be due.
func (w *waker) fresh() {
	w.gen.Add(1)
	w.poke()
}

// result is one delivery's outcome.
type result struct {
	id       uuid.UUID
	receiver string
	skipped  time.Duration // not sent (the breaker held it back): due again after this long
	ok       bool
	code     int
	latency  time.Duration
	err      string
	span     trace.SpanContext // the attempt's span: its log lines carry its ids
}

// Run delivers, while this notifier leads the election of [WithElector], every pending
// notification whose attempt is due: woken by the cron tick ([WithTick]) and by NOTIFY from
// [Notifier.Enqueue], it takes due notifications of each receiver — no more than the receiver's
// free delivery slots, so a slow receiver only delays itself — posts them, and records each
// attempt (status code, latency, error) and the notification's new state in batches, fenced with
// the leadership's token so a deposed leader records nothing. Taking notifications writes
// nothing: the leader remembers what it took until the result is recorded, and if it dies
// mid-delivery they are still due, so the next leader sends them again, with the same id. It also
// deletes delivered notifications past the retention. It runs as a fenced leader job
// (internal/leader): it passes the fence on taking the lead, and pauses 1 s after being fenced out
// before it campaigns again.
//
// Run blocks until ctx ends, then returns nil after every goroutine it started has exited. It
// returns an error wrapping [ErrInvalidOption] without an elector, [ErrRunning] when another Run
// is running, one wrapping lock.ErrClosed when the elector's session is closed, and one naming
// Fence.Migrate when the fence table does not exist.
func (n *Notifier) Run(ctx context.Context) error {
	if n.job == nil {
		return fmt.Errorf("notify: run: no elector (WithElector or WithPartitions): %w", ErrInvalidOption)
	}
	if !n.running.CompareAndSwap(false, true) {
		return fmt.Errorf("notify: run: %w", ErrRunning)
	}
	defer n.running.Store(false)
	if err := n.checkPartitions(ctx); err != nil {
		return err
	}
	return n.job.Run(ctx)
}

// newJob returns the leader job that runs [Notifier.lead] — a leader.Shards with WithPartitions —
// or nil without an elector.
func (n *Notifier) newJob() (leaderJob, error) {
	if n.o.elector == nil && n.o.partElectors == nil {
		return nil, nil
	}
	opts := []leader.Option{leader.WithName("notify"), leader.WithLogger(n.o.log.With(slog.String("table", n.name))),
		leader.WithSchedule(n.o.tick), leader.WithChannel(n.channel),
		leader.WithCron("retention", n.o.retentionSpec, n.purge)}
	if n.o.reg != nil { // nobody reads the due gauge otherwise: spare the query
		opts = append(opts, leader.WithCron("due count", n.o.tick, n.countDue))
	}
	job, err := n.newLeader(opts)
	if err != nil {
		return nil, fmt.Errorf("notify: %w: %w", err, ErrInvalidOption)
	}
	return job, nil
}

// lead is the notifier's leader work: it delivers while leadership term t lasts (ctx ends with it).
// It returns nil when ctx ends, or an error wrapping lock.ErrFenced when the fence refuses a record.
//
// With partitions ([WithPartitions]) each partition's term delivers to the receivers of its
// partition only (placement.Partition of the receiver's name) and fences its writes with its own
// resource; the terms of the partitions one process leads run side by side. When the term yields
// (its partition is given up to balance the load) it takes nothing more, lets the posts in flight
// finish, records their results and returns nil: the queued notifications not yet posted stay
// due for the next leader, and none is posted twice.
func (n *Notifier) lead(ctx context.Context, t *leader.Term) error {
	fk, log := fenceKey{tok: t.Token(), resource: n.resource(t.Partition())}, t.Log()
	flights := map[string]*flight{}
	n.mu.Lock()
	for name := range n.receivers {
		if placement.Partition(name, n.o.parts) == t.Partition() {
			flights[name] = &flight{queue: make(chan due, n.o.batch), low: n.o.batch / 2, taken: map[uuid.UUID]bool{}}
		}
	}
	n.mu.Unlock()
	due := t.Partition() == 0 // partition 0's leader sets the due gauge (countDue, a cron job of its term)
	if due {
		n.metrics.term(true)
	}
	defer func() {
		if due {
			n.metrics.term(false)
		}
		n.mu.Lock() // the next term starts with every circuit closed
		for name, f := range flights {
			if f.shownOpen {
				f.shownOpen = false
				n.metrics.circuitClosed(name)
			}
		}
		n.mu.Unlock()
	}()

	w := &waker{ch: make(chan struct{}, 1)}
	for _, f := range flights {
		f.poke = w.poke
	}
	results := make(chan result, 1024)
	g, gctx := errgroup.WithContext(ctx)
	var deliveries sync.WaitGroup // every delivery goroutine; the recorder outlives them
	// The recorder writes results in batches.
	recorded := make(chan struct{})
	g.Go(func() error {
		defer close(recorded)
		return n.recorder(gctx, fk, flights, results, w.fresh, log)
	})
	// Each receiver has its own workers, as many as its concurrency, taking from its queue: a
	// slow receiver holds up only its own.
	for name, f := range flights {
		rcv := n.receivers[name]
		for range rcv.Concurrency {
			deliveries.Go(func() {
				for {
					select {
					case <-gctx.Done():
						return
					case <-t.Yield():
						return
					case d := <-f.queue:
						if t.Yielding() {
							return // taken, not posted: still due for the next leader
						}
						results <- n.attempt(gctx, rcv, f, d)
					}
				}
			})
		}
	}
	g.Go(func() error {
		defer func() {
			deliveries.Wait()
			close(results) // the recorder records what is left, then ends
			<-recorded
		}()
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-t.Yield():
				return nil // the deferred wait lets the posts in flight finish and be recorded
			case <-t.Wake(): // the tick, a NOTIFY, the start of the term: more may be due
				w.gen.Add(1)
			case <-w.ch:
			}
			if err := n.dispatch(gctx, w, flights); err != nil {
				if errors.Is(err, lock.ErrFenced) {
					return err
				}
				if gctx.Err() == nil { // once per interval with a count, while the database is away
					n.fails.Log(gctx, log, "take", slog.LevelWarn, "notify: taking due notifications failed; retrying at the next tick", slog.Any("err", err))
				}
			}
			n.fails.Flush()
		}
	})
	err := g.Wait()
	n.fails.FlushAll() // the failure lines held back, at the end of the term
	return err
}

// fenceKey is what a term's writes pass the fence with: its token and its partition's resource.
type fenceKey struct {
	tok      lock.Token
	resource string
}

// fenced runs fn in a transaction that first passes the fence with fk.
func (n *Notifier) fenced(ctx context.Context, fk fenceKey, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, n.pool, func(tx pgx.Tx) error {
		if err := n.fence.Check(ctx, tx, fk.resource, fk.tok); err != nil {
			return err
		}
		return fn(tx)
	})
}

// dispatch takes due notifications for every receiver whose queue is running low and whose
// breaker is not open, up to the batch size taken and unrecorded per receiver, and queues them
// for the receiver's workers, remembering them until their results are recorded so that it does
// not take them twice.
func (n *Notifier) dispatch(ctx context.Context, w *waker, flights map[string]*flight) error {
	names := make([]string, 0, len(flights))
	for name := range flights {
		names = append(names, name)
	}
	sort.Strings(names)
	now := time.Now()
	for _, name := range names {
		f := flights[name]
		gen := w.gen.Load() // before the query: a NOTIFY during it makes the receiver wet again
		n.mu.Lock()
		free := n.o.batch - f.held
		if f.held > f.low || (!f.openUntil.IsZero() && now.Before(f.openUntil)) || f.dry == gen+1 {
			free = 0 // enough queued, the breaker is open, or nothing more was due
		}
		n.mu.Unlock()
		if free <= 0 {
			continue
		}
		n.mu.Lock()
		skip := make([]pgtype.UUID, 0, len(f.taken)) // binary; a uuid.UUID is sent as text
		for id := range f.taken {
			skip = append(skip, pgtype.UUID{Bytes: id, Valid: true})
		}
		n.mu.Unlock()
		// Taking writes nothing: only the leader delivers, and it remembers what it has taken
		// until the result is recorded. When it dies, whatever it had taken is still due and the
		// next leader sends it again (same id; receivers apply once). A deposed leader that has
		// not noticed yet may send a duplicate the same way; its records are refused by the fence.
		// QueryExecModeExec: planned with this call's values, so PostgreSQL hashes the skip list
		// instead of comparing every row with each of its ids (a prepared statement's generic
		// plan does that).
		rows, err := n.pool.Query(ctx, `select id, receiver, key, payload, created_at, coalesce(trace_context, ''), tries + 1 from `+n.table+`
where status = 'pending' and receiver = $1 and next_attempt_at <= now() and id <> all($3::uuid[])
order by next_attempt_at limit $2`, pgx.QueryExecModeExec, name, free, skip)
		if err != nil {
			return fmt.Errorf("take due notifications of %s: %w", name, err)
		}
		batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (due, error) {
			var d due
			var p []byte
			err := r.Scan((*[16]byte)(&d.ID), &d.Receiver, &d.Key, &p, &d.CreatedAt, &d.trace, &d.attempt)
			d.Payload = p
			return d, err
		})
		if err != nil {
			return fmt.Errorf("take due notifications of %s: %w", name, err)
		}
		n.mu.Lock()
		f.held += len(batch)
		if len(batch) < free {
			f.dry = gen + 1
		}
		for _, d := range batch {
			f.taken[d.ID] = true
		}
		n.mu.Unlock()
		for _, d := range batch {
			f.queue <- d // room for batch held ones: never blocks
		}
	}
	return nil
}

// attempt delivers d unless the receiver's breaker holds it back: while the circuit is open
// nothing is sent; once the cool-down has passed one delivery goes through as a probe, and the
// others wait for its outcome.
func (n *Notifier) attempt(ctx context.Context, rcv Receiver, f *flight, d due) result {
	n.mu.Lock()
	now := time.Now()
	var wait time.Duration
	switch {
	case f.openUntil.IsZero():
	case now.Before(f.openUntil):
		wait = f.openUntil.Sub(now)
	case f.probing:
		wait = time.Second
	default:
		f.probing = true
	}
	n.mu.Unlock()
	if wait > 0 {
		n.metrics.attempts.WithLabelValues(attemptCircuitOpen).Inc()
		n.done(f)
		return result{id: d.ID, receiver: rcv.Name, skipped: wait}
	}
	r := n.deliver(ctx, rcv, d)
	n.trip(trace.ContextWithSpanContext(ctx, r.span), f, r)
	n.done(f)
	return r
}

// delivering reports whether any notification a term took (its flights) is still queued or being
// delivered: whether more results are coming.
func (n *Notifier) delivering(flights map[string]*flight) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, f := range flights {
		if f.held > 0 {
			return true
		}
	}
	return false
}

// forget makes a batch's notifications takeable again once their results are recorded (the record
// moved their due time or ended them), or could not be (then they are due again, as they should).
func (n *Notifier) forget(flights map[string]*flight, batch []result) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, r := range batch {
		delete(flights[r.receiver].taken, r.id)
	}
}

// done frees a place in the receiver's count of taken notifications, so the dispatcher takes
// more before the results are recorded (the recorder's backlog is bounded by the results
// channel, which blocks the workers when full).
func (n *Notifier) done(f *flight) {
	n.mu.Lock()
	f.held--
	refill := f.held == f.low
	n.mu.Unlock()
	if refill {
		f.poke()
	}
}

// trip updates the receiver's breaker with a delivery's outcome, at once, so the receiver's other
// workers see an opened circuit before they send anything more.
func (n *Notifier) trip(ctx context.Context, f *flight, r result) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if r.ok {
		f.failures, f.openUntil, f.probing = 0, time.Time{}, false
		if f.shownOpen {
			f.shownOpen = false
			n.metrics.circuitClosed(r.receiver)
		}
		return
	}
	f.failures++
	f.probing = false
	now := time.Now()
	if f.failures >= n.o.breakerFailures && (f.openUntil.IsZero() || !now.Before(f.openUntil)) {
		f.openUntil = now.Add(n.o.breakerCooldown)
		n.stats.breakerOpen.Add(1)
		if !f.shownOpen {
			f.shownOpen = true
			n.metrics.circuitOpened(r.receiver)
		}
		n.o.log.WarnContext(ctx, "notify: receiver keeps failing; holding its deliveries back", slog.String("receiver", r.receiver),
			slog.Int("failures", f.failures), slog.Duration("cooldown", n.o.breakerCooldown))
	}
}

// deliver posts d to rcv, signed, under a span "notify deliver" that continues the trace of the
// enqueuing request (a child of the stored context, linked to the span ctx carries, if any), and
// returns the outcome, counted in the metrics and set on the span.
func (n *Notifier) deliver(ctx context.Context, rcv Receiver, d due) result {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("txkit.notification", d.ID.String()), attribute.String("txkit.receiver", rcv.Name),
		attribute.Int("txkit.attempt", d.attempt))}
	if d.trace != "" && trace.SpanContextFromContext(ctx).IsValid() {
		opts = append(opts, trace.WithLinks(trace.LinkFromContext(ctx)))
	}
	ctx, span := n.tracer.Start(obs.DecodeTrace(ctx, d.trace), "notify deliver", opts...)
	defer span.End()
	res := n.post(ctx, rcv, d.Delivery)
	res.span = span.SpanContext()
	outcome := attemptOK
	switch {
	case res.ok:
	case res.code != 0:
		outcome = attemptRefused
	default:
		outcome = attemptError
	}
	n.metrics.attempts.WithLabelValues(outcome).Inc()
	span.SetAttributes(attribute.String("txkit.result", outcome))
	if res.code != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", res.code))
	}
	if !res.ok {
		span.RecordError(errors.New(res.err))
		span.SetStatus(codes.Error, res.err)
	}
	return res
}

// post posts d to rcv, signed, and returns the outcome; it observes the round trip's latency.
func (n *Notifier) post(ctx context.Context, rcv Receiver, d Delivery) result {
	res := result{id: d.ID, receiver: rcv.Name}
	d.Nonce = uuid.NewString()
	body, err := json.Marshal(d)
	if err != nil {
		res.err = err.Error()
		return res
	}
	cctx, cancel := context.WithTimeout(ctx, n.o.callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, rcv.URL, bytes.NewReader(body))
	if err != nil {
		res.err = err.Error()
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderID, d.ID.String())
	req.Header.Set(HeaderReceiver, rcv.Name)
	obs.Propagator().Inject(ctx, propagation.HeaderCarrier(req.Header)) // the attempt's span
	signRequest(req, rcv.Secrets[0], time.Now(), body)
	start := time.Now()
	resp, err := n.o.client.Do(req)
	if err != nil {
		res.latency, res.err = time.Since(start), err.Error()
		n.metrics.latency.Observe(res.latency.Seconds())
		return res
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	res.latency, res.code = time.Since(start), resp.StatusCode
	n.metrics.latency.Observe(res.latency.Seconds())
	switch {
	case err != nil:
		res.err = "reading the answer: " + err.Error()
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		res.err = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(answer)))
	case rcv.Echo != "" && strings.TrimSpace(string(answer)) != rcv.Echo:
		res.err = fmt.Sprintf("answer %q is not the acknowledgement %q", strings.TrimSpace(string(answer)), rcv.Echo)
	default:
		res.ok = true
	}
	return res
}

// recorder writes results in batches — the results that arrive within recordLinger of the first
// (while more are coming), up to the batch size, in one fenced statement — until results is closed (after ctx ended and
// every delivery returned). What cannot be written stays due: the notification is delivered
// again. After a batch with a failed attempt, or one it could not write, it calls fresh: those
// notifications may be due again soon.
func (n *Notifier) recorder(ctx context.Context, fk fenceKey, flights map[string]*flight, results <-chan result, fresh func(), log *slog.Logger) error {
	var fencedErr error
	linger := time.NewTimer(recordLinger)
	linger.Stop()
	for r := range results {
		batch := []result{r}
		linger.Reset(recordLinger)
	more:
		for len(batch) < n.o.batch {
			select { // what is waiting
			case r, ok := <-results:
				if !ok {
					break more
				}
				batch = append(batch, r)
				continue
			default:
			}
			if !n.delivering(flights) {
				break // nothing more is coming soon
			}
			select {
			case r, ok := <-results:
				if !ok {
					break more
				}
				batch = append(batch, r)
			case <-linger.C:
				break more
			case <-ctx.Done():
				break more
			}
		}
		linger.Stop()
		if fencedErr != nil || ctx.Err() != nil {
			n.forget(flights, batch)
			continue // leadership over: they are still due, and the next leader sends them again
		}
		again := false
		for _, r := range batch {
			again = again || !r.ok
		}
		if err := n.record(ctx, fk, batch, log); err != nil {
			if errors.Is(err, lock.ErrFenced) {
				fencedErr = err
				n.forget(flights, batch)
				continue
			}
			again = true
			if ctx.Err() == nil {
				n.fails.Log(ctx, log, "record", slog.LevelWarn, "notify: recording attempts failed; those notifications will be sent again",
					slog.Int("results", len(batch)), slog.Any("err", err))
			}
		}
		n.forget(flights, batch) // recorded (or not: then they are due again and taken again)
		if again {
			fresh()
		}
	}
	return fencedErr
}

// record writes a batch of results in one fenced statement: each notification's attempt count,
// last status and error, its new state — delivered; failed when the schedule is used up; else
// pending, due after the schedule's next delay with jitter, computed by PostgreSQL — and an
// attempts row for each failed attempt (a successful one stays in the notification's row).
func (n *Notifier) record(ctx context.Context, fk fenceKey, batch []result, log *slog.Logger) error {
	var held []result
	sent := batch[:0:0]
	for _, r := range batch {
		if r.skipped > 0 {
			held = append(held, r)
		} else {
			sent = append(sent, r)
		}
	}
	if len(held) > 0 {
		ids, waits := make([][16]byte, len(held)), make([]float64, len(held))
		for i, r := range held {
			ids[i], waits[i] = r.id, r.skipped.Seconds()
		}
		// Held back by the breaker: due again when it may let them through, no attempt counted.
		if err := n.fenced(ctx, fk, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `update `+n.table+` t set next_attempt_at = now() + make_interval(secs => w.secs), updated_at = now()
from unnest($1::uuid[], $2::float8[]) as w(id, secs) where t.id = w.id and t.status = 'pending'`, ids, waits)
			return err
		}); err != nil {
			return err
		}
	}
	if len(sent) == 0 {
		return nil
	}
	batch = sent
	k := len(batch)
	ids, oks, codes, lat, errs := make([][16]byte, k), make([]bool, k), make([]int32, k), make([]float64, k), make([]string, k)
	for i, r := range batch {
		ids[i], oks[i], codes[i], lat[i], errs[i] = r.id, r.ok, int32(r.code), float64(r.latency)/float64(time.Millisecond), r.err
	}
	sched := make([]float64, len(n.o.schedule))
	for i, d := range n.o.schedule {
		sched[i] = d.Seconds()
	}
	// The statement returns the delivered ones as a count and the others one by one (to log).
	type outcome struct {
		id       uuid.UUID
		status   string
		attempts int
	}
	var outs []outcome
	var delivered int64
	err := n.fenced(ctx, fk, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `with r as (
	select * from unnest($1::uuid[], $2::bool[], $3::int[], $4::float8[], $5::text[]) as r(id, ok, code, lat, err)),
u as (
	update `+n.table+` t set attempts = t.attempts + 1, tries = t.tries + 1, last_status = nullif(r.code, 0), updated_at = now(),
		last_error = case when r.ok then null else r.err end,
		delivered_at = case when r.ok then now() end, latency_ms = case when r.ok then r.lat end,
		status = case when r.ok then 'delivered' when t.attempts + 1 > cardinality($6::float8[]) then 'failed' else 'pending' end,
		next_attempt_at = case when r.ok or t.attempts + 1 > cardinality($6::float8[]) then t.next_attempt_at
			else now() + make_interval(secs => ($6::float8[])[t.attempts + 1] * (1 - $7::float8 + 2 * $7::float8 * random())) end
	from r where t.id = r.id and t.status = 'pending'
	returning t.id, t.status, t.attempts, t.tries),
a as (
	insert into `+n.attempts+` (id, n, status_code, latency_ms, error)
	select u.id, u.tries, r.code, r.lat, nullif(r.err, '') from u join r using (id) where not r.ok
	on conflict do nothing)
select null::uuid, 'delivered', count(*)::int from u where status = 'delivered'
union all
select id, status, attempts from u where status <> 'delivered'`, ids, oks, codes, lat, errs, sched, n.o.jitter)
		if err != nil {
			return err
		}
		outs, delivered = outs[:0], 0
		for rows.Next() {
			var o outcome
			var id pgtype.UUID
			if err := rows.Scan(&id, &o.status, &o.attempts); err != nil {
				rows.Close()
				return err
			}
			if !id.Valid {
				delivered = int64(o.attempts)
				continue
			}
			o.id = id.Bytes
			outs = append(outs, o)
		}
		return rows.Err()
	})
	if err != nil {
		return err
	}
	n.stats.delivered.Add(delivered)
	n.metrics.delivered.Add(float64(delivered))
	if delivered > 0 && log.Enabled(ctx, slog.LevelDebug) {
		log.DebugContext(ctx, "notify: delivered", slog.Int64("notifications", delivered))
	}
	if len(outs) == 0 {
		return nil
	}
	byID := make(map[uuid.UUID]result, len(outs))
	for _, r := range batch {
		if !r.ok {
			byID[r.id] = r
		}
	}
	for _, o := range outs {
		r := byID[o.id]
		rctx := trace.ContextWithSpanContext(ctx, r.span) // the log line carries the attempt's trace and span ids
		if o.status == "failed" {
			n.stats.failedAttempts.Add(1)
			n.stats.failed.Add(1)
			n.metrics.givenUp.Inc()
			log.ErrorContext(rctx, "notify: no attempt left; the notification is failed", slog.String("id", o.id.String()),
				slog.String("receiver", r.receiver), slog.Int("attempts", o.attempts), slog.String("err", r.err))
			continue
		}
		n.stats.failedAttempts.Add(1)
		log.InfoContext(rctx, "notify: attempt failed; retrying on schedule", slog.String("id", o.id.String()),
			slog.String("receiver", r.receiver), slog.Int("attempt", o.attempts), slog.Int("status", r.code), slog.String("err", r.err))
	}
	return nil
}

// purge deletes delivered notifications older than the retention (and their attempts). It runs
// on the leader of partition 0 (all of them with one partition).
func (n *Notifier) purge(ctx context.Context, tok lock.Token) error {
	fk := fenceKey{tok: tok, resource: n.resource(0)}
	for ctx.Err() == nil {
		var deleted int64
		err := n.fenced(ctx, fk, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `with d as (delete from `+n.table+` where id in (select id from `+n.table+`
				where status = 'delivered' and delivered_at < now() - make_interval(secs => $1) limit 1000) returning id),
			a as (delete from `+n.attempts+` where id in (select id from d))
			select count(*) from d`, n.o.retention.Seconds())
			if err != nil {
				return err
			}
			deleted, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
			return err
		})
		if err != nil || deleted < 1000 {
			return err
		}
	}
	return nil
}
