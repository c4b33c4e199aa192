package outbox

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/lock"
)

// Option configures an [Outbox]: where its table lives and what [Outbox.Enqueue] accepts.
// Options are applied in order by [New], which validates the result.
type Option func(*options)

type options struct {
	schema  string
	table   string
	channel string // "" until New derives it from schema and table (tests set their own)
	maxBody int
	notify  bool
	handOff bool // Do hands committed rows over (tests turn it off: an enqueuer dead after its commit)
	parts   int
}

// DefaultTable is the outbox table's default name.
const DefaultTable = "txkit_outbox"

// MaxBodySize is the largest body [Outbox.Enqueue] accepts: 4 MiB, RocketMQ's default
// maxMessageSize, so that every message accepted here can be published; a larger one is refused
// with an error wrapping [ErrTooLarge].
const MaxBodySize = 4 << 20

func defaultOptions() options {
	return options{table: DefaultTable, maxBody: MaxBodySize, notify: true, handOff: true, parts: 1}
}

// WithTable sets the PostgreSQL schema of the table (default: none, so the connection's
// search_path decides; [Outbox.Migrate] creates it if it does not exist) and the table's name
// (default [DefaultTable]; quoted, so used exactly as given, case included; at most 51 bytes, so
// that the index names derived from it fit PostgreSQL's 63-byte identifiers). An empty schema or
// table keeps that part as it was.
func WithTable(schema, table string) Option {
	return func(o *options) { o.schema, o.table = cmp.Or(schema, o.schema), cmp.Or(table, o.table) }
}

// MaxPartitions is the largest partition count [WithPartitions] accepts.
const MaxPartitions = 1024

// WithPartitions splits the outbox into n partitions (default 1; at most [MaxPartitions]) by a
// stable hash of each message's key ([Outbox.Partition]), so that several relays share the work
// ([WithElectors]) while each key's messages stay in order. The count is stored by the first
// [Outbox.Migrate] and cannot change afterwards: Migrate, Enqueue and [Relay.Run] refuse another
// with an error wrapping [ErrInvalidOption] (docs/outbox.md, "Partitions", says how to change it).
func WithPartitions(n int) Option { return func(o *options) { o.parts = n } }

const (
	metaSuffix     = "_parts"
	partIndex      = "_part_idx"
	partRetryIndex = "_retry_p_idx"
	keysIndex      = "_kbucket_idx"
)

const (
	maxIdentLen  = 63 // PostgreSQL's NAMEDATALEN - 1
	pendingIndex = "_pending_idx"
	retryIndex   = "_retry_idx"
	keyIndex     = "_key_idx"                      // dropped by Migrate: keysIndex replaces it
	maxTableLen  = maxIdentLen - len(pendingIndex) // 51 bytes
)

// Limits on what [Outbox.Enqueue] accepts, besides the body's ([MaxBodySize]). They hold any
// message Enqueue accepts within what RocketMQ carries — the smallest limits among the brokers a
// relay commonly feeds: a topic of at most 127 characters (Kafka allows 249), and at most 32 KiB
// of properties, where the key and the headers travel. A message over one of them is refused with
// an error wrapping [ErrTooLarge] rather than accepted and then retried by the [Relay] until it is
// dead.
const (
	MaxTopicLen       = 127      // bytes of Message.Topic
	MaxKeyLen         = 1024     // bytes of Message.Key
	MaxHeaders        = 64       // entries of Message.Headers
	MaxHeaderNameLen  = 256      // bytes of one header name
	MaxHeaderValueLen = 4096     // bytes of one header value
	MaxHeadersSize    = 16 << 10 // bytes of all header names and values together
)

func (o *options) validate() error {
	if o.schema != "" {
		if err := pgutil.CheckText(o.schema, maxIdentLen); err != nil {
			return fmt.Errorf("outbox: schema %q: %w: %w", o.schema, err, ErrInvalidOption)
		}
	}
	if err := pgutil.CheckText(o.table, maxTableLen); err != nil {
		return fmt.Errorf("outbox: table %q: %w: %w", o.table, err, ErrInvalidOption)
	}
	if o.channel == "" {
		o.channel = pgutil.Channel(o.schema, o.table)
	}
	if err := pgutil.CheckText(o.channel, maxIdentLen); err != nil {
		return fmt.Errorf("outbox: channel %q: %w: %w", o.channel, err, ErrInvalidOption)
	}
	if o.maxBody < 1 {
		return fmt.Errorf("outbox: max body size %d: below 1: %w", o.maxBody, ErrInvalidOption)
	}
	if o.parts < 1 || o.parts > MaxPartitions {
		return fmt.Errorf("outbox: %d partitions: not in [1, %d]: %w", o.parts, MaxPartitions, ErrInvalidOption)
	}
	return nil
}

