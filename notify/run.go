package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/placement"
	"github.com/txkit/txkit/lock"
)

// Run delivers, while this notifier leads the election of [WithElector], every pending
// notification whose attempt is due — those [Notifier.Do] or [Notifier.Deliver] did not attempt, or whose attempt
// failed: woken by the cron tick ([WithTick]), by NOTIFY from [Notifier.Redeliver] and, while
// notifications are pending, every 100 ms to look for ones nobody claimed, it takes
// (and claims, when no Deliver call has) due notifications of each receiver — no more than the receiver's
// free delivery slots, so a slow receiver only delays itself — posts them, and records each
// attempt (status code, latency, error) and the notification's new state in batches, fenced with
// the leadership's token so a deposed leader records nothing. Taking notifications writes
// nothing but a first attempt's claim: the leader remembers what it took until the result is recorded, and if it dies
// mid-delivery they are still due, so the next leader sends them again, with the same id. It also
// deletes, every 10 min, notifications delivered more than 30 days ago. It runs as a fenced leader job
// (internal/leader): it passes the fence on taking the lead, and pauses 1 s after being fenced out
// before it campaigns again.
//
// Run blocks until ctx ends, then returns nil after every goroutine it started has exited and the
// attempts [Notifier.Do] made are recorded ([Notifier.Flush]). It
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
	err := n.job.Run(ctx)
	_ = n.later.wait(context.WithoutCancel(ctx)) // Do's records in flight: each bounded by the lease
	return err
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

// handOverRecord is what a notifier giving a partition up allows, beyond the call timeout, for
// recording the posts in flight before its term is ended (leader.WithGrace).
const handOverRecord = 5 * time.Second

// leaderJob is what Run runs: a leader.Job, or a leader.Shards with partitions.
type leaderJob interface {
	Run(ctx context.Context) error
	Fenced() int64
}

// newLeader returns the leader job of the notifier's elector, or of its partitions.
func (n *Notifier) newLeader(opts []leader.Option) (leaderJob, error) {
	if n.o.parts > 1 {
		if n.o.members != nil {
			// A partition given up to balance the load is handed over once its posts in flight
			// are recorded: otherwise the next leader posts them again.
			opts = append(opts, leader.WithMembership(n.o.members), leader.WithGrace(n.o.callTimeout+handOverRecord))
		}
		if n.o.reg != nil {
			opts = append(opts, leader.WithRegisterer(n.o.reg))
		}
		return leader.NewShards(n.o.parts, n.o.partElectors, n.pool, n.fence, "notify:"+n.name, n.lead, opts...)
	}
	el := n.o.elector
	if el == nil { // WithPartitions(1, ...): partition 0's election
		var err error
		if el, err = n.o.partElectors(0); err != nil {
			return nil, fmt.Errorf("elector of partition 0: %w", err)
		}
	}
	return leader.New(el, n.pool, n.fence, "notify:"+n.name, n.lead, opts...)
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
	flights := n.openTerm(t.Partition())
	defer n.closeTerm(t.Partition(), flights)
	if err := n.loadMarks(ctx, flights); err != nil && ctx.Err() == nil {
		log.WarnContext(ctx, "notify: the due marks were not read; this term's first scans start at the oldest notification", slog.Any("err", err))
	}

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
			deliveries.Go(func() { n.work(gctx, t, rcv, f, results) })
		}
	}
	g.Go(func() error {
		defer func() {
			deliveries.Wait()
			close(results) // the recorder records what is left, then ends
			<-recorded
		}()
		return n.dispatchLoop(gctx, t, w, flights, log)
	})
	err := g.Wait()
	n.fails.FlushAll() // the failure lines held back, at the end of the term
	return err
}

// openTerm returns the flights of a term of partition part: one for each receiver of the
// partition. Partition 0's leader sets the due gauge (countDue, a cron job of its term): its term
// counts in the gauge until [Notifier.closeTerm].
func (n *Notifier) openTerm(part int) map[string]*flight {
	flights := map[string]*flight{}
	n.mu.Lock()
	for name := range n.receivers {
		if placement.Partition(name, n.o.parts) == part {
			flights[name] = &flight{queue: make(chan due, n.o.batch), low: n.o.batch / 2, taken: map[uuid.UUID]time.Time{}}
		}
	}
	n.mu.Unlock()
	if part == 0 {
		n.metrics.term(true)
	}
	return flights
}

// closeTerm ends the term openTerm opened: the next term starts with every circuit closed.
func (n *Notifier) closeTerm(part int, flights map[string]*flight) {
	if part == 0 {
		n.metrics.term(false)
	}
	n.mu.Lock()
	for name, f := range flights {
		if f.shownOpen {
			f.shownOpen = false
			n.metrics.circuitClosed(name)
		}
	}
	n.mu.Unlock()
}

// work is one of rcv's workers: it attempts the notifications queued in f and hands their
// results to the recorder until ctx ends or the term yields.
func (n *Notifier) work(ctx context.Context, t *leader.Term, rcv Receiver, f *flight, results chan<- result) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Yield():
			return
		case d := <-f.queue:
			if t.Yielding() {
				return // taken, not posted: still due for the next leader
			}
			r := n.attempt(ctx, rcv, f, d)
			n.done(f)
			results <- r
		}
	}
}

