package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/lock"
)

// Relay publishes the outbox's pending messages through a [Publisher], on the leader only.
//
// [Relay.Run] runs the relay as a fenced leader job (internal/leader): it campaigns with the
// [lock.Elector], passes the fence on taking the lead, and while this relay leads, a robfig/cron
// schedule ([WithSchedule]) and a connection listening on the outbox's NOTIFY channel both wake one
// drain loop. A wake-up that arrives while a drain runs is kept (one, however many arrive) and
// starts the next drain, so drains never overlap and a burst of commits costs one extra drain.
//
// A drain reads due pending rows in id order, in batches of [WithBatchSize] messages and at most
// [DefaultBatchBytes] bytes (always at least one message), and keeps publishes in flight across
// batches (at most twice a batch plus twice the concurrency held): keys in parallel ([WithConcurrency]), each
// key's messages one after the other, each after the previous one's acknowledgement. As results
// come, it deletes the acknowledged rows and records the failures in transactions that pass the
// fence (txkit_fence in the outbox's schema): the attempt count, the error, and a retry time with exponential backoff
// ([WithRetry]); a message that failed its attempts becomes dead ([Outbox.ListDead],
// [Outbox.Requeue]), and so does at once one whose publish error wraps [ErrInvalidMessage] (the
// broker can never carry it). See the package doc's "The pipeline".
// With [WithElectors] the relay leads the partitions of a partitioned outbox ([WithPartitions])
// it wins, each drained as above under its own term.
// When a message fails, the later messages of its key wait until it is sent or dead. When
// publishes of several keys failed while none succeeded (the broker looked down), the first
// acknowledged publish after them makes those messages due at once, rather than each waiting out
// the backoff it gathered during the outage.
//
// Delivery is at least once, with the same [Message.ID] every time: a message is published again
// when its row's delete was lost (a crash, a lost leadership, a database error after the publish).
//
// Relay is safe for concurrent use by multiple goroutines, but Run must not run twice at once.
type Relay struct {
	pool     *pgxpool.Pool
	pub      Publisher
	ob       *Outbox
	o        relayOptions
	fence    *fence.Fence
	resource string
	job      runner // nil without an elector
	shards   *leader.Shards
	running  atomic.Bool
	leading  atomic.Bool // a relay without partitions leads
	stats    relayStats
	m        *relayMetrics
	tracer   trace.Tracer
	fails    *obs.LogLimiter // the failure lines: one per topic (or cause) per obs.LogInterval
}

// Stats counts what a [Relay] did since it was created.
type Stats struct {
	Published int64 // publishes the broker acknowledged
	Failed    int64 // publishes that failed (each failed attempt counts)
	Dead      int64 // messages this relay made dead
	Batches   int64 // non-empty batches read
	Wakeups   int64 // drains started (by the schedule, a notification, or taking the lead)
	Fenced    int64 // terms the fence ended: a newer leader had written (see Outbox.Migrate)
	Rescued   int64 // messages made due at once when publishing worked again after an outage
}

type relayStats struct {
	published, failed, dead, batches, wakeups, rescued atomic.Int64
}

