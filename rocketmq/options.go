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

	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/outbox"
)

// Option configures a [Publisher], a [Consumer] or a [TxProducer]. Each option's doc says which of
// them it applies to; a constructor given an option meant for another type returns an error
// wrapping [ErrInvalidOption] rather than ignore it. Options are applied in order.
type Option func(*options)

// target is the set of types an option applies to.
type target uint8

const (
	forPublisher target = 1 << iota
	forConsumer
	forTxProducer
	forAll = forPublisher | forConsumer | forTxProducer
)

func (t target) String() string {
	switch t {
	case forPublisher:
		return "Publisher"
	case forConsumer:
		return "Consumer"
	case forTxProducer:
		return "TxProducer"
	}
	return fmt.Sprintf("target(%d)", uint8(t))
}

type options struct {
	used []optionUse

	log *slog.Logger

	// All three
	credentials primitive.Credentials

	// Publisher and TxProducer
	group       string // Publisher only; the others take it positionally
	retries     int
	sendTimeout time.Duration

	// Consumer
	maxReconsume    int
	fromFirst       bool
	orderly         bool
	goroutines      int
	retryDelayLevel int
	orderlyRetry    time.Duration
	handlerTimeout  time.Duration
	maxMessageSize  int

	// TxProducer
	checkGrace     time.Duration
	localTxTimeout time.Duration
	checkTimeout   time.Duration
	schema         string
	table          string
	withhold       bool // tests only: commit locally, then answer UNKNOW (see export_test.go)
}

type optionUse struct {
	name string
	to   target
}

func defaultOptions() options {
	return options{
		log:             slog.New(slog.DiscardHandler),
		group:           "txkit-outbox",
		retries:         2,
		sendTimeout:     10 * time.Second,
		maxReconsume:    16,
		fromFirst:       true,
		goroutines:      20,
		retryDelayLevel: 0,
		orderlyRetry:    time.Second,
		handlerTimeout:  time.Minute,
		maxMessageSize:  DefaultMaxMessageSize,
		checkGrace:      10 * time.Second,
		localTxTimeout:  5 * time.Second,
		checkTimeout:    5 * time.Second,
		table:           "txkit_rmq_tx",
	}
}

// option records which types an option applies to, so that constructors can refuse misplaced ones.
func option(name string, to target, apply func(*options)) Option {
	return func(o *options) {
		o.used = append(o.used, optionUse{name: name, to: to})
		apply(o)
	}
}

// WithLogger sets the logger (default: discard). Applies to all three types. Only this package's
// own lines go to it; rocketmq-client-go logs through its process-wide rlog logger, which
// [NewRlogAdapter] can route to slog from main.
func WithLogger(l *slog.Logger) Option {
	return option("WithLogger", forAll, func(o *options) {
		if l != nil {
			o.log = l
		}
	})
}

// WithCredentials sets the RocketMQ ACL account (access key and secret key, as in the broker's
// plain_acl.yml) of a [Publisher], [Consumer] or [TxProducer]; it applies to all three. With it
// the client signs every request it sends to name servers and brokers (HMAC-SHA1 of the request's
// fields and body under secretKey, carried with accessKey in the AccessKey and Signature fields),
// and a broker with aclEnable=true checks the signature and the account's rights on the topic
// and group. Without it (the default) requests go unsigned, which such a broker refuses.
//
// Both keys must be given, or neither: the client silently sends unsigned requests when one of
// them is empty, so this option refuses that with [ErrInvalidOption]. The secret key is never
// sent and never logged. ACL authenticates and authorizes clients; it does not encrypt the
// connection.
func WithCredentials(accessKey, secretKey string) Option {
	return option("WithCredentials", forAll, func(o *options) {
		o.credentials = primitive.Credentials{AccessKey: accessKey, SecretKey: secretKey}
	})
}

// WithGroup sets the producer group of a [Publisher] (default "txkit-outbox"). The group of a
// plain producer matters little to the broker; it must not be the group of a [TxProducer],
// because the broker sends transaction check-backs to any producer of the group.
func WithGroup(name string) Option {
	return option("WithGroup", forPublisher, func(o *options) { o.group = name })
}

// WithRetries sets how many times a send is retried after a failed attempt (default 2, so up to
// 3 attempts). Applies to [Publisher] and [TxProducer]. A retry after a timeout may store the
// message twice; consumers deduplicate by id.
func WithRetries(n int) Option {
	return option("WithRetries", forPublisher|forTxProducer, func(o *options) { o.retries = n })
}

// WithSendTimeout bounds one Publish or the broker half of one Send, all attempts included
// (default 10 s). Each attempt is also bounded by the client's own 3 s. Applies to [Publisher]
// and [TxProducer].
func WithSendTimeout(d time.Duration) Option {
	return option("WithSendTimeout", forPublisher|forTxProducer, func(o *options) { o.sendTimeout = d })
}

