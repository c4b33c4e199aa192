package notify

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/placement"
	"github.com/txkit/txkit/lock"
)

// DefaultSchedule is the delays between attempts that payment platforms use: after the first
// attempt fails, retry after 15s, 15s, 30s, 3m, 10m, 20m, 30m, 30m, 30m, 1h, 3h, 3h, 3h, 6h and
// 6h — about a day — then give up (the notification is failed, listed for operators, and
// redeliverable).
func DefaultSchedule() []time.Duration {
	m, h := time.Minute, time.Hour
	return []time.Duration{15 * time.Second, 15 * time.Second, 30 * time.Second, 3 * m, 10 * m, 20 * m, 30 * m,
		30 * m, 30 * m, h, 3 * h, 3 * h, 3 * h, 6 * h, 6 * h}
}

// Option configures a [Notifier].
type Option func(*options)

type options struct {
	schema, table     string
	elector           lock.Elector
	electorSet        bool // WithElector was given, maybe with nil
	log               *slog.Logger
	schedule          []time.Duration
	jitter            float64
	tick              string
	batch             int
	callTimeout       time.Duration
	breakerFailures   int
	breakerCooldown   time.Duration
	client            *http.Client
	retention         time.Duration
	retentionSpec     string
	concurrencyPerRcv int // a Receiver's deliveries in flight when its Concurrency is 0
	plainHTTP         bool
	reg               prometheus.Registerer
	metricReceivers   int                  // receivers with a circuit gauge series of their own
	tp                trace.TracerProvider // nil: the global provider
	parts             int                  // WithPartitions
	partElectors      func(p int) (lock.Elector, error)
	members           leader.Membership
	postAfterCommit   bool // Do posts what it enqueued (off only in tests: a process that died after its commit)
}

func defaultOptions() options {
	return options{
		table: "txkit_notify", log: slog.New(slog.DiscardHandler), schedule: DefaultSchedule(), jitter: 0.1,
		tick: "@every 1s", batch: 100, callTimeout: 10 * time.Second,
		breakerFailures: 5, breakerCooldown: time.Minute, client: newHTTPClient(),
		retention: 30 * 24 * time.Hour, retentionSpec: "@every 10m", concurrencyPerRcv: 4,
		metricReceivers: 50, parts: 1, postAfterCommit: true,
	}
}

// WithTable sets the PostgreSQL schema of the notifier's tables (default: the connection's
// search_path; [Notifier.Migrate] creates it) and the name of the notifications table (default
// "txkit_notify"; the attempts table is its name with "_attempt"). An empty schema or table keeps
// that part as it was.
func WithTable(schema, table string) Option {
	return func(o *options) { o.schema, o.table = cmp.Or(schema, o.schema), cmp.Or(table, o.table) }
}

// WithElector sets the election under which [Notifier.Run] delivers. Required by Run only; [New]
// refuses a nil el.
func WithElector(el lock.Elector) Option {
	return func(o *options) { o.elector, o.electorSet = el, true }
}

// WithLogger sets the logger (default: discard). Keys: txkit.id, txkit.receiver, txkit.key, txkit.attempt,
// txkit.status, txkit.token (txkit's keys begin with "txkit.": docs/tracing.md, "Log keys").
// A failure retried at every tick while the database is away is logged at most once per 5 s, with
// "txkit.suppressed"=the failures not logged since.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = obs.Logger(l) } }

// WithSchedule sets the delays between attempts (default [DefaultSchedule]) and their jitter: each
// delay is drawn from d·(1 ± jitter), by PostgreSQL (default 0.1). A notification gets
// len(delays)+1 attempts; after the last one fails it is failed.
func WithSchedule(delays []time.Duration, jitter float64) Option {
	return func(o *options) { o.schedule, o.jitter = append([]time.Duration(nil), delays...), jitter }
}

// WithTick sets the cron spec on which the leader looks for due notifications (default "@every
// 1s"; a sub-second "@every 200ms" is kept as written) and how many due notifications of one
// receiver it takes at once — and holds, queued or in flight, at most — which is also how many
// results one statement records (default 100). A notification redelivered in this database also
// wakes the leader at once (LISTEN/NOTIFY); an enqueued one is the enqueuer's to post ([Notifier.Do], [Notifier.Deliver]),
// and the leader's — if nobody claims it — from its next tick, or within 100 ms (the tick if
// shorter) while the receiver has pending notifications.
func WithTick(spec string, batch int) Option {
	return func(o *options) { o.tick, o.batch = spec, batch }
}

// WithBreaker sets the circuit breaker: after failures consecutive failed deliveries to one
// receiver (default 5), none is sent to it for cooldown (default 1m); then one at a time until one
// succeeds. The attempts the breaker holds back are not counted against the schedule. Each
// process's [Notifier.Do] and [Notifier.Deliver] calls share a breaker of their own per receiver,
// with these settings.
func WithBreaker(failures int, cooldown time.Duration) Option {
	return func(o *options) { o.breakerFailures, o.breakerCooldown = failures, cooldown }
}