// NewRelay returns a relay that publishes ob's messages through pub while the elector of
// [WithElector] leads. ob's pool is used for the relay's queries and writes, and its
// configuration for the dedicated listening connection. The relay's writes pass a fence:
// the fence table "txkit_fence" in the outbox's schema, which [Outbox.Migrate] creates. NewRelay does not touch the database or ZooKeeper. It returns an error
// wrapping [ErrInvalidOption] when an argument or option is unusable.
func NewRelay(ob *Outbox, pub Publisher, opts ...RelayOption) (*Relay, error) {
	o := defaultRelayOptions()
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case ob == nil:
		return nil, fmt.Errorf("outbox: relay: nil outbox: %w", ErrInvalidOption)
	case pgutil.IsNil(pub):
		return nil, fmt.Errorf("outbox: relay: nil publisher: %w", ErrInvalidOption)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	m, err := newRelayMetrics(o.reg)
	if err != nil {
		return nil, err
	}
	pool := ob.pool
	f := o.fence
	if f == nil {
		if f, err = ob.relayFence(); err != nil {
			return nil, err
		}
	}
	r := &Relay{pool: pool, pub: pub, ob: ob, o: o, fence: f, resource: "outbox:" + ob.name, m: m,
		tracer: obs.TracerProvider(o.tp).Tracer(tracerName), fails: obs.NewLogLimiter(obs.LogInterval, nil)}
	lopts := []leader.Option{leader.WithName("outbox: relay"), leader.WithSchedule(o.schedule),
		leader.WithPause(o.retryPause), leader.WithLogger(o.log.With(slog.String("table", ob.name)))}
	if ob.o.notify {
		lopts = append(lopts, leader.WithChannel(ob.o.channel))
	}
	if o.electors == nil && ob.o.parts > 1 {
		if o.elector != nil {
			return nil, fmt.Errorf("outbox: relay of %s: %d partitions need WithElectors, not WithElector: %w",
				ob.name, ob.o.parts, ErrInvalidOption)
		}
		// Run reports the missing electors; NewShards checks the rest without them.
		if _, err := leader.NewShards(ob.o.parts, func(int) (lock.Elector, error) { return &lock.Election{}, nil },
			pool, f, r.resource, r.drainLoop, lopts...); err != nil {
			return nil, fmt.Errorf("outbox: relay: %w: %w", err, ErrInvalidOption)
		}
		return r, nil
	}
	if o.electors != nil {
		if o.inspector != nil {
			// A partition given up to balance the load is handed over once its publishes in
			// flight are recorded: otherwise the next leader publishes them again.
			lopts = append(lopts, leader.WithMembership(leader.ContenderMembership(o.inspector, o.elections...)),
				leader.WithGrace(o.publishTimeout+handOverRecord))
		}
		if o.reg != nil {
			lopts = append(lopts, leader.WithRegisterer(o.reg))
		}
		s, err := leader.NewShards(ob.o.parts, o.electors, pool, f, r.resource, r.drainLoop, lopts...)
		if err != nil {
			return nil, fmt.Errorf("outbox: relay: %w: %w", err, ErrInvalidOption)
		}
		r.job, r.shards = s, s
		return r, nil
	}
	if o.elector == nil {
		// Run reports the missing elector; New also checks the rest without one.
		el := &lock.Election{}
		if _, err := leader.New(el, pool, f, r.resource, r.drainLoop, lopts...); err != nil {
			return nil, fmt.Errorf("outbox: relay: %w: %w", err, ErrInvalidOption)
		}
		return r, nil
	}
	job, err := leader.New(o.elector, pool, f, r.resource, r.drainLoop, lopts...)
	if err != nil {
		return nil, fmt.Errorf("outbox: relay: %w: %w", err, ErrInvalidOption)
	}
	r.job = job
	return r, nil
}

// runner is the leader job a relay runs: a leader.Job, or a leader.Shards for partitions.
type runner interface {
	Run(ctx context.Context) error
	Fenced() int64
}

// Led returns the partitions this relay leads now, in order: [0] or none for a relay built with
// [WithElector], the partitions it won for one built with [WithElectors]. It is safe to call at
// any time.
func (r *Relay) Led() []int {
	if r.shards != nil {
		return r.shards.Led()
	}
	if r.leading.Load() {
		return []int{0}
	}
	return nil
}

