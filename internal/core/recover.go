package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/lock"
)

// Driver drives one claimed transaction of its kind towards its end: it calls the branches'
// ops that the transaction's status asks for and records what happened with [Log.Record],
// passing tok so the write is fenced. t.Status is confirming, cancelling, running or
// compensating, and t.Branches holds the branches. Drive blocks until done or ctx ends (the
// leadership ended); an error it returns is logged and the transaction is rescheduled with
// backoff, never dropped. A Drive that panics is treated the same way, with a *[PanicError]: the
// panic is logged with its stack and recorded as the transaction's last_error.
type Driver interface {
	Drive(ctx context.Context, tok lock.Token, t *Transaction) error
}

// DriverFunc adapts a function to [Driver].
type DriverFunc func(ctx context.Context, tok lock.Token, t *Transaction) error

// Drive calls f.
func (f DriverFunc) Drive(ctx context.Context, tok lock.Token, t *Transaction) error {
	return f(ctx, tok, t)
}

// Recoverer finishes, on the leader only, the transactions whose starter vanished or whose retry
// is due. It runs as a fenced leader job (internal/leader): on taking the lead it passes the
// fence, then at once and on every robfig/cron tick it claims due transactions of its kinds in
// batches (FOR UPDATE SKIP LOCKED, fenced with the leadership's token), moves those still trying
// after their timeout to cancelling, and hands each to its kind's [Driver], a bounded number at
// once. A second cron job deletes finished transactions older than the retention, in batches.
// Fenced out, it pauses 1 s before it campaigns again.
//
// Recoverer is safe for concurrent use by multiple goroutines, but Run must not run twice at once.
type Recoverer struct {
	log     *Log
	job     recoveryJob
	claimQ  string        // the claim, with the partition's condition when the log is partitioned
	slots   chan struct{} // one per transaction driven now, at most WithConcurrency, across partitions
	drivers map[Kind]Driver
	kinds   []string
	o       recoverOptions
	running atomic.Bool
	stats   recoverStats
	m       map[Kind]*recoverMetrics
}

// recoverMetrics are the recovery counters of one kind, resolved once.
type recoverMetrics struct{ ok, failed, timedOut prometheus.Counter }

// RecoverStats counts what a [Recoverer] did.
type RecoverStats struct {
	Claimed  int64 // transactions claimed
	TimedOut int64 // trying transactions moved to cancelling by the timeout
	Failed   int64 // drives that returned an error (rescheduled)
	Fenced   int64 // leadership terms the fence ended: a claim, a record or a leader job refused
	Purged   int64 // finished transactions deleted by the retention job
}

type recoverStats struct{ claimed, timedOut, failed, purged atomic.Int64 }

// NewRecoverer returns a Recoverer of the transactions of the kinds in drivers, recovering while
// el leads. It does not touch the database or ZooKeeper. It returns an error wrapping
// [ErrInvalidOption] when an argument or option is unusable, or when the log is partitioned
// ([WithPartitions]: use [NewPartitionedRecoverer]).
func NewRecoverer(l *Log, el lock.Elector, drivers map[Kind]Driver, opts ...RecoverOption) (*Recoverer, error) {
	if el == nil {
		return nil, fmt.Errorf("core: recoverer: nil elector: %w", ErrInvalidOption)
	}
	if l != nil && l.Partitions() > 1 {
		return nil, fmt.Errorf("core: recoverer: the log has %d partitions: one elector cannot lead them (NewPartitionedRecoverer): %w",
			l.Partitions(), ErrInvalidOption)
	}
	return newRecoverer(l, drivers, opts, func(r *Recoverer, lopts []leader.Option) (recoveryJob, error) {
		return leader.New(el, l.pool, l.fence, l.resource(), r.recoverLoop, lopts...)
	})
}

// recoveryJob is what a Recoverer runs: a leader.Job, or a leader.Shards for a partitioned log.
type recoveryJob interface {
	Run(ctx context.Context) error
	Fenced() int64
}

