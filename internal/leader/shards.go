package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/placement"
	"github.com/txkit/txkit/lock"
)

// ElectorFunc returns this instance's candidate in the election of partition p (0 ≤ p < parts),
// such as zklock.NewElector(sess, PartitionName(base, p), id). Every instance must use the same
// election per partition, and each partition an election of its own (one Election value per
// partition: an Election shared by two partitions would lead both together). The candidate id
// should name the instance: a [Membership] built on an Inspector counts instances by it.
type ElectorFunc func(p int) (lock.Elector, error)

// Membership counts the live instances that share a [Shards]' partitions, so that each can
// take its share: ceil(parts/N). [ContenderMembership] counts the candidates of the partitions'
// elections (ZooKeeper, whose elections list their waiters), [Heartbeat] rows in PostgreSQL. A
// Shards asks only while it can campaign; a Membership should count another instance only once
// a dead instance it may replace would no longer be counted (both of these do). A Membership
// that also has a Run(ctx context.Context) error method (a heartbeat) is run by [Shards.Run]
// alongside the partitions.
type Membership interface {
	// Members returns how many instances are live now (at least 1: the caller). It blocks for
	// the round trips, bounded by ctx.
	Members(ctx context.Context) (int, error)
}

// WithMembership sets how a [Shards] counts the instances sharing its partitions (default: none,
// so each instance counts itself alone and leads whatever partitions it wins: no balancing).
// Ignored by a [Job].
func WithMembership(m Membership) Option { return func(o *options) { o.members = m } }

// WithBalanceEvery sets how often a [Shards] counts the instances and gives up the partitions it
// leads beyond its share (default 1 s). Ignored by a [Job].
func WithBalanceEvery(d time.Duration) Option { return func(o *options) { o.balance = d } }

// WithGrace makes a [Shards] give a partition up gracefully when it balances the load: it closes
// the term's [Term.Yield] and lets the work finish what it has in hand, ending the term's ctx
// only if the work has not returned within d; it resigns the partition once the term has ended.
// Default 0: the term's ctx ends at once. A work that keeps state it must write before another
// instance takes over honours Yield and sets a grace: the outbox relay (its publishes acknowledged
// but not yet recorded, which the next leader would publish again) and the notifier (its posts in
// flight). Ignored by a [Job].
func WithGrace(d time.Duration) Option { return func(o *options) { o.grace = d } }

// WithRegisterer makes a [Shards] report on reg, every 5 [WithBalanceEvery] intervals, the gauge
// txkit_leader_partitions_unled{resource=<fence resource>}: the partitions whose election has no
// leader, asking each election it does not lead (one round trip per partition). Every instance
// reports what it sees; alert on the max over the instances. Default: none, and no probing.
// Ignored by a [Job].
func WithRegisterer(reg prometheus.Registerer) Option { return func(o *options) { o.reg = reg } }

// ContenderMembership returns a [Membership] that counts the distinct candidate ids among the
// contenders (holders and waiters) of the locks called names, read with insp: for ZooKeeper,
// insp = sess.Inspector() and names the partitions' election paths. Every instance of a
// [Shards] campaigns in every partition, so any one election lists them all; reading all of them
// also counts an instance that has just resigned one. A dead instance drops out when its
// ZooKeeper session expires, which is also when its partitions move; so that a newcomer is never
// counted beside a dead instance it replaces, an instance counts once its oldest node is two
// session timeouts old (by this machine's clock against the node's creation time; the timeout
// is insp's session's). Contenders without an id are not counted. A backend that does not list
// its waiters (PostgreSQL leases, Redis) would only count the leaders: use a heartbeat
// Membership there.
func ContenderMembership(insp lock.Inspector, names ...string) Membership {
	m := contenderMembership{insp: insp, names: names}
	if t, ok := insp.(interface{ Timeout() time.Duration }); ok {
		m.timeout = t.Timeout()
	}
	return m
}

type contenderMembership struct {
	insp    lock.Inspector
	names   []string
	timeout time.Duration // the session timeout; 0 when insp does not tell
}