// checkPartitions refuses to relay a table whose stored partition count is not the outbox's (an
// error wrapping ErrInvalidOption); a failed query is retried until ctx ends.
func (r *Relay) checkPartitions(ctx context.Context, log *slog.Logger) error {
	for {
		var stored int
		err := r.pool.QueryRow(ctx, r.ob.q.partitions).Scan(&stored)
		switch {
		case err == nil && stored == r.ob.o.parts:
			return nil
		case err == nil:
			return r.ob.partsMismatch(stored)
		case errors.Is(err, pgx.ErrNoRows) || isUndefinedTable(err):
			return fmt.Errorf("outbox: relay of %s: no partition count stored (was Outbox.Migrate run?): %w: %w",
				r.ob.name, err, ErrInvalidOption)
		case ctx.Err() != nil:
			return nil
		}
		log.WarnContext(ctx, "outbox: reading the partition count failed; retrying", slog.Any("err", err))
		t := time.NewTimer(r.o.retryPause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func isUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}

// relayFence is the fence a [Relay] of ob passes by default: the table "txkit_fence" in ob's
// schema, created by [Outbox.Migrate].
func (ob *Outbox) relayFence() (*fence.Fence, error) {
	var opts []fence.Option
	if ob.o.schema != "" {
		opts = append(opts, fence.WithSchema(ob.o.schema))
	}
	f, err := fence.New(ob.pool, opts...)
	if err != nil {
		return nil, fmt.Errorf("outbox: fence: %w: %w", err, ErrInvalidOption)
	}
	return f, nil
}

// Stats returns the relay's counters. It is safe to call at any time.
func (r *Relay) Stats() Stats {
	return Stats{
		Published: r.stats.published.Load(),
		Failed:    r.stats.failed.Load(),
		Dead:      r.stats.dead.Load(),
		Batches:   r.stats.batches.Load(),
		Wakeups:   r.stats.wakeups.Load(),
		Fenced:    r.fenced(),
		Rescued:   r.stats.rescued.Load(),
	}
}

// Run relays until ctx ends, then returns nil. It campaigns with the elector and relays only while
// it leads; when the leadership is lost it stops at once — no further publish, delete or update
// from the batch in hand, whose rows stay pending for the next leader to send again — and
// campaigns again. Cancelling ctx does the same, resigns, and returns once every goroutine Run
// started has exited. ctx scopes the whole work.
//
// With [WithElectors] Run campaigns in every partition's election and relays the partitions it
// leads, each as above; with [WithBalance] it leads at most its share (see [WithBalance]).
//
// Run returns at once an error wrapping [ErrInvalidOption] when the relay was built without
// [WithElector] (or [WithElectors] for a partitioned outbox), an error wrapping [lock.ErrClosed]
// when the elector's session is closed, [ErrRunning] when another Run of this Relay is running,
// and an error naming Fence.Migrate when the fence's table does not exist. On taking the lead it
// returns an error wrapping [ErrInvalidOption] when the table's stored partition count is not the
// outbox's, or none is stored (Migrate was not run). Other failures of the database or the broker
// are logged and retried.
func (r *Relay) Run(ctx context.Context) error {
	if r.job == nil {
		return fmt.Errorf("outbox: relay of %s: no elector (WithElector, or WithElectors for partitions): %w", r.ob.name, ErrInvalidOption)
	}
	if !r.running.CompareAndSwap(false, true) {
		return fmt.Errorf("outbox: relay of %s: %w", r.ob.name, ErrRunning)
	}
	defer r.running.Store(false)
	return r.job.Run(ctx)
}

// fenced is how many terms the fence ended (zero without an elector: the relay never ran).
func (r *Relay) fenced() int64 {
	if r.job == nil {
		return 0
	}
	return r.job.Fenced()
}

// handOverRecord is what a relay giving a partition up allows, beyond the publish timeout, for
// recording the publishes in flight before its term is ended (leader.WithGrace).
const handOverRecord = 5 * time.Second

// drainLoop is the relay's leader work for one partition (0 when the outbox is not split): it
// drains each time it is woken, until ctx ends (nil) or the fence refuses this relay (an error
// wrapping lock.ErrFenced), or the table's partition count is not the outbox's (an error
// wrapping ErrInvalidOption). When the term yields (its partition is given up to balance the
// load) it returns nil once the drain in progress has recorded what it published.
func (r *Relay) drainLoop(ctx context.Context, t *leader.Term) error {
	log := t.Log()
	part := t.Partition()
	var out outage
	defer r.m.setBacklog(0, 0) // the gauges are the leader's: a relay that does not lead shows 0
	defer r.fails.FlushAll()
	if r.shards == nil {
		r.leading.Store(true)
		defer r.leading.Store(false)
	}
	if err := r.checkPartitions(ctx, log); err != nil || ctx.Err() != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.Yield():
			return nil
		case <-t.Wake():
		}
		r.stats.wakeups.Add(1)
		err := r.drainPipelined(ctx, t, part, &out, log)
		r.fails.Flush() // the last failure lines held back, once their interval has ended
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, lock.ErrFenced):
			return err
		case t.Yielding():
			return nil // what the drain could record is recorded; the rest stays pending
		case err != nil:
			r.fails.Log(ctx, log, "\x00drain", slog.LevelWarn, "outbox: drain failed; retrying at the next wake-up", slog.Any("err", err))
		}
	}
}

// row is a due message as the relay reads it.
type row struct {
	id       int64
	msg      Message
	attempts int
	created  time.Time // the row's created_at, on the relay's clock
	trace    string    // the trace context stored by Enqueue (obs.EncodeTrace), "" when none
}

// gaugeInterval is how often a drain that goes on counts the backlog for the gauges.
const gaugeInterval = 5 * time.Second

// measure counts the pending rows and the age of the oldest, sets the gauges, and returns the
// count (-1 when the query failed: the gauges keep their values until the next pass).
func (r *Relay) measure(ctx context.Context) int64 {
	var (
		pending int64
		age     float64
	)
	if err := r.pool.QueryRow(ctx, r.ob.q.pending).Scan(&pending, &age); err != nil {
		return -1
	}
	r.m.setBacklog(pending, time.Duration(age*float64(time.Second)))
	return pending
}