// RelayOption configures a [Relay]. Options are applied in order by [NewRelay], which validates
// the result.
type RelayOption func(*relayOptions)

type relayOptions struct {
	elector        lock.Elector
	electorSet     bool // WithElector was given, maybe with nil
	log            *slog.Logger
	schedule       string
	batch          int
	batchBytes     int
	concurrency    int
	maxAttempts    int
	backoffBase    time.Duration
	backoffCap     time.Duration
	publishTimeout time.Duration // each Publish; the publisher's own send timeout is usually shorter
	fence          *fence.Fence  // nil: txkit_fence in the outbox's schema; tests set another
	reg            prometheus.Registerer
	tp             trace.TracerProvider // nil: the global provider
	retryPause     time.Duration        // after being fenced, and before retrying the fence check or the listener
	inFlight       int                  // messages held at once; 0: twice the batch size plus twice the concurrency
	recordLinger   time.Duration        // how long a record waits for the publishes under way (see pipeline.linger)
	electors       func(p int) (lock.Elector, error)
	count          func(ctx context.Context) (int, error) // WithElectors: nil, no balancing
}

func defaultRelayOptions() relayOptions {
	return relayOptions{
		log:            slog.New(slog.DiscardHandler),
		schedule:       "@every 1s",
		batch:          128,
		batchBytes:     DefaultBatchBytes,
		concurrency:    concurrency,
		maxAttempts:    16,
		backoffBase:    time.Second,
		backoffCap:     10 * time.Minute,
		publishTimeout: 30 * time.Second,
		retryPause:     time.Second,
		recordLinger:   recordLinger,
	}
}

// WithElector sets the election the relay runs under: it drains only while el leads, and its
// writes carry el's fencing token. It is required by [Relay.Run]; one elector may be shared by
// several leader jobs of a process (see [lock.Elector]). [NewRelay] refuses a nil el.
func WithElector(el lock.Elector) RelayOption {
	return func(o *relayOptions) { o.elector, o.electorSet = el, true }
}

// WithLogger sets the logger (default: discard). The relay logs what a person should see at info
// level and above — taking and losing the lead, publishing working again after an outage — failures
// at warn, dead messages at error, and routine work (each drain's batches, sent, failed, dead,
// backlog; the robfig/cron scheduler's own messages) at debug. Failed publishes are logged at most
// once per topic per 5 s, with "txkit.suppressed"=the failures not logged since, and never with a
// message's body or headers.
func WithLogger(l *slog.Logger) RelayOption {
	return func(o *relayOptions) {
		if l != nil {
			o.log = obs.Logger(l)
		}
	}
}

// WithSchedule sets when the leading relay polls the table, as a robfig/cron spec: five fields
// ("* * * * *"), six with seconds first ("*/2 * * * * *"), or a descriptor ("@every 500ms"),
// and how many due messages one drain reads at a time (at most 10000). Defaults "@every 1s" and
// 128. NOTIFY wakes the relay between polls; the poll is the safety net for notifications lost
// while the listening connection was down, and what picks up retries when their backoff ends.
// Larger batches mean fewer queries under a backlog; a batch is also cut at [DefaultBatchBytes]
// (always at least one message), which bounds what the relay holds in memory.
func WithSchedule(spec string, batch int) RelayOption {
	return func(o *relayOptions) { o.schedule, o.batch = spec, batch }
}

// DefaultBatchBytes is the most a drain reads in one batch: 16 MiB of topic, key, body and
// headers as stored.
const DefaultBatchBytes = 16 << 20

// concurrency is how many keys of one batch are published at the same time; messages with the
// same key are always published one after the other, in order.
const concurrency = 16

// WithRetry sets how a failed publish is retried: a message is dead after attempts failed
// publishes (default 16; at least 1), and after its n-th failure it waits a random time in
// [d/2, d], d = min(cap, base·2^(n-1)), computed by PostgreSQL (defaults 1 s and 10 min; base at
// least 1 ms, cap at least base). A publish whose error wraps [ErrInvalidMessage] — the broker can
// never carry the message — makes it dead at once. Turn it to give up sooner or ride out longer
// broker outages.
func WithRetry(attempts int, base, cap time.Duration) RelayOption {
	return func(o *relayOptions) { o.maxAttempts, o.backoffBase, o.backoffCap = attempts, base, cap }
}