func newRecoverer(l *Log, drivers map[Kind]Driver, opts []RecoverOption,
	newJob func(r *Recoverer, lopts []leader.Option) (recoveryJob, error)) (*Recoverer, error) {
	o := defaultRecoverOptions()
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case l == nil:
		return nil, fmt.Errorf("core: recoverer: nil log: %w", ErrInvalidOption)
	case len(drivers) == 0:
		return nil, fmt.Errorf("core: recoverer: no driver: %w", ErrInvalidOption)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.tr == nil {
		o.tr = tracer(nil)
	}
	if o.metrics == nil {
		m, err := newMetrics(nil)
		if err != nil {
			return nil, fmt.Errorf("core: recoverer: %w", err)
		}
		o.metrics = m
	}
	r := &Recoverer{log: l, drivers: map[Kind]Driver{}, o: o, m: map[Kind]*recoverMetrics{}, slots: make(chan struct{}, o.concurrency)}
	for k, d := range drivers {
		if _, ok := kindNames[k]; !ok || d == nil {
			return nil, fmt.Errorf("core: recoverer: driver for %s: %w", k, ErrInvalidOption)
		}
		r.drivers[k] = d
		r.kinds = append(r.kinds, k.String())
		r.m[k] = &recoverMetrics{ok: o.metrics.attempts.WithLabelValues(k.String(), "ok"),
			failed:   o.metrics.attempts.WithLabelValues(k.String(), "error"),
			timedOut: o.metrics.timedOut.WithLabelValues(k.String())}
	}
	sort.Strings(r.kinds)
	if l.Partitions() > 1 {
		q, err := partitionedClaim(l.q["claim"], l.Partitions())
		if err != nil {
			return nil, err
		}
		r.claimQ = q
	} else {
		r.claimQ = l.q["claim"]
	}
	lopts := []leader.Option{leader.WithName("core: recoverer"), leader.WithSchedule(o.schedule),
		leader.WithLogger(o.log.With(slog.String("kinds", strings.Join(r.kinds, ",")))),
		leader.WithCron("retention", o.retentionEvery, func(ctx context.Context, _ lock.Token) error {
			_, err := r.purge(ctx)
			return err
		})}
	for _, j := range o.jobs {
		lopts = append(lopts, leader.WithCron(j.name, j.spec, j.fn))
	}
	job, err := newJob(r, lopts)
	if err != nil {
		return nil, fmt.Errorf("core: recoverer: %w: %w", err, ErrInvalidOption)
	}
	r.job = job
	return r, nil
}

// Stats returns the recoverer's counters.
func (r *Recoverer) Stats() RecoverStats {
	return RecoverStats{Claimed: r.stats.claimed.Load(), TimedOut: r.stats.timedOut.Load(),
		Failed: r.stats.failed.Load(), Fenced: r.job.Fenced(), Purged: r.stats.purged.Load()}
}

// Run recovers until ctx ends, then returns nil once every goroutine it started has exited. It
// campaigns with the elector and recovers only while it leads; when the leadership is lost its
// drives are cancelled and it campaigns again. It returns an error wrapping [lock.ErrClosed] when
// the elector's session is closed, [ErrRunning] when another Run of r is running, and one naming
// Fence.Migrate when the fence table does not exist. Database and participant failures are logged
// and retried.
func (r *Recoverer) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return fmt.Errorf("core: recoverer: %w", ErrRunning)
	}
	defer r.running.Store(false)
	if err := r.log.checkPartitions(ctx); err != nil {
		if ctx.Err() != nil { // ended while starting: as if it had ended while running
			return nil
		}
		return err
	}
	return r.job.Run(ctx)
}

// recoverLoop is the recoverer's leader work: it recovers due transactions each time it is woken
// (on taking the lead and on every tick), until ctx ends (nil) or the fence refuses a claim or a
// record (an error wrapping lock.ErrFenced).
func (r *Recoverer) recoverLoop(ctx context.Context, t *leader.Term) error {
	log := t.Log()
	if t.Partition() == 0 { // partition 0's leader measures the whole backlog
		defer r.dropGauges()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.Wake():
		}
		err := r.recoverDue(ctx, t.Token(), t.Partition(), log)
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, lock.ErrFenced):
			return err
		default:
			log.WarnContext(ctx, "core: recovery tick failed; retrying at the next tick", slog.Any("err", err))
		}
	}
}

