package rocketmq

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/outbox"
)

// PublisherOption configures a [Publisher]. ConsumerOption and TxProducerOption do the same for a
// [Consumer] and a [TxProducer]. Each option returns the types it fits, so an option meant for
// another constructor does not compile: [WithOrderly] is a ConsumerOption only, [WithRetries] a
// [SendOption] (Publisher and TxProducer), [WithLogger] an [Option] (all three). Options are
// applied in order; a nil option is ignored.
type PublisherOption interface {
	applyPublisher(*publisherOptions)
}

// ConsumerOption configures a [Consumer]; see [PublisherOption].
type ConsumerOption interface {
	applyConsumer(*consumerOptions)
}

// TxProducerOption configures a [TxProducer]; see [PublisherOption].
type TxProducerOption interface {
	applyTxProducer(*txProducerOptions)
}

// Option is an option that fits a [Publisher], a [Consumer] and a [TxProducer] alike:
// [WithLogger], [WithCredentials] and [WithTelemetry].
type Option interface {
	PublisherOption
	ConsumerOption
	TxProducerOption
}

// SendOption is an option of the sending side, fitting a [Publisher] and a [TxProducer]:
// [WithRetries].
type SendOption interface {
	PublisherOption
	TxProducerOption
}

// commonOptions are the settings every client has.
type commonOptions struct {
	log         *slog.Logger
	credentials primitive.Credentials
	reg         prometheus.Registerer // nil: metrics are kept but not exposed
	tp          trace.TracerProvider  // nil: the global provider
}

// sendOptions are the settings of a producing client.
type sendOptions struct {
	retries     int
	sendTimeout time.Duration
}

type publisherOptions struct {
	commonOptions
	sendOptions
	// group is the producer group, "txkit-outbox" (tests set it through GroupForTest). A plain
	// producer's group matters little to the broker; the Consumer and TxProducer take theirs
	// positionally, and a TxProducer's must not be this one, because the broker sends check-backs
	// to any producer of the group.
	group string
}

type consumerOptions struct {
	commonOptions
	maxReconsume    int
	fromFirst       bool // a group without committed offsets starts at the first message held
	orderly         bool
	goroutines      int
	retryDelayLevel int
	orderlyRetry    time.Duration
	// handlerTimeout bounds the transaction that applies one message (claim, handler, commit),
	// 1 min, and how long Run waits for handlers in flight when its ctx ends; tests set it through
	// HandlerTimeoutForTest.
	handlerTimeout time.Duration
	maxMessageSize int
	tagExpression  string
}

type txProducerOptions struct {
	commonOptions
	sendOptions
	// checkGrace is how old a half message must be, by its born timestamp, before a check-back
	// rolls it back for want of a committed local transaction: 10 s, twice localTxTimeout, so a
	// local transaction still running is never overtaken; tests set it through CheckGraceForTest.
	checkGrace     time.Duration
	localTxTimeout time.Duration // bounds Send's local transaction, on top of Send's ctx
	checkTimeout   time.Duration // bounds one check-back's database work (check-backs run one at a time)
	schema         string
	table          string // "txkit_rmq_tx"; tests set it through TableForTest
}

func defaultCommon() commonOptions { return commonOptions{log: slog.New(slog.DiscardHandler)} }

func defaultSend() sendOptions { return sendOptions{retries: 2, sendTimeout: 10 * time.Second} }

func defaultPublisherOptions() publisherOptions {
	return publisherOptions{commonOptions: defaultCommon(), sendOptions: defaultSend(), group: "txkit-outbox"}
}

func defaultConsumerOptions() consumerOptions {
	return consumerOptions{
		commonOptions:   defaultCommon(),
		maxReconsume:    16,
		fromFirst:       true,
		goroutines:      20,
		retryDelayLevel: 0,
		orderlyRetry:    time.Second,
		handlerTimeout:  time.Minute,
		maxMessageSize:  MaxMessageSize,
	}
}

