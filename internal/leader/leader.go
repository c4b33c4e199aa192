// Package leader is the fenced leader job that txkit's background components share: the outbox
// relay, the notifier and the coordinators' recovery each describe their work and hand it to a
// [Job], which does the rest the same way for all of them.
//
// [Job.Run] campaigns with a [lock.Elector]. On taking the lead it passes the [fence.Fence] with
// the leadership's token (so a candidate that a newer leader has already fenced out does nothing),
// then, for as long as the leadership lasts, it runs the work function under the leadership's
// context and wakes it ([Term.Wake]) once at once — work may have piled up while nobody led — then
// on a robfig/cron schedule ([WithSchedule], read by pgutil.CronParser) and for every
// LISTEN/NOTIFY notification on a channel ([WithChannel], on a dedicated connection). Extra jobs
// run on their own cron schedules ([WithCron]). When a write of the term is refused by the fence
// (an error wrapping [lock.ErrFenced]), the term ends, the job waits [WithPause] — so a fenced
// candidate does not spin — and campaigns again.
//
//	job, err := leader.New(el, pool, f, "outbox:orders", func(ctx context.Context, t *leader.Term) error {
//		for {
//			select {
//			case <-ctx.Done():
//				return nil
//			case <-t.Wake():
//			}
//			if err := drain(ctx, t.Token()); errors.Is(err, lock.ErrFenced) {
//				return err // the job steps down, pauses and campaigns again
//			}
//		}
//	}, leader.WithSchedule("@every 1s"), leader.WithChannel("orders"), leader.WithName("outbox: relay"))
//	if err != nil {
//		return err
//	}
//	return job.Run(ctx) // blocks until ctx ends
//
// [Shards] splits a job into P partitions, each a [Job] with its own election and fence resource,
// its terms told their part of the data by [Term.Partition] (keys hashing to p: placement.Partition in
// Go, placement.PartitionSQL in PostgreSQL); a [Membership] counting the live instances lets each lead about
// P/N of them. The number of partitions is stored with the tables (placement.StorePartitions) and another
// is refused. The balancing rules, takeover times and their tests: docs/coordinators.md
// ("Partitioned recovery").
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/lock"
)

// ErrInvalidOption: [New] was given an argument or option it cannot use.
var ErrInvalidOption = errors.New("leader: invalid option")

// Work is what the leader does while it leads. It runs once per term, under a context that ends
// with the leadership (or with [Job.Run]'s ctx), and must return soon after that context ends.
// It returns nil then; an error wrapping [lock.ErrFenced] ends the term (the job pauses and
// campaigns again); any other error ends the term and makes [Job.Run] resign and return it. A
// nil return while still leading ends the term too: the job resigns and campaigns again.
type Work func(ctx context.Context, t *Term) error

// CronFunc is a job run on its own schedule while the leader leads ([WithCron]), with the term's
// context and token.
type CronFunc func(ctx context.Context, tok lock.Token) error

// Term is one leadership term as [Work] sees it. It is safe for concurrent use.
type Term struct {
	tok   lock.Token
	part  int
	log   *slog.Logger
	wake  chan struct{}
	yield <-chan struct{}
}

// Token returns the term's fencing token: pass it to the fence with every write.
func (t *Term) Token() lock.Token { return t.tok }

// Partition returns the partition the term leads: 0 for a [Job], the partition's number
// (0 ≤ p < parts) for a [Shards].
func (t *Term) Partition() int { return t.part }

// Log returns the job's logger with the term's token.
func (t *Term) Log() *slog.Logger { return t.log }

// Wake returns the channel that receives a value when there may be work: once when the term
// begins, then on the schedule, on every notification and every [Term.Poke]. Wake-ups that arrive
// while nobody receives are folded into one.
func (t *Term) Wake() <-chan struct{} { return t.wake }

// Yield returns a channel that is closed when the instance gives the term's partition up to
// balance the load and its [Shards] has a grace ([WithGrace]): the work should finish what it
// has in hand — record what it did, start nothing new — and return nil. Its ctx ends at the
// grace's end if it has not. For a [Job], and for a Shards without a grace, it is never closed.
func (t *Term) Yield() <-chan struct{} { return t.yield }

// Yielding reports whether [Term.Yield] is closed.
func (t *Term) Yielding() bool {
	select {
	case <-t.yield:
		return true
	default:
		return false
	}
}