// recoverDue measures the backlog, then claims and drives batches until a batch comes back short
// or ctx ends, in a span "recovery pass".
func (r *Recoverer) recoverDue(ctx context.Context, tok lock.Token, part int, log *slog.Logger) (err error) {
	ctx, span := r.o.tr.Start(ctx, "recovery pass")
	defer func() { obs.EndSpan(span, err) }()
	if part == 0 {
		r.measure(ctx, log)
	}
	for ctx.Err() == nil {
		batch, err := r.claim(ctx, tok, part)
		if err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil
		}
		var g errgroup.Group
		var fenced atomic.Pointer[error]
	drives:
		for _, t := range batch {
			// One bound for the whole recoverer: the partitions it leads share it.
			select {
			case r.slots <- struct{}{}:
			case <-ctx.Done():
				break drives // what is not driven comes back when its lease passes
			}
			g.Go(func() error {
				defer func() { <-r.slots }()
				err := r.drive(ctx, tok, t, log)
				switch {
				case err == nil:
					r.m[t.Kind].ok.Inc()
				case ctx.Err() != nil:
				case errors.Is(err, lock.ErrFenced):
					r.m[t.Kind].failed.Inc()
					fenced.Store(&err)
				default: // drive logged it, in the transaction's trace
					r.m[t.Kind].failed.Inc()
					r.stats.failed.Add(1)
					r.reschedule(ctx, tok, t, err, log)
				}
				return nil
			})
		}
		_ = g.Wait()
		if e := fenced.Load(); e != nil {
			return *e
		}
		if len(batch) < r.o.batch {
			return nil
		}
	}
	return nil
}

// drive hands t to its kind's driver. A panicking driver is recovered (logged with its stack)
// and its *PanicError returned: the transaction is rescheduled with backoff like any failed drive,
// instead of crashing the process, which would crash every leader in turn (the transaction stays due).
//
// The drive is a span "recovery drive", a child of the context stored with the transaction (the
// trace of the process that began it, so the branch calls made here join that trace) with a link
// to the pass's span; a child of the pass's span when none was stored. A failed drive is logged
// here, under that span, so that its log line carries the transaction's trace id.
func (r *Recoverer) drive(ctx context.Context, tok lock.Token, t *Transaction, log *slog.Logger) (err error) {
	ctx, span := r.o.tr.Start(obs.DecodeTrace(ctx, t.TraceContext), "recovery drive",
		trace.WithLinks(trace.LinkFromContext(ctx)),
		trace.WithAttributes(attribute.String(AttrGID, t.GID), attribute.String("txkit.status", t.Status.String())))
	defer func() {
		if v := recover(); v != nil {
			err = recovered(ctx, log, "core: driver panicked; rescheduled", v, slog.String("gid", t.GID),
				slog.String("status", t.Status.String()))
		} else if err != nil && ctx.Err() == nil && !errors.Is(err, lock.ErrFenced) {
			log.WarnContext(ctx, "core: drive failed; rescheduled", slog.String("gid", t.GID),
				slog.String("status", t.Status.String()), slog.Any("err", err))
		}
		obs.EndSpan(span, err)
	}()
	return r.drivers[t.Kind].Drive(ctx, tok, t)
}

// reschedule records a drive's failure when the driver could not (its Record failed).
func (r *Recoverer) reschedule(ctx context.Context, tok lock.Token, t *Transaction, cause error, log *slog.Logger) {
	if _, ok := t.Status.BranchDone(); !ok {
		return
	}
	if err := r.log.Record(ctx, tok, Progress{GID: t.GID, From: t.Status, Err: cause}); err != nil && ctx.Err() == nil {
		// The claim's lease brings it back anyway.
		log.WarnContext(ctx, "core: could not record a failed drive; the lease will bring it back", slog.String("gid", t.GID), slog.Any("err", err))
	}
}