func defaultTxProducerOptions() txProducerOptions {
	return txProducerOptions{
		commonOptions:  defaultCommon(),
		sendOptions:    defaultSend(),
		checkGrace:     10 * time.Second,
		localTxTimeout: 5 * time.Second,
		checkTimeout:   5 * time.Second,
		table:          "txkit_rmq_tx",
	}
}

// commonOption sets a commonOptions field; it fits all three constructors.
type commonOption func(*commonOptions)

func (f commonOption) applyPublisher(o *publisherOptions)   { f(&o.commonOptions) }
func (f commonOption) applyConsumer(o *consumerOptions)     { f(&o.commonOptions) }
func (f commonOption) applyTxProducer(o *txProducerOptions) { f(&o.commonOptions) }

// sendOption sets a sendOptions field; it fits the Publisher and the TxProducer.
type sendOption func(*sendOptions)

func (f sendOption) applyPublisher(o *publisherOptions)   { f(&o.sendOptions) }
func (f sendOption) applyTxProducer(o *txProducerOptions) { f(&o.sendOptions) }

type publisherOption func(*publisherOptions)

func (f publisherOption) applyPublisher(o *publisherOptions) { f(o) }

type consumerOption func(*consumerOptions)

func (f consumerOption) applyConsumer(o *consumerOptions) { f(o) }

type txProducerOption func(*txProducerOptions)

func (f txProducerOption) applyTxProducer(o *txProducerOptions) { f(o) }

// WithLogger sets the logger (default: discard). It fits all three constructors. Only this
// package's own lines go to it; rocketmq-client-go logs through its process-wide rlog logger,
// which [SetClientLogger] routes to slog from main. A Consumer logs its failed attempts at most
// once per 5 s, with "txkit.suppressed"=the failures not logged since; no line carries a message's body
// or properties.
func WithLogger(l *slog.Logger) Option {
	return commonOption(func(o *commonOptions) {
		if l != nil {
			o.log = obs.Logger(l)
		}
	})
}

// WithCredentials sets the RocketMQ ACL account (as in the broker's plain_acl.yml), for a broker
// with aclEnable=true: every request is signed (HMAC-SHA1 under secretKey; the secret is never
// sent nor logged). It fits all three constructors. Default: unsigned requests, which such a
// broker refuses. Both keys or neither: one empty key returns [ErrInvalidOption] (the client
// would silently send unsigned requests). ACL does not encrypt the connection.
func WithCredentials(accessKey, secretKey string) Option {
	return commonOption(func(o *commonOptions) {
		o.credentials = primitive.Credentials{AccessKey: accessKey, SecretKey: secretKey}
	})
}

// WithRetries sets how many times a send is retried after a failed attempt (default 2, so up to
// 3 attempts; at most 100) and the timeout that bounds one Publish, or the broker half of one
// Send, all attempts included (default 10 s; each attempt is also bounded by the client's own
// 3 s). It fits a [Publisher] and a [TxProducer]. A retry after a timeout may store the message
// twice; consumers deduplicate by id.
func WithRetries(n int, timeout time.Duration) SendOption {
	return sendOption(func(o *sendOptions) { o.retries, o.sendTimeout = n, timeout })
}

// WithRedelivery sets what happens to a message a [Consumer] failed to apply: it is redelivered
// up to maxTimes times before the broker moves it to the dead-letter topic %DLQ%<group> (default
// 16; 0 sends it there after the first failure), a concurrent Consumer's after the broker delay
// level delayLevel: 1 to 18 index the broker's messageDelayLevel list (by default 1s 5s 10s 30s 1m
// 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h); the default, 0, lets the broker choose level 3 + the
// number of earlier redeliveries (10 s, 30 s, 1 min, ...). An orderly Consumer retries in place
// instead ([WithOrderly]).
func WithRedelivery(maxTimes, delayLevel int) ConsumerOption {
	return consumerOption(func(o *consumerOptions) { o.maxReconsume, o.retryDelayLevel = maxTimes, delayLevel })
}