// Poke sends a wake-up on [Term.Wake], or does nothing when one is already pending. It never
// blocks.
func (t *Term) Poke() {
	select {
	case t.wake <- struct{}{}:
	default: // a wake-up is pending: this one is folded into it
	}
}

// Option configures a [Job]. Options are applied in order by [New], which validates the result.
type Option func(*options)

type options struct {
	name     string
	log      *slog.Logger
	schedule string
	channel  string
	crons    []cronJob
	pause    time.Duration
	members  Membership            // Shards only (WithMembership)
	balance  time.Duration         // Shards only (WithBalanceEvery)
	grace    time.Duration         // Shards only (WithGrace)
	reg      prometheus.Registerer // Shards only (WithRegisterer)
}

type cronJob struct {
	name, spec string
	fn         CronFunc
}

func defaultOptions() options {
	return options{name: "leader", log: slog.New(slog.DiscardHandler), pause: time.Second, balance: time.Second}
}

// WithName sets the prefix of the job's log messages (default "leader"), such as "outbox: relay":
// "outbox: relay leads".
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithLogger sets the logger (default: discard). The job logs taking and losing the lead at info
// level, being fenced out and failures at warn, and the cron scheduler's routine at debug.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = obs.Logger(l) } }

// WithSchedule sets the robfig/cron spec of the tick that wakes the work (default: none, only the
// first wake-up of each term, the notifications and [Term.Poke]).
func WithSchedule(spec string) Option { return func(o *options) { o.schedule = spec } }

// WithChannel sets a LISTEN/NOTIFY channel: while it leads, the job listens on it on a connection
// of its own (opened with the pool's configuration) and wakes the work for every notification,
// and once more each time the connection is opened again after a failure (notifications sent
// while nobody listened are lost). Default: none.
func WithChannel(name string) Option { return func(o *options) { o.channel = name } }

// WithCron adds a job run on the cron spec while the leader leads, with the term's context and
// token; a run still going when the next is due is skipped. An error is logged and the job runs
// again at its next time; one wrapping [lock.ErrFenced] ends the term as a fenced work does.
func WithCron(name, spec string, fn CronFunc) Option {
	return func(o *options) { o.crons = append(o.crons, cronJob{name: name, spec: spec, fn: fn}) }
}

// WithPause sets how long the job waits after being fenced out before it campaigns again, and
// before it retries a failed fence check or a failed listening connection (default 1 s).
func WithPause(d time.Duration) Option { return func(o *options) { o.pause = d } }

func (o options) validate() error {
	switch {
	case o.log == nil:
		return fmt.Errorf("leader: nil logger: %w", ErrInvalidOption)
	case o.pause <= 0:
		return fmt.Errorf("leader: pause %v: not positive: %w", o.pause, ErrInvalidOption)
	case o.balance <= 0:
		return fmt.Errorf("leader: balance interval %v: not positive: %w", o.balance, ErrInvalidOption)
	case o.grace < 0:
		return fmt.Errorf("leader: grace %v: negative: %w", o.grace, ErrInvalidOption)
	}
	if o.schedule != "" {
		if err := pgutil.CheckCron(o.schedule); err != nil {
			return fmt.Errorf("leader: schedule %q: %w: %w", o.schedule, err, ErrInvalidOption)
		}
	}
	if o.channel != "" {
		if err := pgutil.CheckText(o.channel, 63); err != nil {
			return fmt.Errorf("leader: channel %q: %w: %w", o.channel, err, ErrInvalidOption)
		}
	}
	for _, c := range o.crons {
		if c.fn == nil {
			return fmt.Errorf("leader: job %s: nil func: %w", c.name, ErrInvalidOption)
		}
		if err := pgutil.CheckCron(c.spec); err != nil {
			return fmt.Errorf("leader: job %s: schedule %q: %w: %w", c.name, c.spec, err, ErrInvalidOption)
		}
	}
	return nil
}

// Job runs [Work] on the elected leader only, fenced (see the package overview). It is safe for
// concurrent use by multiple goroutines; its owner must not call Run twice at once.
type Job struct {
	el       lock.Elector
	pool     *pgxpool.Pool
	fence    *fence.Fence
	resource string
	work     Work
	o        options
	fenced   atomic.Int64
	fails    *obs.LogLimiter // the lines of failures retried after a pause: one per obs.LogInterval

	// Set by NewShards for a partition's job: its number, and the terms the shared listener pokes.
	part  int
	terms *termSet
}