func (m contenderMembership) Members(ctx context.Context) (int, error) {
	since := map[string]time.Time{} // each id's oldest node; zero when the backend does not tell
	for _, n := range m.names {
		cs, _, err := m.insp.Contenders(ctx, n)
		if err != nil {
			return 0, fmt.Errorf("leader: contenders of %s: %w", n, err)
		}
		for _, c := range cs {
			if s, ok := since[c.ID]; c.ID != "" && (!ok || c.Since.Before(s)) {
				since[c.ID] = c.Since
			}
		}
	}
	settled := time.Now().Add(-2 * m.timeout)
	n := 0
	for _, s := range since {
		if !s.After(settled) {
			n++
		}
	}
	return max(1, n), nil
}

// lease returns how long a dead instance keeps its partitions: the session timeout.
func (m contenderMembership) lease() time.Duration { return m.timeout }

// ledTerm is a term of a partition this instance leads, as its Shards ends it.
type ledTerm struct {
	end    context.CancelCauseFunc
	yield  chan struct{} // closed when the partition is given up with a grace
	grace  *time.Timer   // ends the term with errResigned at the grace's end; nil before
	yields bool          // yield is closed
	forced bool          // taken beyond the share, the partition having been free too long
}

// giveUp gives the term's partition up to balance the load: at once without a grace, else by
// closing Yield and ending the term at the grace's end. s.mu is held.
func (s *Shards) giveUp(t *ledTerm) {
	if s.o.grace <= 0 {
		t.end(errResigned)
		return
	}
	if t.yields {
		return
	}
	t.yields = true
	close(t.yield)
	t.grace = time.AfterFunc(s.o.grace, func() { t.end(errResigned) })
}

// errResigned ends a term the instance gives up to balance the partitions.
var errResigned = errors.New("leader: partition given up to balance the load")

// Shards runs one job split into partitions: partition p has its own election (from the
// [ElectorFunc]) and its own fence resource, PartitionName(resource, p), and while this instance
// leads it the [Work] runs under that partition's term ([Term.Partition], [Term.Token]), exactly
// as a [Job] runs it (fence check on taking the lead, wake-ups, pause when fenced).
//
// Every instance campaigns in every partition. With a [Membership] ([WithMembership]) each
// instance leads at most ceil(parts/N) partitions, N the live instances: a partition won beyond
// that share is resigned at once (before its fence check), and every [WithBalanceEvery] the
// instance counts again and resigns the partitions it leads beyond its share (the highest
// numbered) — at once, or with [WithGrace] once the work has returned on [Term.Yield] — then
// waits [WithPause] before campaigning for them again, so a waiting instance takes them. When an
// instance dies its partitions go to the next candidates in their elections as soon as the
// backend ends its holds (the ZooKeeper session timeout).
//
// The live instances are those able to campaign: an instance whose campaigns fail neither counts
// nor refreshes its heartbeat. A newcomer counts for the others only once a dead instance it may
// replace no longer would (see [Heartbeat], [ContenderMembership]), so nobody resigns a partition
// for it while a dead one still counts. A partition this instance has won and refused for 3
// leases ([Heartbeat]'s TTL, the session timeout; 10 s without either), nobody else having held
// it, is taken whatever the share and kept until the count grows. [WithRegisterer] reports the
// partitions nobody leads.
//
// [WithChannel] opens one listening connection per instance, which wakes every term it leads;
// [WithSchedule] wakes each term; [WithCron] jobs run only on the leader of partition 0, with its
// term's context and token.
//
// Shards is safe for concurrent use by multiple goroutines; its owner must not call Run twice at
// once.
type Shards struct {
	jobs  []*Job
	els   []lock.Elector
	base  *Job // the listener's
	o     options
	terms *termSet

	mu  sync.Mutex
	led map[int]*ledTerm // partitions led now, and how to end their terms
	n   int              // instances, as last counted

	resource  string        // the fence resource of the job: the heartbeat's group, the metric's label
	freeAfter time.Duration // a partition free this long is taken whatever the share
	failedAt  atomic.Int64  // unix nanoseconds of the last failed campaign; 0: none
	probes    atomic.Int64  // Leader probes of the backend, to rotate over the partitions
	unled     prometheus.Gauge

	running atomic.Bool
}

// freeLeases is k in "a partition free for k leases is taken whatever the share", and
// defaultLease the lease assumed when the Membership does not tell its own.
const (
	freeLeases   = 3
	defaultLease = 10 * time.Second
)

// campaignRetry is the pause after a failed campaign.
const campaignRetry = 200 * time.Millisecond