// WithHTTPClient sets the client deliveries are posted with (default: a client of its own that
// does not follow redirects); its Timeout, when set, bounds each delivery (default 10s). A client that follows redirects re-posts a signed delivery wherever
// a 307 or 308 points; set its CheckRedirect to return http.ErrUseLastResponse, as the default
// client does, unless every receiver is trusted with that.
func WithHTTPClient(c *http.Client) Option {
	return func(o *options) {
		o.client = c
		if c != nil && c.Timeout > 0 {
			o.callTimeout = c.Timeout
		}
	}
}

// WithPlainHTTP lets receivers' URLs be plain http:// (default: only https:// is accepted, and
// [New] refuses an http:// URL with [ErrInvalidOption]). Deliveries are signed either way, but
// over plain HTTP anyone on the path reads them. Use it for tests, for receivers on the loopback
// interface, or on a network that encrypts below HTTP (a service mesh's sidecars).
func WithPlainHTTP() Option { return func(o *options) { o.plainHTTP = true } }

// newHTTPClient returns a client that does not follow redirects: a 3xx answer is the answer (a
// failed attempt), and a signed body is never posted anywhere but the receiver's URL.
func newHTTPClient() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// WithTelemetry sets where the notifier's metrics and traces go. reg registers its txkit_notify_*
// metrics (txkit_leader_partitions_unled too, with [WithPartitions]), all listed in
// docs/metrics.md (default: none; still counted); notifiers on one reg share the series, and [New]
// fails with an error wrapping [ErrInvalidOption] when a name is taken on reg by a metric of
// another kind or labels. tp is the OpenTelemetry tracer provider (default: the global one): each
// delivery attempt is a span "notify deliver", a child of the trace context [Notifier.Enqueue]
// stored, sent on to the receiver in traceparent headers (docs/tracing.md). A nil reg or tp keeps
// that part as it was.
func WithTelemetry(reg prometheus.Registerer, tp trace.TracerProvider) Option {
	return func(o *options) {
		if reg != nil {
			o.reg = reg
		}
		if tp != nil {
			o.tp = tp
		}
	}
}

func (o options) validate() error {
	if o.electorSet && o.elector == nil {
		return fmt.Errorf("notify: nil elector: %w", ErrInvalidOption)
	}
	switch {
	case o.parts < 1 || o.parts > placement.MaxPartitions:
		return fmt.Errorf("notify: %d partitions: not in 1..%d: %w", o.parts, placement.MaxPartitions, ErrInvalidOption)
	case o.parts > 1 && o.partElectors == nil:
		return fmt.Errorf("notify: %d partitions without electors: %w", o.parts, ErrInvalidOption)
	}
	if o.schema != "" {
		if err := pgutil.CheckText(o.schema, 63); err != nil {
			return fmt.Errorf("notify: schema %q: %w: %w", o.schema, err, ErrInvalidOption)
		}
	}
	if err := pgutil.CheckText(o.table+"_attempt", 63); err != nil {
		return fmt.Errorf("notify: table %q: %w: %w", o.table, err, ErrInvalidOption)
	}
	for _, spec := range []string{o.tick, o.retentionSpec} {
		if err := pgutil.CheckCron(spec); err != nil {
			return fmt.Errorf("notify: schedule %q: %w: %w", spec, err, ErrInvalidOption)
		}
	}
	for _, d := range o.schedule {
		if d < 0 {
			return fmt.Errorf("notify: negative delay %v in the schedule: %w", d, ErrInvalidOption)
		}
	}
	switch {
	case o.log == nil:
		return fmt.Errorf("notify: nil logger: %w", ErrInvalidOption)
	case o.client == nil:
		return fmt.Errorf("notify: nil HTTP client: %w", ErrInvalidOption)
	case o.jitter < 0 || o.jitter >= 1:
		return fmt.Errorf("notify: jitter %v not in [0, 1): %w", o.jitter, ErrInvalidOption)
	case o.batch <= 0 || o.concurrencyPerRcv <= 0 || o.breakerFailures <= 0:
		return fmt.Errorf("notify: batch %d, concurrency %d, breaker failures %d: must be positive: %w",
			o.batch, o.concurrencyPerRcv, o.breakerFailures, ErrInvalidOption)
	case o.metricReceivers < 0:
		return fmt.Errorf("notify: metric receivers %d: negative: %w", o.metricReceivers, ErrInvalidOption)
	case o.callTimeout <= 0:
		return fmt.Errorf("notify: call timeout %v: %w", o.callTimeout, ErrInvalidOption)
	case o.breakerCooldown <= 0 || o.retention <= 0:
		return fmt.Errorf("notify: breaker cooldown %v, retention %v: must be positive: %w", o.breakerCooldown, o.retention, ErrInvalidOption)
	}
	return nil
}