// WithTelemetry sets where the relay's metrics and traces go. reg registers its txkit_outbox_*
// metrics (txkit_leader_partitions_unled too, with [WithElectors]), all listed in docs/metrics.md
// (default: none; [Relay.Stats] still counts, and the relay skips the backlog query the gauges
// need); relays on one reg share the series, and [NewRelay] fails with an error wrapping
// [ErrInvalidOption] when a name is taken on reg by a metric of another kind or labels. tp is the
// OpenTelemetry tracer provider (default: the global one): each publish runs under a span "outbox
// relay publish", a child of the trace context [Outbox.Enqueue] stored with the message, so the
// request's trace runs on to the consumer (docs/tracing.md). A nil reg or tp keeps that part as it
// was.
func WithTelemetry(reg prometheus.Registerer, tp trace.TracerProvider) RelayOption {
	return func(o *relayOptions) {
		if reg != nil {
			o.reg = reg
		}
		if tp != nil {
			o.tp = tp
		}
	}
}

// WithElectors sets the elections of a partitioned outbox's relay ([WithPartitions]): el(p) is
// this process's candidate in partition p's election (0 ≤ p < partitions), such as
// zklock.NewElector(sess, fmt.Sprintf("/orders/outbox-relay/p%d", p), hostname). Each partition
// needs an election of its own, the same in every process; the relay drains partition p, under
// its own fencing token (fence resource "outbox:<table>/p<p>"), while it leads p. [NewRelay]
// calls el once per partition. count, when not nil, says how many relays are live
// ([ContenderCount]): each then leads at most ceil(partitions/relays) partitions and gives up the
// rest — each once its publishes in flight are recorded, so that none is published twice; with a
// nil count a process leads every partition it wins. An outbox that is not split may use it too
// (one partition, el(0)), or [WithElector].
func WithElectors(el func(p int) (lock.Elector, error), count func(ctx context.Context) (int, error)) RelayOption {
	return func(o *relayOptions) { o.electors, o.count = el, count }
}

// ContenderCount returns a count of the live relays for [WithElectors] on ZooKeeper: the distinct
// candidate ids among the contenders of the elections at paths, read with insp
// (sess.Inspector()). When a relay dies, its partitions go to the others as soon as its session
// ends. It blocks for the round trips, bounded by its ctx.
func ContenderCount(insp lock.Inspector, paths ...string) func(ctx context.Context) (int, error) {
	return leader.ContenderMembership(insp, paths...).Members
}

const maxBatch = 10000

func (o relayOptions) validate() error {
	switch {
	case o.electorSet && o.elector == nil:
		return fmt.Errorf("outbox: relay: nil elector: %w", ErrInvalidOption)
	case o.batch < 1 || o.batch > maxBatch:
		return fmt.Errorf("outbox: batch size %d: not in [1, %d]: %w", o.batch, maxBatch, ErrInvalidOption)
	case o.batchBytes < 1<<10 || o.batchBytes > 1<<30:
		return fmt.Errorf("outbox: batch bytes %d: not in [1 KiB, 1 GiB]: %w", o.batchBytes, ErrInvalidOption)
	case o.concurrency < 1:
		return fmt.Errorf("outbox: concurrency %d: below 1: %w", o.concurrency, ErrInvalidOption)
	case o.maxAttempts < 1:
		return fmt.Errorf("outbox: max attempts %d: below 1: %w", o.maxAttempts, ErrInvalidOption)
	case o.backoffBase < time.Millisecond:
		return fmt.Errorf("outbox: backoff base %v: below 1ms: %w", o.backoffBase, ErrInvalidOption)
	case o.backoffCap < o.backoffBase:
		return fmt.Errorf("outbox: backoff cap %v: below base %v: %w", o.backoffCap, o.backoffBase, ErrInvalidOption)
	case o.publishTimeout <= 0:
		return fmt.Errorf("outbox: publish timeout %v: not positive: %w", o.publishTimeout, ErrInvalidOption)
	case o.retryPause <= 0:
		return fmt.Errorf("outbox: retry pause %v: not positive: %w", o.retryPause, ErrInvalidOption)
	case o.inFlight < 0:
		return fmt.Errorf("outbox: max in flight %d: negative: %w", o.inFlight, ErrInvalidOption)
	case o.inFlight > 0 && o.inFlight < o.batch:
		return fmt.Errorf("outbox: max in flight %d: below the batch size %d: %w", o.inFlight, o.batch, ErrInvalidOption)
	case o.electors != nil && o.electorSet:
		return fmt.Errorf("outbox: relay: both WithElector and WithElectors: %w", ErrInvalidOption)
	}
	if err := pgutil.CheckCron(o.schedule); err != nil {
		return fmt.Errorf("outbox: schedule %q: %w: %w", o.schedule, err, ErrInvalidOption)
	}
	return nil
}