// fetch reads the next batch of partition part, leaving out the rows whose ids are in held: at
// most WithBatchSize due rows and, past the first, at most batchBytes bytes of them. more
// reports whether more rows may be due: the batch is full, or the byte bound cut it short.
func (r *Relay) fetch(ctx context.Context, part int, held []int64) (batch []row, more bool, err error) {
	sent := time.Now() // no later than the statement's now(), from which the rows' ages are taken
	rows, err := r.pool.Query(ctx, r.ob.q.due, r.o.batch, r.o.batchBytes, part, held)
	if err != nil {
		return nil, false, fmt.Errorf("outbox: read due messages of %s: %w", r.ob.name, err)
	}
	cut := false
	batch, err = pgx.CollectRows(rows, func(cr pgx.CollectableRow) (row, error) {
		x, c, err := scanDue(cr, sent)
		cut = cut || c
		return x, err
	})
	if err != nil {
		return nil, false, fmt.Errorf("outbox: read due messages of %s: %w", r.ob.name, err)
	}
	if cut { // the last row only marks where the byte bound cut the batch
		return batch[:len(batch)-1], true, nil
	}
	return batch, len(batch) == r.o.batch, nil
}

// scanDue scans a row of the due statement (sql/queries.sql) sent at sent; cut reports the
// marker row where the byte bound cut the batch.
func scanDue(r pgx.Row, sent time.Time) (x row, cut bool, err error) {
	var age float64 // seconds since created_at, by the database's clock
	err = r.Scan(&x.id, &x.msg.ID, &x.msg.Topic, &x.msg.Key, &x.msg.Body, &x.msg.Headers, &x.attempts, &cut, &x.msg.Tags, &age, &x.trace)
	x.created = sent.Add(-time.Duration(age * float64(time.Second)))
	return x, cut, err
}

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

// maxErrorLen bounds the last_error stored for a failed publish.
const maxErrorLen = 2000

// record deletes the sent rows and records the failed ones, in one transaction that passes the
// fence first. When the batch has an acknowledged publish after an outage (see [outage]), the same
// transaction makes the rows that failed during the outage due at once. It returns how many were
// sent, failed, made dead and made due again.
func (r *Relay) record(ctx context.Context, resource string, tok lock.Token, batch []row, errs []error, out *outage, log *slog.Logger) (sent, failed, dead, rescued int, err error) {
	var sentIDs, failedIDs []int64
	var failedErrs []string
	var permanent []bool
	for i, x := range batch {
		switch e := errs[i]; {
		case e == nil:
			sentIDs = append(sentIDs, x.id)
		default:
			failedIDs = append(failedIDs, x.id)
			failedErrs = append(failedErrs, pgutil.ErrorText(e, maxErrorLen))
			permanent = append(permanent, errors.Is(e, ErrInvalidMessage)) // publishOne logged it
		}
	}
	if len(sentIDs) == 0 && len(failedIDs) == 0 {
		return 0, 0, 0, 0, nil
	}
	var rescue []int64
	if len(sentIDs) > 0 {
		rescue = out.over()
	}
	var deadIDs []uuid.UUID
	// The writes and the commit go out as one pipeline once the fence has passed: three round
	// trips (begin, fence, writes + commit), as many as an unfenced transaction.
	b := &pgx.Batch{}
	if len(sentIDs) > 0 {
		b.Queue(r.ob.q.deleteSent, sentIDs).Exec(func(pgconn.CommandTag) error { return nil })
	}
	if len(rescue) > 0 {
		b.Queue(`update `+r.ob.table+` set next_attempt_at = now()
where id = any($1::bigint[]) and status = '`+StatusPending.String()+`' and attempts > 0 and next_attempt_at > now()`, rescue).
			Exec(func(tag pgconn.CommandTag) error {
				rescued = int(tag.RowsAffected())
				return nil
			})
	}
	if len(failedIDs) > 0 {
		b.Queue(r.ob.q.fail, failedIDs, failedErrs, r.o.maxAttempts, r.o.backoffBase.Seconds(), r.o.backoffCap.Seconds(), permanent).
			Query(func(rows pgx.Rows) error {
				var (
					id     uuid.UUID
					isDead bool
				)
				_, err := pgx.ForEachRow(rows, []any{&id, &isDead}, func() error {
					if isDead {
						deadIDs = append(deadIDs, id)
					}
					return nil
				})
				return err
			})
	}
	err = r.fencedTx(ctx, resource, tok, b)
	if err != nil {
		return 0, 0, 0, 0, fmt.Errorf("outbox: record batch of %s: %w", r.ob.name, err)
	}
	switch {
	case len(sentIDs) > 0:
		out.reset()
	default:
		for i, x := range batch {
			if e := errs[i]; e != nil && !errors.Is(e, ErrInvalidMessage) {
				out.add(x.id, x.msg.Key)
			}
		}
	}
	if rescued > 0 {
		r.stats.rescued.Add(int64(rescued))
		log.InfoContext(ctx, "outbox: publishing works again; the messages that failed meanwhile are due at once",
			slog.Int("messages", rescued))
	}
	if len(deadIDs) > 0 {
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
	return len(sentIDs), len(failedIDs), len(deadIDs), rescued, nil
}

// fenceResource returns the fence resource of partition part's writes: the relay's resource, or
// with partitions the partition's, as leader.Shards names it.
func (r *Relay) fenceResource(part int) string {
	if r.shards == nil {
		return r.resource
	}
	return leader.PartitionName(r.resource, part)
}

// fencedTx runs b in one transaction that first passes the fence (resource, tok), in two round trips:
// "begin" with the fence check, then b's statements with "commit". It rolls back (with a context
// of its own) when anything fails, and returns an error wrapping lock.ErrFenced when the fence
// refuses tok.
func (r *Relay) fencedTx(ctx context.Context, resource string, tok lock.Token, b *pgx.Batch) (err error) {
	c, err := r.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release() // the pool closes a connection released in a transaction
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			_, _ = c.Exec(cctx, "rollback") // a warning only, when no transaction is open
		}
	}()
	if err := r.fence.Check(ctx, &beginFirst{c: c}, resource, tok); err != nil {
		return err
	}
	b.Queue("commit")
	return c.SendBatch(ctx, b).Close()
}