// New returns a job that runs work while el leads, passing f with the resource's name on taking
// the lead. pool is used for that check and, with [WithChannel], its configuration for the
// listening connection. New does not touch the database or ZooKeeper. It returns an error wrapping
// [ErrInvalidOption] when an argument or option is unusable.
func New(el lock.Elector, pool *pgxpool.Pool, f *fence.Fence, resource string, work Work, opts ...Option) (*Job, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case el == nil:
		return nil, fmt.Errorf("leader: nil elector: %w", ErrInvalidOption)
	case pool == nil:
		return nil, fmt.Errorf("leader: nil pool: %w", ErrInvalidOption)
	case f == nil:
		return nil, fmt.Errorf("leader: nil fence: %w", ErrInvalidOption)
	case work == nil:
		return nil, fmt.Errorf("leader: nil work: %w", ErrInvalidOption)
	}
	if err := pgutil.CheckText(resource, fence.MaxResourceLen); err != nil {
		return nil, fmt.Errorf("leader: resource %q: %w: %w", resource, err, ErrInvalidOption)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	return &Job{el: el, pool: pool, fence: f, resource: resource, work: work, o: o, fails: obs.NewLogLimiter(obs.LogInterval, nil)}, nil
}

// Fenced returns how many times a term of the job was fenced out: refused on taking the lead, or
// ended by a work or cron job whose write the fence refused.
func (j *Job) Fenced() int64 { return j.fenced.Load() }

// Run campaigns and runs the work while it leads, until ctx ends; then it resigns and returns nil
// once every goroutine it started has exited. When the leadership is lost the term's context is
// cancelled at once and Run campaigns again. ctx scopes the whole work.
//
// Run returns an error wrapping [lock.ErrClosed] when the elector's session is closed, one naming
// Fence.Migrate when the fence's table does not exist, and the work's error when it returns one
// not wrapping [lock.ErrFenced]. Other failures (of the database, of the listening connection, of
// a cron job) are logged and retried.
func (j *Job) Run(ctx context.Context) error {
	return j.el.RunWhileLeader(ctx, j.lead)
}

// lead runs one term: ctx ends with leadership l (or Run's ctx).
func (j *Job) lead(ctx context.Context, l lock.Leadership) error { return j.leadYielding(ctx, l, nil) }

// leadYielding is lead for a term whose [Term.Yield] is yield.
func (j *Job) leadYielding(ctx context.Context, l lock.Leadership, yield <-chan struct{}) error {
	tok := l.Token()
	log := j.o.log.With(slog.String("token", tok.String()))
	log.Info(j.o.name + " leads")
	defer log.Info(j.o.name + " stops leading")

	if ok, err := j.passFence(ctx, tok, log); !ok {
		return err
	}
	term := &Term{tok: tok, part: j.part, log: log, wake: make(chan struct{}, 1), yield: yield}
	term.Poke() // work may have piled up while nobody led
	if j.terms != nil {
		j.terms.add(term)
		defer j.terms.remove(term)
	}

	tctx, end := context.WithCancelCause(ctx)
	defer end(nil)
	g, gctx := errgroup.WithContext(tctx)
	c, err := j.termCron(gctx, term, end)
	if err != nil {
		return err
	}
	c.Start()
	g.Go(func() error {
		<-gctx.Done()
		<-c.Stop().Done()
		return nil
	})
	if j.o.channel != "" {
		g.Go(func() error {
			j.listen(gctx, term.Poke, log)
			return nil
		})
	}
	g.Go(func() error {
		err := j.work(gctx, term)
		end(err) // the term ends with its work
		return err
	})
	err = g.Wait()
	if cause := context.Cause(tctx); err == nil && errors.Is(cause, lock.ErrFenced) {
		err = cause // a cron job was fenced
	}
	switch {
	case errors.Is(err, lock.ErrFenced):
		j.steppedDown(ctx, log, err)
		return nil
	case err != nil && ctx.Err() == nil:
		return err
	}
	return nil
}