// WithOrderly makes a [Consumer] apply the messages of each queue one at a time, in queue order
// (default: concurrent). Messages with the same [message.Message].Key go to the same queue (see
// [Publisher]), so orderly consumption applies them in the order they were published. A failed
// message is retried in place every retry (1 s is a good value; at least 10 ms, at most 30 s),
// holding back the rest of its queue, until it succeeds or has failed more than [WithRedelivery]'s
// maxTimes; then it goes to the dead-letter topic and the queue moves on.
//
// Without it, a Consumer applies up to [WithConsumeGoroutines] messages at once, even messages of
// the same queue, and a failed message is retried later through the group's retry topic: faster,
// but in no particular order.
func WithOrderly(retry time.Duration) ConsumerOption {
	return consumerOption(func(o *consumerOptions) { o.orderly, o.orderlyRetry = true, retry })
}

// WithConsumeGoroutines sets how many messages of the topic a concurrent [Consumer] applies at
// once (default 20; the pool must have room for as many transactions). Orderly consumers apply
// one message per queue at a time whatever this says.
func WithConsumeGoroutines(n int) ConsumerOption {
	return consumerOption(func(o *consumerOptions) { o.goroutines = n })
}

// MaxMessageSize is the largest message a [Consumer] accepts, in bytes of body (as the client
// hands it over, inflated when the producer compressed it) plus properties (names and values): the
// outbox's body limit ([outbox.MaxBodySize], 4 MiB) plus 64 KiB for the properties. A larger
// message is poison: logged and acknowledged, never decoded nor given to the [Handler]. It bounds
// what this package and the handler accept, not what the client reads and inflates before (see
// docs/security.md).
const MaxMessageSize = outbox.MaxBodySize + 64<<10

// WithTagExpression subscribes a [Consumer] to the messages of its topic whose tag
// ([message.Message].Tags, RocketMQ's TAGS) matches expr: one tag, or several separated by "||"
// ("created || cancelled"), or "*" for every message (the default, like ""). The broker filters
// by tag before it delivers, so messages of other tags never reach the Consumer and need no
// claim; they count as consumed for the group. All consumers of one group must subscribe with the
// same expression, or the broker's view of the group flips between them.
func WithTagExpression(expr string) ConsumerOption {
	return consumerOption(func(o *consumerOptions) { o.tagExpression = expr })
}

// checkTagExpression refuses an expression RocketMQ cannot carry or that names an empty tag.
func checkTagExpression(expr string) error {
	if expr == "" || expr == "*" {
		return nil
	}
	if hasSeparator(expr) {
		return badOption("tag expression %q contains byte 0x01 or 0x02", expr)
	}
	for _, tag := range strings.Split(expr, "||") {
		if strings.TrimSpace(tag) == "" {
			return badOption("tag expression %q names an empty tag", expr)
		}
	}
	return nil
}

// WithSchema sets the PostgreSQL schema of a [TxProducer]'s table of transaction ids,
// txkit_rmq_tx (default: none, so the connection's search_path decides). [TxProducer.Migrate] creates it if it does not exist.
func WithSchema(name string) TxProducerOption {
	return txProducerOption(func(o *txProducerOptions) { o.schema = name })
}

func buildPublisherOptions(opts []PublisherOption) (publisherOptions, error) {
	o := defaultPublisherOptions()
	for _, opt := range opts {
		if opt != nil {
			opt.applyPublisher(&o)
		}
	}
	if err := o.commonOptions.validate(); err != nil {
		return o, err
	}
	if err := o.sendOptions.validate(); err != nil {
		return o, err
	}
	return o, checkName("group", o.group, maxGroupLen)
}

func buildConsumerOptions(opts []ConsumerOption) (consumerOptions, error) {
	o := defaultConsumerOptions()
	for _, opt := range opts {
		if opt != nil {
			opt.applyConsumer(&o)
		}
	}
	if err := o.commonOptions.validate(); err != nil {
		return o, err
	}
	switch {
	case o.maxReconsume < 0 || o.maxReconsume > 10000:
		return o, badOption("max reconsume times %d outside [0, 10000]", o.maxReconsume)
	case o.goroutines < 1 || o.goroutines > 1000:
		return o, badOption("consume goroutines %d outside [1, 1000]", o.goroutines)
	case o.retryDelayLevel < 0 || o.retryDelayLevel > 18:
		return o, badOption("retry delay level %d outside [0, 18]", o.retryDelayLevel)
	case o.orderlyRetry < 10*time.Millisecond || o.orderlyRetry > 30*time.Second:
		return o, badOption("orderly retry interval %v outside [10ms, 30s]", o.orderlyRetry)
	case o.handlerTimeout <= 0:
		return o, badOption("handler timeout %v is not positive", o.handlerTimeout)
	case o.maxMessageSize < 1<<10 || o.maxMessageSize > 1<<30:
		return o, badOption("max message size %d outside [1 KiB, 1 GiB]", o.maxMessageSize)
	}
	return o, checkTagExpression(o.tagExpression)
}