// NewShards returns a [Shards] of parts partitions (1 ≤ parts ≤ [placement.MaxPartitions]) of
// work, the elections from electors, fenced by f on the resources PartitionName(resource, p). It
// calls electors once per partition and touches neither the database nor the lock backend. It
// returns an error wrapping [ErrInvalidOption] when an argument, an option or an elector is
// unusable.
func NewShards(parts int, electors ElectorFunc, pool *pgxpool.Pool, f *fence.Fence, resource string, work Work, opts ...Option) (*Shards, error) {
	if parts < 1 || parts > placement.MaxPartitions {
		return nil, fmt.Errorf("leader: %d partitions: not in 1..%d: %w", parts, placement.MaxPartitions, ErrInvalidOption)
	}
	if electors == nil {
		return nil, fmt.Errorf("leader: nil elector func: %w", ErrInvalidOption)
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if pgutil.IsNil(o.reg) { // a nil *prometheus.Registry, say
		o.reg = nil
	}
	base, err := New(&nopElector{}, pool, f, PartitionName(resource, parts-1), work, opts...)
	if err != nil {
		return nil, err
	}
	lease := defaultLease
	if l, ok := o.members.(interface{ lease() time.Duration }); ok && l.lease() > 0 {
		lease = l.lease()
	}
	unled, err := obs.Register(o.reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: obs.Namespace,
		Subsystem: "leader", Name: "partitions_unled",
		Help: "Partitions of a sharded job that no instance leads, as this instance sees their elections (take the max over instances)."},
		[]string{"resource"}))
	if err != nil {
		return nil, fmt.Errorf("leader: %w: %w", err, ErrInvalidOption)
	}
	s := &Shards{base: base, o: o, terms: &termSet{}, led: map[int]*ledTerm{}, n: 1, resource: resource,
		freeAfter: freeLeases * lease, unled: unled.WithLabelValues(resource)}
	part := o
	part.channel = "" // one listener for the instance (base's), not one per partition
	for p := range parts {
		el, err := electors(p)
		if err != nil {
			return nil, fmt.Errorf("leader: elector of partition %d: %w: %w", p, err, ErrInvalidOption)
		}
		if el == nil {
			return nil, fmt.Errorf("leader: elector of partition %d: nil: %w", p, ErrInvalidOption)
		}
		po := part
		po.log = o.log.With(slog.Int("partition", p))
		if p > 0 {
			po.crons = nil
		}
		s.jobs = append(s.jobs, &Job{el: el, pool: pool, fence: f, resource: PartitionName(resource, p), work: work,
			o: po, part: p, terms: s.terms, fails: obs.NewLogLimiter(obs.LogInterval, nil)})
		s.els = append(s.els, el)
	}
	return s, nil
}

// Partitions returns the number of partitions.
func (s *Shards) Partitions() int { return len(s.jobs) }

// Led returns the partitions this instance leads now, in order.
func (s *Shards) Led() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int, 0, len(s.led))
	for p := range s.led {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Fenced returns how many terms of the partitions were fenced out.
func (s *Shards) Fenced() int64 {
	var n int64
	for _, j := range s.jobs {
		n += j.Fenced()
	}
	return n
}

// Run campaigns in every partition and runs the work for each partition it leads, balancing as
// the type's doc says, until ctx ends; then it resigns everything and returns nil once every
// goroutine it started has exited. ctx scopes the whole work.
//
// Run returns an error wrapping [lock.ErrClosed] when an elector's session is closed, one naming
// Fence.Migrate when the fence's table does not exist, and the work's error when it returns one
// not wrapping [lock.ErrFenced] (the other partitions are stopped then). Other failures are
// logged and retried. A second Run while one runs returns an error wrapping [ErrInvalidOption].
func (s *Shards) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("leader: %s: Run called twice: %w", s.o.name, ErrInvalidOption)
	}
	defer s.running.Store(false)
	g, gctx := errgroup.WithContext(ctx)
	if r, ok := s.o.members.(interface{ Run(context.Context) error }); ok {
		g.Go(func() error { return r.Run(withGroup(gctx, s.resource)) })
	}
	if s.o.reg != nil {
		g.Go(func() error {
			s.unledLoop(gctx)
			return nil
		})
	}
	if s.o.members != nil {
		g.Go(func() error {
			s.balanceLoop(gctx)
			return nil
		})
	}
	if s.o.channel != "" {
		g.Go(func() error {
			s.base.listen(gctx, s.terms.pokeAll, s.o.log)
			return nil
		})
	}
	for p := range s.jobs {
		g.Go(func() error { return s.runPartition(gctx, p) })
	}
	return g.Wait()
}