// passFence passes the fence with tok before any work: a deposed candidate is refused from here
// on, and a fence it cannot pass (its table is missing) stops it before it does work it could
// never record. It reports whether the term may work: not when ctx ended or the fence refused tok
// (see steppedDown); then the error is nil, or the missing table's. Other failures are retried.
func (j *Job) passFence(ctx context.Context, tok lock.Token, log *slog.Logger) (bool, error) {
	for {
		err := CommitFenced(ctx, j.pool, j.fence, j.resource, tok, nil) // one round trip
		switch {
		case err == nil:
			return true, nil
		case ctx.Err() != nil:
			return false, nil
		case errors.Is(err, lock.ErrFenced):
			j.steppedDown(ctx, log, err)
			return false, nil
		case isUndefinedTable(err):
			return false, fmt.Errorf("%s: fence of %s (was fence.Fence.Migrate run?): %w", j.o.name, j.resource, err)
		default:
			j.fails.Log(ctx, log, "fence", slog.LevelWarn, j.o.name+": fence check failed; retrying before working", slog.Any("err", err))
			pause(ctx, j.o.pause)
			j.fails.Flush()
		}
	}
}

// termCron returns the cron of a term (not started; ctx is the term's): the schedule pokes the
// term, and each cron job runs with the term's token; a job the fence refuses ends the term
// through end.
func (j *Job) termCron(ctx context.Context, term *Term, end context.CancelCauseFunc) (*cron.Cron, error) {
	cl := pgutil.CronLogger{L: term.log}
	c := cron.New(cron.WithParser(pgutil.CronParser()), cron.WithLogger(cl),
		cron.WithChain(cron.Recover(cl), cron.SkipIfStillRunning(cl)))
	if j.o.schedule != "" {
		if _, err := c.AddFunc(j.o.schedule, func() {
			if ctx.Err() == nil {
				term.Poke()
			}
		}); err != nil { // New validated the spec, so this is not expected
			return nil, fmt.Errorf("%s: schedule %q: %w: %w", j.o.name, j.o.schedule, err, ErrInvalidOption)
		}
	}
	for _, cj := range j.o.crons {
		if _, err := c.AddFunc(cj.spec, func() {
			if ctx.Err() != nil {
				return
			}
			err := cj.fn(ctx, term.tok)
			switch {
			case err == nil || ctx.Err() != nil:
			case errors.Is(err, lock.ErrFenced):
				end(err)
			default:
				term.log.Warn(j.o.name+": "+cj.name+" failed; retrying at its next run", slog.Any("err", err))
			}
		}); err != nil {
			return nil, fmt.Errorf("%s: job %s: schedule %q: %w: %w", j.o.name, cj.name, cj.spec, err, ErrInvalidOption)
		}
	}
	return c, nil
}

// steppedDown counts and logs a fenced term, then pauses so that a fenced candidate, which
// RunWhileLeader lets campaign again at once, does not spin.
func (j *Job) steppedDown(ctx context.Context, log *slog.Logger, err error) {
	j.fenced.Add(1)
	log.Warn(j.o.name+": fenced out by a newer leader", slog.Any("err", err))
	pause(ctx, j.o.pause)
}

// listen keeps a connection LISTENing on the channel and pokes for every notification, until ctx
// ends. A lost connection is opened again after a pause; each (re)connect pokes too, since
// notifications sent while nobody listened are gone.
func (j *Job) listen(ctx context.Context, poke func(), log *slog.Logger) {
	defer j.fails.FlushAll()
	for ctx.Err() == nil {
		err := j.listenOnce(ctx, poke)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errPooled) {
			log.Warn(j.o.name+": LISTEN through a connection pooler receives no notification; woken by the poll only (a direct connection wakes at once)",
				slog.String("channel", j.o.channel))
			return
		}
		// Once per interval with a count, while the database is away.
		j.fails.Log(ctx, log, "listen", slog.LevelWarn, j.o.name+": listening connection failed; polling until it is back",
			slog.String("channel", j.o.channel), slog.Any("err", err))
		pause(ctx, j.o.pause)
		j.fails.Flush()
	}
}

// errPooled: the listening connection reaches PostgreSQL through a pooler (PgBouncer), whose
// transaction pooling hands the session that LISTENs to other clients: no notification would come.
var errPooled = errors.New("connection pooler in between")

// cleanupTimeout bounds closing the listening connection once ctx has ended.
const cleanupTimeout = 5 * time.Second

func (j *Job) listenOnce(ctx context.Context, poke func()) error {
	conn, err := pgx.ConnectConfig(ctx, j.pool.Config().ConnConfig)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if pooled, err := pgutil.BehindPooler(ctx, conn); err != nil {
		return fmt.Errorf("listen: %w", err)
	} else if pooled {
		return errPooled
	}
	if _, err := conn.Exec(ctx, "listen "+pgx.Identifier{j.o.channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	poke()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return fmt.Errorf("wait for notification: %w", err)
		}
		poke()
	}
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func isUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}