// beginFirst is a fence.DBTX on a connection that sends "begin" in one pipeline with the first
// statement run through it, so that opening the transaction costs no round trip of its own.
type beginFirst struct {
	c     *pgxpool.Conn
	begun bool
}

func (t *beginFirst) batch(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	t.begun = true
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(sql, args...)
	br := t.c.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

func (t *beginFirst) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.begun {
		return t.c.Exec(ctx, sql, args...)
	}
	br, err := t.batch(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (t *beginFirst) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !t.begun { // not the fence's first statement today: open the transaction on its own
		t.begun = true
		if _, err := t.c.Exec(ctx, "begin"); err != nil {
			return nil, err
		}
	}
	return t.c.Query(ctx, sql, args...)
}

func (t *beginFirst) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.begun {
		return t.c.QueryRow(ctx, sql, args...)
	}
	br, err := t.batch(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return batchRow{row: br.QueryRow(), br: br}
}

// batchRow is the row of a pipeline's last statement: scanning it ends the pipeline.
type batchRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// cleanupTimeout bounds a rollback once ctx has ended.
const cleanupTimeout = 5 * time.Second

// maxOutageRows bounds the rows an [outage] remembers; those that failed beyond it wait out their
// backoff.
const maxOutageRows = 100_000

// outage remembers the rows whose publish failed while no publish succeeded, in one leadership
// term. When they are of at least two keys (a message of its own that keeps failing is not an
// outage: it keeps its backoff), the broker looked down, and the first acknowledged publish after
// them makes them due at once: they do not wait out a backoff that kept doubling while the
// broker was away. It is used by the drain loop's goroutine only.
type outage struct {
	ids  []int64
	keys map[string]struct{}
}

func (o *outage) add(id int64, key string) {
	if len(o.ids) >= maxOutageRows {
		return
	}
	if o.keys == nil {
		o.keys = map[string]struct{}{}
	}
	if key == "" {
		key = "\x00" + strconv.FormatInt(id, 10) // a message without a key is a group of its own
	}
	o.ids = append(o.ids, id)
	o.keys[key] = struct{}{}
}

// over returns the rows to make due now that a publish succeeded: those of an outage, or none.
func (o *outage) over() []int64 {
	if len(o.keys) < 2 {
		return nil
	}
	return o.ids
}

func (o *outage) reset() { o.ids, o.keys = o.ids[:0], nil }

// backoffBounds returns the range of the delay the fail statement (sql/queries.sql) gives a
// message after its n-th failed publish: [d/2, d], d = min(cap, base·2^(n-1)). Once n-1 reaches
// 62 the exponent stops growing, as in the SQL. Attempts beyond MaxAttempts do not occur (the
// message is dead), but the bounds stay defined.
func backoffBounds(base, cap time.Duration, n int) (lo, hi time.Duration) {
	e := min(max(n-1, 0), 62)
	d := min(float64(cap), float64(base)*math.Pow(2, float64(e)))
	return time.Duration(d / 2), time.Duration(d)
}