// runPartition campaigns for partition p and leads it while it may, until ctx ends: the loop of
// lock.Election.RunWhileLeader, with the share check before each term and a pause after giving a
// partition up.
func (s *Shards) runPartition(ctx context.Context, p int) error {
	j, el := s.jobs[p], s.els[p]
	// freeSince is when this instance first refused p in a row of refusals each won at once
	// (nobody held p in between): p has been free since then, as far as it can tell.
	var freeSince time.Time
	for ctx.Err() == nil {
		start := time.Now()
		l, err := el.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, lock.ErrClosed) {
				return fmt.Errorf("%s: partition %d: %w", s.o.name, p, err)
			}
			s.failedAt.Store(time.Now().UnixNano())
			j.o.log.Warn(s.o.name+": campaign failed; retrying", slog.Any("err", err))
			pause(ctx, campaignRetry)
			continue
		}
		won := time.Now()
		if won.Sub(start) > s.o.pause {
			freeSince = time.Time{} // someone held p meanwhile
		}
		tctx, end := context.WithCancelCause(l.Context())
		stop := context.AfterFunc(ctx, func() { end(context.Cause(ctx)) })
		var werr error
		forced := !freeSince.IsZero() && won.Sub(freeSince) >= s.freeAfter
		lt := &ledTerm{end: end, yield: make(chan struct{}), forced: forced}
		gaveUp := !s.take(ctx, p, lt)
		switch {
		case !gaveUp:
			if forced {
				j.o.log.Warn(s.o.name+": partition free too long: taken beyond the share",
					slog.Duration("free", won.Sub(freeSince).Round(time.Millisecond)))
			}
			freeSince = time.Time{}
		case freeSince.IsZero():
			freeSince = won
		}
		if !gaveUp {
			werr = j.leadYielding(tctx, l, lt.yield)
			gaveUp = s.drop(p) || errors.Is(context.Cause(tctx), errResigned)
		}
		stop()
		end(nil)
		lost := l.Err()
		if err := l.Resign(context.WithoutCancel(ctx)); err != nil {
			j.o.log.Warn(s.o.name+": resign failed", slog.Any("err", err))
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case lost != nil:
			j.o.log.Warn(s.o.name+": leadership lost; campaigning again", slog.Any("err", lost))
		case werr != nil:
			return fmt.Errorf("%s: partition %d: %w", s.o.name, p, werr)
		case gaveUp:
			j.o.log.Info(s.o.name + ": partition given up to balance the load")
			pause(ctx, s.o.pause) // let a waiting instance take it
		}
	}
	return nil
}