func buildTxProducerOptions(opts []TxProducerOption) (txProducerOptions, error) {
	o := defaultTxProducerOptions()
	for _, opt := range opts {
		if opt != nil {
			opt.applyTxProducer(&o)
		}
	}
	if err := o.commonOptions.validate(); err != nil {
		return o, err
	}
	if err := o.sendOptions.validate(); err != nil {
		return o, err
	}
	switch {
	case o.checkGrace <= 0:
		return o, badOption("check grace %v is not positive", o.checkGrace)
	case o.localTxTimeout <= 0:
		return o, badOption("local transaction timeout %v is not positive", o.localTxTimeout)
	case o.checkTimeout <= 0:
		return o, badOption("check timeout %v is not positive", o.checkTimeout)
	}
	if o.schema != "" {
		if err := pgutil.CheckText(o.schema, 63-len("_pkey")); err != nil {
			return o, badOption("schema %q: %v", o.schema, err)
		}
	}
	if err := pgutil.CheckText(o.table, 63-len("_pkey")); err != nil {
		return o, badOption("table %q: %v", o.table, err)
	}
	return o, nil
}

func (o commonOptions) validate() error {
	if (o.credentials.AccessKey == "") != (o.credentials.SecretKey == "") {
		return badOption("credentials need both an access key and a secret key")
	}
	return nil
}

func (o sendOptions) validate() error {
	if o.retries < 0 || o.retries > 100 {
		return badOption("retries %d outside [0, 100]", o.retries)
	}
	if o.sendTimeout <= 0 {
		return badOption("send timeout %v is not positive", o.sendTimeout)
	}
	return nil
}

func badOption(format string, args ...any) error {
	return fmt.Errorf("rocketmq: "+format+": %w", append(args, ErrInvalidOption)...)
}

// RocketMQ's own limits on names (Java client Validators and TopicValidator).
const (
	maxGroupLen = 255
	maxTopicLen = 127
)

var validName = regexp.MustCompile(`^[%|a-zA-Z0-9_-]+$`)

func checkName(what, name string, max int) error {
	switch {
	case name == "":
		return fmt.Errorf("rocketmq: empty %s: %w", what, ErrInvalidOption)
	case len(name) > max:
		return fmt.Errorf("rocketmq: %s %q is longer than %d bytes: %w", what, name, max, ErrInvalidOption)
	case !validName.MatchString(name):
		return fmt.Errorf("rocketmq: %s %q has characters other than letters, digits, %%, |, _ and -: %w", what, name, ErrInvalidOption)
	}
	return nil
}

func checkNameservers(ns []string) error {
	if len(ns) == 0 {
		return fmt.Errorf("rocketmq: no name server: %w", ErrInvalidOption)
	}
	for _, a := range ns {
		if strings.TrimSpace(a) == "" || !strings.Contains(a, ":") {
			return fmt.Errorf("rocketmq: name server %q is not host:port: %w", a, ErrInvalidOption)
		}
	}
	return nil
}

// instanceName returns a client instance name unique in the process and across processes on the
// host: rocketmq-client-go keys its process-global client cache by ClientIP@InstanceName, and
// clients that share an entry share a check-back handler (the first creator's: a transactional
// producer created after a consumer or a plain producer loses its check-backs) and a
// producer/consumer registry ("the producer group has been created").
func instanceName(role string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("txkit-%s-%d-%s", role, os.Getpid(), hex.EncodeToString(b[:]))
}