// WithMaxReconsumeTimes sets how many times a [Consumer] has a failed message redelivered before
// the broker moves it to the dead-letter topic %DLQ%<group> (default 16; 0 sends it there after
// the first failure).
func WithMaxReconsumeTimes(n int) Option {
	return option("WithMaxReconsumeTimes", forConsumer, func(o *options) { o.maxReconsume = n })
}

// WithConsumeFromFirstOffset sets where a [Consumer] whose group has no committed offset yet
// starts: at the first message the broker still holds (true, the default — nothing published
// before the group's first start is missed) or at the end of each queue (false). A group that has
// committed offsets always resumes from them.
func WithConsumeFromFirstOffset(first bool) Option {
	return option("WithConsumeFromFirstOffset", forConsumer, func(o *options) { o.fromFirst = first })
}

// WithOrderly makes a [Consumer] apply the messages of each queue one at a time, in queue order
// (default false). Messages with the same [outbox.Message].Key go to the same queue (see
// [Publisher]), so orderly consumption applies them in the order they were published. A failed
// message is retried in place, every [WithOrderlyRetryInterval], holding back the rest of its
// queue, until it succeeds or has failed more than [WithMaxReconsumeTimes] times; then it goes to
// the dead-letter topic and the queue moves on.
//
// Without it, a Consumer applies up to [WithConsumeGoroutines] messages at once, even messages of
// the same queue, and a failed message is retried later through the group's retry topic: faster,
// but in no particular order.
func WithOrderly(orderly bool) Option {
	return option("WithOrderly", forConsumer, func(o *options) { o.orderly = orderly })
}

// WithConsumeGoroutines sets how many messages of the topic a concurrent [Consumer] applies at
// once (default 20; the pool must have room for as many transactions). Orderly consumers apply
// one message per queue at a time whatever this says.
func WithConsumeGoroutines(n int) Option {
	return option("WithConsumeGoroutines", forConsumer, func(o *options) { o.goroutines = n })
}

// WithRetryDelayLevel sets the broker delay level after which a concurrent [Consumer]'s failed
// message is redelivered: 1 to 18 index the broker's messageDelayLevel list (by default 1s 5s 10s
// 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h). The default, 0, lets the broker choose
// level 3 + the number of earlier redeliveries (10 s, 30 s, 1 min, ...).
func WithRetryDelayLevel(level int) Option {
	return option("WithRetryDelayLevel", forConsumer, func(o *options) { o.retryDelayLevel = level })
}

// WithOrderlyRetryInterval sets how long an orderly [Consumer] waits before it retries a failed
// message (default 1 s; at least 10 ms, at most 30 s).
func WithOrderlyRetryInterval(d time.Duration) Option {
	return option("WithOrderlyRetryInterval", forConsumer, func(o *options) { o.orderlyRetry = d })
}

// WithHandlerTimeout bounds the transaction in which a [Consumer] applies one message: the claim,
// the handler and the commit (default 1 min). When it passes, the transaction is rolled back and
// the message redelivered. It also bounds how long [Consumer.Run] waits for handlers in flight
// when its ctx ends.
func WithHandlerTimeout(d time.Duration) Option {
	return option("WithHandlerTimeout", forConsumer, func(o *options) { o.handlerTimeout = d })
}

// DefaultMaxMessageSize is the default of [WithMaxMessageSize]: the outbox's default body limit
// ([outbox.DefaultMaxBodySize], 4 MiB) plus 64 KiB for the properties.
const DefaultMaxMessageSize = outbox.DefaultMaxBodySize + 64<<10

// WithMaxMessageSize sets the largest message a [Consumer] accepts, in bytes of body (as the
// client hands it over, inflated when the producer compressed it) plus properties (names and
// values) (default [DefaultMaxMessageSize]; at least 1 KiB, at most 1 GiB). A larger message is
// poison: logged and acknowledged, never decoded nor given to the [Handler]. It bounds what this
// package and the handler accept, not what the client reads and inflates before (see the
// package doc).
func WithMaxMessageSize(n int) Option {
	return option("WithMaxMessageSize", forConsumer, func(o *options) { o.maxMessageSize = n })
}

// WithCheckGrace sets how old a half message must be — measured from its born timestamp, taken by
// the producer's clock when it was sent — before a [TxProducer]'s check-back rolls it back for
// want of a committed local transaction (default 10 s). Younger ones are answered "unknown", so
// that a local transaction still running is not overtaken. The rollback is fenced: the check-back
// records the transaction id as rolled back, so a local transaction that tries to commit later
// fails instead of committing an effect whose message is gone.
func WithCheckGrace(d time.Duration) Option {
	return option("WithCheckGrace", forTxProducer, func(o *options) { o.checkGrace = d })
}