// claim takes a batch of due transactions of partition part with their branches, in one
// transaction fenced with the partition's resource: the begin, the fence check and the claim in
// one round trip, the branches' read and the commit in a second.
func (r *Recoverer) claim(ctx context.Context, tok lock.Token, part int) ([]*Transaction, error) {
	l := r.log
	var batch []*Transaction
	args := []any{r.kinds, r.o.batch, l.o.lease.Seconds()}
	resource := l.resource()
	if l.Partitions() > 1 {
		args = append(args, part)
		resource = leader.PartitionName(resource, part)
	}
	err := leader.CommitFenced(ctx, l.pool, l.fence, resource, tok, func(b *pgx.Batch) {
		b.Queue(r.claimQ, args...).Query(func(rows pgx.Rows) (err error) {
			batch, err = pgx.CollectRows(rows, r.claimed)
			return err
		})
	}, func(b *pgx.Batch) { // the branches of what was claimed, with the commit
		if len(batch) > 0 {
			b.Queue(l.q["branches"], gidsOf(batch)).Query(func(rows pgx.Rows) error { return scanBranches(rows, batch) })
		}
	})
	if err != nil {
		return nil, fmt.Errorf("core: claim: %w", err)
	}
	r.stats.claimed.Add(int64(len(batch)))
	return batch, nil
}

// claimed scans a transaction the claim statement returned, counting it when it timed out.
func (r *Recoverer) claimed(cr pgx.CollectableRow) (*Transaction, error) {
	var t Transaction
	var kind, status string
	var timedOut bool
	if err := cr.Scan(&t.GID, &kind, &status, &t.TimeoutAt, &t.NextRetryAt, &t.Attempts, &t.LastError,
		&t.Payload, &t.CreatedAt, &t.UpdatedAt, &t.TraceContext, &timedOut); err != nil {
		return nil, err
	}
	tx, err := parsed(&t, kind, status)
	if err == nil && timedOut {
		r.stats.timedOut.Add(1)
		r.m[tx.Kind].timedOut.Inc()
	}
	return tx, err
}

// purge deletes finished transactions older than the retention, batch after batch.
func (r *Recoverer) purge(ctx context.Context) (int64, error) {
	var total int64
	for ctx.Err() == nil {
		var n int64
		if err := r.log.pool.QueryRow(ctx, r.log.q["purge"], r.o.retention.Seconds(), r.o.retentionBatch).Scan(&n); err != nil {
			return total, fmt.Errorf("core: purge: %w", err)
		}
		total += n
		r.stats.purged.Add(n)
		if n < int64(r.o.retentionBatch) {
			break
		}
	}
	return total, nil
}

// measure sets the backlog gauges of r's kinds — due transactions and the oldest unfinished
// one's age — with one query, when the metrics are registered. A failure is logged: the pass goes
// on.
func (r *Recoverer) measure(ctx context.Context, log *slog.Logger) {
	m := r.o.metrics
	if !m.exposed {
		return
	}
	due, oldest := make(map[string]float64, len(r.kinds)), make(map[string]float64, len(r.kinds))
	rows, err := r.log.pool.Query(ctx, r.log.q["backlog"], r.kinds)
	if err == nil {
		var kind string
		var n int64
		var age float64
		_, err = pgx.ForEachRow(rows, []any{&kind, &n, &age}, func() error {
			due[kind], oldest[kind] = float64(n), age
			return nil
		})
	}
	if err != nil {
		if ctx.Err() == nil {
			log.WarnContext(ctx, "core: could not measure the recovery backlog", slog.Any("err", err))
		}
		return
	}
	for _, k := range r.kinds {
		m.backlog.WithLabelValues(k).Set(due[k])
		m.oldest.WithLabelValues(k).Set(oldest[k])
	}
}

// dropGauges removes the backlog gauges of r's kinds when the leadership ends: only the leader
// exposes them, so that a former leader's last values do not linger.
func (r *Recoverer) dropGauges() {
	for _, k := range r.kinds {
		r.o.metrics.backlog.DeleteLabelValues(k)
		r.o.metrics.oldest.DeleteLabelValues(k)
	}
}