// take reserves partition p for term t, unless this instance already leads its share and t is
// not forced; it counts the instances again before refusing, so that a partition freed by a dead
// instance is not refused on an old count.
func (s *Shards) take(ctx context.Context, p int, t *ledTerm) bool {
	if s.o.members != nil && s.full() && !t.forced {
		s.count(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held() >= s.share() && !t.forced {
		return false
	}
	s.led[p] = t
	return true
}

// drop ends p's term as a led partition, and reports whether it was being given up with a grace
// (its work returned on Yield).
func (s *Shards) drop(p int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.led[p]
	delete(s.led, p)
	if t == nil || !t.yields {
		return false
	}
	t.grace.Stop()
	return true
}

func (s *Shards) full() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held() >= s.share()
}

// held returns how many partitions count against the share: those led, but the forced ones.
// s.mu is held.
func (s *Shards) held() int {
	n := 0
	for _, t := range s.led {
		if !t.forced {
			n++
		}
	}
	return n
}

// share returns ceil(parts/N). s.mu is held.
func (s *Shards) share() int { return (len(s.jobs) + s.n - 1) / s.n }

// campaigning reports whether this instance can campaign: no campaign of its partitions has
// failed within two balance intervals (and a retry), and the lock backend answers its elections
// (a partition's Leader, one round trip): backends that wait through their failures inside
// Campaign (PostgreSQL leases, Redis) never return them.
func (s *Shards) campaigning(ctx context.Context) bool {
	if at := s.failedAt.Load(); at != 0 && time.Since(time.Unix(0, at)) <= 2*s.o.balance+campaignRetry {
		return false
	}
	p := int(s.probes.Add(1)) % len(s.els)
	if _, err := s.els[p].Leader(ctx); err != nil && !errors.Is(err, lock.ErrNoLeader) {
		if ctx.Err() == nil {
			s.o.log.Warn(s.o.name+": the lock backend does not answer: not counting as a member",
				slog.Int("partition", p), slog.Any("err", err))
		}
		return false
	}
	return true
}

// count asks the membership how many instances there are; a failure keeps the last count. While
// this instance cannot campaign (see campaigning) it does not count — counting refreshes a
// heartbeat, and it must not be counted for a share it would leave unled — and it withdraws
// from a membership that can. A count that grows ends the forced terms' exemption from the
// balance: the new member may take them.
func (s *Shards) count(ctx context.Context) {
	cctx, cancel := context.WithTimeout(withGroup(ctx, s.resource), 5*time.Second)
	defer cancel()
	if !s.campaigning(cctx) {
		if w, ok := s.o.members.(interface{ withdraw(context.Context) error }); ok {
			if err := w.withdraw(cctx); err != nil && ctx.Err() == nil {
				s.o.log.Warn(s.o.name+": could not leave the membership", slog.Any("err", err))
			}
		}
		return
	}
	n, err := s.o.members.Members(cctx)
	if err != nil {
		if ctx.Err() == nil {
			s.o.log.Warn(s.o.name+": could not count the instances; keeping the last count", slog.Any("err", err))
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n > s.n {
		for _, t := range s.led {
			t.forced = false
		}
	}
	s.n = max(1, n)
}

// balanceLoop counts the instances every balance interval and gives up the partitions led beyond
// this instance's share, the highest numbered first.
func (s *Shards) balanceLoop(ctx context.Context) {
	t := time.NewTicker(s.o.balance)
	defer t.Stop()
	for {
		s.count(ctx)
		s.mu.Lock()
		var led []int
		for p := range s.led {
			led = append(led, p)
		}
		slices.Sort(led)
		// A forced partition stays, beside the share: nobody else took it while it was free.
		led = slices.DeleteFunc(led, func(p int) bool { return s.led[p].forced })
		for _, p := range led[min(len(led), s.share()):] {
			s.giveUp(s.led[p])
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// unledLoop sets the unled gauge every 5 balance intervals: the partitions whose election has no
// leader, asked of each election this instance does not lead.
func (s *Shards) unledLoop(ctx context.Context) {
	t := time.NewTicker(5 * s.o.balance)
	defer t.Stop()
	for {
		led := s.Led()
		n, ok := 0, true
		for p, el := range s.els {
			if slices.Contains(led, p) {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := el.Leader(cctx)
			cancel()
			switch {
			case errors.Is(err, lock.ErrNoLeader):
				n++
			case err != nil:
				ok = false
			}
		}
		if ok && ctx.Err() == nil {
			s.unled.Set(float64(n))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// termSet holds the terms an instance's partitions lead now, for the shared listener.
type termSet struct {
	mu sync.Mutex
	ts map[*Term]bool
}

func (ts *termSet) add(t *Term) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.ts == nil {
		ts.ts = map[*Term]bool{}
	}
	ts.ts[t] = true
}

func (ts *termSet) remove(t *Term) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	delete(ts.ts, t)
}

func (ts *termSet) pokeAll() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for t := range ts.ts {
		t.Poke()
	}
}

// nopElector stands in for the elector of the job NewShards builds to validate its arguments and
// to run the shared listener; it never campaigns.
type nopElector struct{}

func (*nopElector) ID() string { return "" }
func (*nopElector) Campaign(ctx context.Context) (lock.Leadership, error) {
	return nil, errors.New("leader: not an election")
}
func (*nopElector) Leader(ctx context.Context) (string, error) { return "", lock.ErrNoLeader }
func (*nopElector) RunWhileLeader(ctx context.Context, fn func(ctx context.Context, l lock.Leadership) error) error {
	return errors.New("leader: not an election")
}

// MembersFunc adapts a function to [Membership].
type MembersFunc func(ctx context.Context) (int, error)

// Members calls f.
func (f MembersFunc) Members(ctx context.Context) (int, error) { return f(ctx) }