// WithLocalTxTimeout bounds the local transaction of one [TxProducer.Send] (default 5 s), on top
// of the ctx passed to Send.
func WithLocalTxTimeout(d time.Duration) Option {
	return option("WithLocalTxTimeout", forTxProducer, func(o *options) { o.localTxTimeout = d })
}

// WithCheckTimeout bounds the database work of one check-back (default 5 s). The client handles
// check-backs one at a time, so a slow one delays the others; one that times out answers
// "unknown" and the broker asks again.
func WithCheckTimeout(d time.Duration) Option {
	return option("WithCheckTimeout", forTxProducer, func(o *options) { o.checkTimeout = d })
}

// WithSchema sets the PostgreSQL schema of a [TxProducer]'s table (default: none, so the
// connection's search_path decides). [TxProducer.Migrate] creates it if it does not exist.
func WithSchema(name string) Option {
	return option("WithSchema", forTxProducer, func(o *options) { o.schema = name })
}

// WithTable sets the name of a [TxProducer]'s table of transaction ids (default "txkit_rmq_tx").
// It is quoted, so it is used exactly as given.
func WithTable(name string) Option {
	return option("WithTable", forTxProducer, func(o *options) { o.table = name })
}

// withheldSecondPhase makes ExecuteLocalTransaction commit the local transaction and then answer
// UNKNOW instead of COMMIT, so that the message is delivered only through a check-back. Tests
// reach it through export_test.go.
func withheldSecondPhase() Option {
	return option("withheldSecondPhase", forTxProducer, func(o *options) { o.withhold = true })
}

func buildOptions(to target, opts []Option) (options, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	for _, u := range o.used {
		if u.to&to == 0 {
			return o, fmt.Errorf("rocketmq: %s does not apply to a %s: %w", u.name, to, ErrInvalidOption)
		}
	}
	return o, o.validate(to)
}

func (o options) validate(to target) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("rocketmq: "+format+": %w", append(args, ErrInvalidOption)...)
	}
	if (o.credentials.AccessKey == "") != (o.credentials.SecretKey == "") {
		return bad("credentials need both an access key and a secret key")
	}
	if to&(forPublisher|forTxProducer) != 0 {
		if o.retries < 0 || o.retries > 100 {
			return bad("retries %d outside [0, 100]", o.retries)
		}
		if o.sendTimeout <= 0 {
			return bad("send timeout %v is not positive", o.sendTimeout)
		}
	}
	switch to {
	case forPublisher:
		if err := checkName("group", o.group, maxGroupLen); err != nil {
			return err
		}
	case forConsumer:
		if o.maxReconsume < 0 || o.maxReconsume > 10000 {
			return bad("max reconsume times %d outside [0, 10000]", o.maxReconsume)
		}
		if o.goroutines < 1 || o.goroutines > 1000 {
			return bad("consume goroutines %d outside [1, 1000]", o.goroutines)
		}
		if o.retryDelayLevel < 0 || o.retryDelayLevel > 18 {
			return bad("retry delay level %d outside [0, 18]", o.retryDelayLevel)
		}
		if o.orderlyRetry < 10*time.Millisecond || o.orderlyRetry > 30*time.Second {
			return bad("orderly retry interval %v outside [10ms, 30s]", o.orderlyRetry)
		}
		if o.handlerTimeout <= 0 {
			return bad("handler timeout %v is not positive", o.handlerTimeout)
		}
		if o.maxMessageSize < 1<<10 || o.maxMessageSize > 1<<30 {
			return bad("max message size %d outside [1 KiB, 1 GiB]", o.maxMessageSize)
		}
	case forTxProducer:
		if o.checkGrace <= 0 {
			return bad("check grace %v is not positive", o.checkGrace)
		}
		if o.localTxTimeout <= 0 {
			return bad("local transaction timeout %v is not positive", o.localTxTimeout)
		}
		if o.checkTimeout <= 0 {
			return bad("check timeout %v is not positive", o.checkTimeout)
		}
		if o.schema != "" {
			if err := pgutil.CheckText(o.schema, 63-len("_pkey")); err != nil {
				return bad("schema %q: %v", o.schema, err)
			}
		}
		if err := pgutil.CheckText(o.table, 63-len("_pkey")); err != nil {
			return bad("table %q: %v", o.table, err)
		}
	}
	return nil
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
// clients that share an entry share a check-back handler (trap T1) and a producer/consumer
// registry ("the producer group has been created").
func instanceName(role string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("txkit-%s-%d-%s", role, os.Getpid(), hex.EncodeToString(b[:]))
}