// dispatchLoop fills the flights each time it is woken, until ctx ends or the term yields (nil;
// the posts in flight then finish and are recorded), or the fence refuses this leader (an error
// wrapping lock.ErrFenced). Other failures are logged and retried at the next wake-up.
//
// Enqueue wakes nobody (a NOTIFY would serialize the enqueuers' commits): a notification whose
// enqueuer does not Deliver it is taken at the next tick, or sooner while anything is pending —
// after each tick, and as long as its receivers have pending notifications, the loop looks every
// pendingPoll for notifications nobody claimed (pollPending).
func (n *Notifier) dispatchLoop(ctx context.Context, t *leader.Term, w *waker, flights map[string]*flight, log *slog.Logger) error {
	poll := time.NewTimer(n.pendingPoll())
	defer poll.Stop()
	names := make([]string, 0, len(flights))
	for name := range flights {
		names = append(names, name)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.Yield():
			return nil // lead's deferred wait lets the posts in flight finish and be recorded
		case <-t.Wake(): // the tick, a NOTIFY, the start of the term: more may be due
			w.gen.Add(1)
			poll.Reset(n.pendingPoll())
		case <-poll.C:
			pending, unclaimed, err := n.pollPending(ctx, names, flights)
			if err != nil || !pending {
				continue // the next tick looks again
			}
			poll.Reset(n.pendingPoll())
			if len(unclaimed) == 0 {
				continue
			}
			n.mu.Lock()
			for _, name := range unclaimed {
				flights[name].dry = 0 // take for it again
			}
			n.mu.Unlock()
		case <-w.ch:
		}
		if err := n.dispatch(ctx, w, flights); err != nil {
			if errors.Is(err, lock.ErrFenced) {
				return err
			}
			if ctx.Err() == nil { // once per interval with a count, while the database is away
				n.fails.Log(ctx, log, "take", slog.LevelWarn, "notify: taking due notifications failed; retrying at the next tick", slog.Any("err", err))
			}
		}
		if err := n.saveMarks(ctx, flights); err != nil && ctx.Err() == nil {
			n.fails.Log(ctx, log, "marks", slog.LevelWarn, "notify: storing the due marks failed; retrying at the next tick", slog.Any("err", err))
		}
		n.fails.Flush()
	}
}

// pendingPoll is how often the leader looks for notifications nobody claimed while its receivers
// have pending ones: a tenth of a second, or the tick when that is shorter.
func (n *Notifier) pendingPoll() time.Duration {
	const poll = 100 * time.Millisecond
	if every, ok := strings.CutPrefix(n.o.tick, "@every "); ok {
		if d, err := time.ParseDuration(strings.TrimSpace(every)); err == nil && d < poll {
			return d
		}
	}
	return poll
}

// pollPending reports whether any of receivers has notifications due in its window (due.go:
// from its watermark to now; delivered or not: traffic) or a pending one due last, and which have
// due ones nobody has claimed (enqueued and not Delivered, or not yet; among the first pollLimit
// pending ones). It moves the watermarks as a take does. One statement on the due index, one pass
// over each window; it writes nothing.
//
// "Pending later" looks at the notification due last only: a walk down to the first pending one
// would read every delivered notification of the claims' leases (Do's rows are due a lease after
// their insert) each time traffic pauses.
// pollLimit bounds the pending notifications pollPending reads of a receiver's window.
const pollLimit = 1000

func (n *Notifier) pollPending(ctx context.Context, receivers []string, flights map[string]*flight) (pending bool, unclaimed []string, err error) {
	froms := make([]time.Time, len(receivers))
	oldest := make([]time.Time, len(receivers)) // of each, the earliest due time taken and unrecorded
	n.mu.Lock()
	for i, name := range receivers {
		froms[i] = flights[name].due.at
		for _, at := range flights[name].taken {
			if oldest[i].IsZero() || at.Before(oldest[i]) {
				oldest[i] = at
			}
		}
	}
	n.mu.Unlock()
	rows, err := n.pool.Query(ctx, `with s as (select `+snapColumns(n.table)+`)
select s.at, s.writers, r.name,
	case when exists (select from `+n.table+` where receiver = r.name and next_attempt_at >= r.since and next_attempt_at <= s.at)
		then true -- else whether the notification due last is pending (a retry, a post in flight)
		else coalesce((select status = 'pending' from `+n.table+` where receiver = r.name and next_attempt_at > s.at
			and next_attempt_at < 'infinity' order by next_attempt_at desc limit 1), false) end,
	p.first, coalesce(p.free, false)
from s, unnest($1::text[], $2::timestamptz[]) with ordinality as r(name, since, i)
left join lateral (select min(at) as first, bool_or(not claimed) as free from (select next_attempt_at as at, claimed from `+n.table+`
	where status = 'pending' and receiver = r.name and next_attempt_at >= r.since and next_attempt_at <= s.at
	order by next_attempt_at limit $3) q) p on true
order by r.i`, receivers, froms, pollLimit)
	if err != nil {
		return false, nil, err
	}
	var (
		sn         snap
		name       string
		seen, free bool
		first      pgtype.Timestamptz
		i          int
	)
	_, err = pgx.ForEachRow(rows, []any{&sn.at, &sn.writers, &name, &seen, &first, &free}, func() error {
		pending = pending || seen
		if free {
			unclaimed = append(unclaimed, name)
		}
		flights[name].due.advance(sn, timeOf(first), oldest[i])
		i++
		return nil
	})
	return pending, unclaimed, err
}
