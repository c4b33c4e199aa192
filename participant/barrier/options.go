package barrier

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/signing"
)

// Option configures a [Barrier]. Options are applied in order by [New], which validates the
// result.
type Option func(*options)

type options struct {
	schema   string
	table    string
	retain   time.Duration
	log      *slog.Logger
	schedule string
	maxBody  int64 // the largest request body the handler reads; tests set it (export_test.go)
	secrets  []string
	unsigned bool
	window   time.Duration // see DefaultSignatureWindow; tests set it (export_test.go)
	reg      prometheus.Registerer
	tp       trace.TracerProvider // nil: the global provider
}

// DefaultRetention is how long barrier rows are kept by default: 7 days.
const DefaultRetention = 7 * 24 * time.Hour

func defaultOptions() options {
	return options{
		table:    "txkit_barrier",
		retain:   DefaultRetention,
		log:      slog.New(slog.DiscardHandler),
		schedule: "@every 1m",
		maxBody:  1 << 20,
		window:   DefaultSignatureWindow,
	}
}

// DefaultSignatureWindow is how far a signed request's timestamp may be from the participant's
// clock: 5 minutes. Signatures are remembered as nonces for the barrier's retention, which must be
// longer than twice the window ([New] fails otherwise): a timestamp may lie up to the window ahead,
// so a replay stays possible until receipt + 2 × window.
const DefaultSignatureWindow = 5 * time.Minute

// WithSecrets sets the HMAC-SHA256 keys [Barrier.Handler] verifies requests with: a request
// whose signature (see [participant.NewSigningClient]) matches none of them, whose timestamp is outside
// [DefaultSignatureWindow] or which was seen before (a replay) is answered 401 without running
// anything. Give two secrets during a key rotation — the new one and the old one — until every
// coordinator signs with the new one. Each secret must be at least 16 bytes; [New] returns
// an error wrapping [ErrInvalidOption] otherwise. Without WithSecrets (or [WithUnsignedRequests])
// the handler refuses every request. [Barrier.Participant] and [Barrier.Call] are not affected:
// they are called in-process.
func WithSecrets(secrets ...string) Option {
	return func(o *options) { o.secrets = append([]string{}, secrets...) }
}

// WithUnsignedRequests lets [Barrier.Handler] serve requests that are not signed. It is the
// explicit opt-out of request signing, for deployments where only coordinators can reach the
// participant through another authenticated channel — mutual TLS (see docs/security.md), or a
// loopback-only listener. Anyone who can reach a handler without signing can
// try, confirm or cancel any branch. It cannot be combined with [WithSecrets].
func WithUnsignedRequests() Option { return func(o *options) { o.unsigned = true } }

// WithTable sets the PostgreSQL schema of the barrier table (default: none, so the connection's
// search_path decides; [Barrier.Migrate] creates it if it does not exist) and the table's name
// (default "txkit_barrier", used exactly as given). An empty schema or table keeps that part as it
// was. The table must live in the database of the business data: its rows commit in the same
// transaction as the business change. It belongs to the barrier: do not share it with an
// idempotency.Store of your own, whose scopes could collide with the barrier's ("try", "cancel", ...).
func WithTable(schema, table string) Option {
	return func(o *options) { o.schema, o.table = cmp.Or(schema, o.schema), cmp.Or(table, o.table) }
}

// WithRetention sets how long a barrier row is kept after it is written (default
// [DefaultRetention], 7 days) and when [Barrier.Run] purges older ones, as a robfig/cron spec
// (default "@every 1m"). A participant cannot know when its global transaction ended, so keep
// rows for the coordinator's global timeout plus the longest time it may retry a branch, plus a
// margin: a row purged too early stops protecting its branch (a late try is no longer recognised
// as hanging, a retried confirm or cancel runs again).
func WithRetention(keep time.Duration, spec string) Option {
	return func(o *options) { o.retain, o.schedule = keep, spec }
}

// WithLogger sets the logger (default: discard). [Barrier.Handler] and [Barrier.Participant]
// log failures with the keys gid, branch and op; [Barrier.Run] logs what it purges.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = obs.Logger(l)
		}
	}
}

// WithTelemetry sets where the barrier's metrics and traces go. reg registers its Prometheus
// metric (default: none; still counted), txkit_barrier_ops_total{op,result}: the calls of
// [Barrier.Call] (and so of its handlers and participants) by op and by result — ran, duplicate,
// empty_rollback, hanging_refused (docs/metrics.md); barriers given one registry share the series,
// and a metric of that name registered with another type or labels makes [New] return an error
// wrapping [ErrInvalidOption]. tp is the OpenTelemetry tracer provider (default: the global one):
// each op runs under a span "participant <op>" with the attributes txkit.gid, txkit.branch and
// txkit.op, in the ctx the op's function gets — a server span continuing the request's W3C trace
// context for [Barrier.Handler], an internal span under the caller's for [Barrier.Participant]
// (docs/tracing.md). A nil reg or tp keeps that part as it was.
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
	if o.maxBody < 1 {
		return fmt.Errorf("barrier: max request bytes %d is below 1: %w", o.maxBody, ErrInvalidOption)
	}
	if o.unsigned && len(o.secrets) > 0 {
		return fmt.Errorf("barrier: both WithSecrets and WithUnsignedRequests: %w", ErrInvalidOption)
	}
	if o.secrets != nil {
		if err := signing.CheckSecrets(o.secrets); err != nil {
			return fmt.Errorf("barrier: secrets: %w: %w", err, ErrInvalidOption)
		}
	}
	// A timestamp may lie up to the window ahead of the clock, so a request stays acceptable until
	// receipt + 2 × window: its nonce must be kept at least that long.
	if o.window <= 0 || (len(o.secrets) > 0 && 2*o.window >= o.retain) {
		return fmt.Errorf("barrier: signature window %v must be positive and twice it shorter than the retention %v (a replay is possible until receipt + 2 × window): %w",
			o.window, o.retain, ErrInvalidOption)
	}
	return nil
}

func (o options) storeOptions() []idempotency.Option {
	return []idempotency.Option{
		idempotency.WithTable(o.schema, o.table),
		idempotency.WithRetention(o.retain, o.schedule),
		idempotency.WithLogger(o.log),
	}
}
