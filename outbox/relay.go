package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/lock"
)

// Relay publishes the outbox's pending messages through a [Publisher], on the leader only:
// [Relay.Run] campaigns with the [lock.Elector] (or one per partition, [WithElectors]) and, while
// it leads, drains the due messages whenever a commit's NOTIFY or the schedule ([WithSchedule])
// wakes it, and publishes at once the messages [Outbox.Do] hands it after their commit. Each
// key's messages are published in order, different keys in parallel (16 keys at once);
// acknowledged rows are deleted and failures retried with backoff ([WithRetry]) in fenced
// transactions (txkit_fence in the outbox's schema), until [WithRetry]'s attempts failed, or a
// publish error wrapping [ErrInvalidMessage], make a message dead ([Outbox.ListDead],
// [Outbox.Requeue]). Delivery is at least once, with the same [Message.ID] every time. How a drain
// reads, pipelines and records: docs/outbox.md.
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
	inboxes  []*inbox        // per partition: the rows Outbox.Do hands over while this relay leads it
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
	Handed    int64 // messages Outbox.Do handed over that went to the publisher without a read
}

type relayStats struct {
	published, failed, dead, batches, wakeups, rescued, handed atomic.Int64
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
	r.inboxes = make([]*inbox, ob.o.parts)
	for p := range r.inboxes {
		r.inboxes[p] = newInbox()
	}
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
		if o.count != nil {
			// A partition given up to balance the load is handed over once its publishes in
			// flight are recorded: otherwise the next leader publishes them again.
			lopts = append(lopts, leader.WithMembership(leader.MembersFunc(o.count)),
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
		Handed:    r.stats.handed.Load(),
	}
}

// Run relays until ctx ends, then returns nil. It campaigns with the elector and relays only while
// it leads; when the leadership is lost it stops at once — no further publish, delete or update
// from the batch in hand, whose rows stay pending for the next leader to send again — and
// campaigns again. Cancelling ctx does the same, resigns, and returns once every goroutine Run
// started has exited. ctx scopes the whole work.
//
// With [WithElectors] Run campaigns in every partition's election and relays the partitions it
// leads, each as above; with a count it leads at most its share (see [WithElectors]).
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
	r.ob.addRelay(r)
	defer r.ob.removeRelay(r)
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
	in := r.inboxes[part]
	in.open(t)
	defer in.close()
	for {
		read := true
		select {
		case <-ctx.Done():
			return nil
		case <-t.Yield():
			return nil
		case <-t.Wake():
		case <-in.wake: // rows handed over by Outbox.Do: the drain reads only if some need it
			read = false
		}
		r.stats.wakeups.Add(1)
		err := r.drainPipelined(ctx, t, part, &out, log, read)
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
