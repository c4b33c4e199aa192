package participant

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/signing"
)

// BarrierOption configures a [Barrier]. Options are applied in order by [NewBarrier], which
// validates the result.
type BarrierOption func(*barrierOptions)

type barrierOptions struct {
	schema   string
	table    string
	retain   time.Duration
	log      *slog.Logger
	schedule string
	batch    int
	maxBody  int64
	secrets  []string
	unsigned bool
	window   time.Duration
	reg      prometheus.Registerer
	tp       trace.TracerProvider // nil: the global provider
}

// DefaultBarrierRetention is how long barrier rows are kept by default: 7 days.
const DefaultBarrierRetention = 7 * 24 * time.Hour

func defaultBarrierOptions() barrierOptions {
	return barrierOptions{
		table:    "txkit_barrier",
		retain:   DefaultBarrierRetention,
		log:      slog.New(slog.DiscardHandler),
		schedule: "@every 1m",
		batch:    1000,
		maxBody:  1 << 20,
		window:   DefaultSignatureWindow,
	}
}

// DefaultSignatureWindow is how far a signed request's timestamp may be from the participant's
// clock by default: 5 minutes.
const DefaultSignatureWindow = 5 * time.Minute

// WithSecrets sets the HMAC-SHA256 keys [Barrier.Handler] verifies requests with: a request
// whose signature (see [NewSigningClient]) matches none of them, whose timestamp is outside
// [WithSignatureWindow] or which was seen before (a replay) is answered 401 without running
// anything. Give two secrets during a key rotation — the new one and the old one — until every
// coordinator signs with the new one. Each secret must be at least 16 bytes; [NewBarrier] returns
// an error wrapping [ErrInvalidOption] otherwise. Without WithSecrets (or [WithUnsignedRequests])
// the handler refuses every request. [Barrier.Participant] and [Barrier.Call] are not affected:
// they are called in-process.
func WithSecrets(secrets ...string) BarrierOption {
	return func(o *barrierOptions) { o.secrets = append([]string{}, secrets...) }
}

// WithUnsignedRequests lets [Barrier.Handler] serve requests that are not signed. It is the
// explicit opt-out of request signing, for deployments where only coordinators can reach the
// participant through another authenticated channel — mutual TLS (see the package
// documentation), or a loopback-only listener. Anyone who can reach a handler without signing can
// try, confirm or cancel any branch. It cannot be combined with [WithSecrets].
func WithUnsignedRequests() BarrierOption { return func(o *barrierOptions) { o.unsigned = true } }

// WithSignatureWindow sets how far a signed request's timestamp may be from this participant's
// clock (default [DefaultSignatureWindow]). Signatures are remembered as nonces for the barrier's
// retention, which must be longer than twice the window: a timestamp may lie up to the window
// ahead, so a replay stays possible until receipt + 2 × window.
func WithSignatureWindow(d time.Duration) BarrierOption {
	return func(o *barrierOptions) { o.window = d }
}

// WithBarrierSchema sets the PostgreSQL schema of the barrier table (default: none, so the
// connection's search_path decides). [Barrier.Migrate] creates the schema if it does not exist.
// The table must live in the database of the business data: its rows commit in the same
// transaction as the business change.
func WithBarrierSchema(name string) BarrierOption { return func(o *barrierOptions) { o.schema = name } }

// WithBarrierTable sets the barrier table's name (default "txkit_barrier"), used exactly as given.
// The table belongs to the barrier: do not share it with an idempotency.Store of your own, whose
// scopes could collide with the barrier's ("try", "cancel", ...).
func WithBarrierTable(name string) BarrierOption { return func(o *barrierOptions) { o.table = name } }

// WithBarrierRetention sets how long a barrier row is kept after it is written (default
// [DefaultBarrierRetention], 7 days). Rows are purged by age because a participant cannot know when
// the global transaction ended: the coordinator never tells it. Set it to the coordinator's global
// timeout plus the longest time it may keep retrying a branch, plus a safety margin. A row purged too
// early stops protecting its branch: a try delayed beyond it would no longer be recognised as
// hanging, a confirm or cancel retried beyond it would run again.
func WithBarrierRetention(d time.Duration) BarrierOption {
	return func(o *barrierOptions) { o.retain = d }
}

// WithBarrierLogger sets the logger (default: discard). [Barrier.Handler] and [Barrier.Participant]
// log failures with the keys gid, branch and op; [Barrier.Run] logs what it purges.
func WithBarrierLogger(l *slog.Logger) BarrierOption {
	return func(o *barrierOptions) {
		if l != nil {
			o.log = l
		}
	}
}

// WithBarrierPurgeSchedule sets when [Barrier.Run] purges expired rows, as a robfig/cron standard
// spec ("*/5 * * * *", "@every 30s"). The default is "@every 1m".
func WithBarrierPurgeSchedule(spec string) BarrierOption {
	return func(o *barrierOptions) { o.schedule = spec }
}

// WithBarrierPurgeBatch sets how many expired rows one purge statement deletes (default 1000).
func WithBarrierPurgeBatch(n int) BarrierOption { return func(o *barrierOptions) { o.batch = n } }

// WithMaxRequestBytes sets the largest request body [Barrier.Handler] reads (default 1 MiB); a
// larger body is answered 400.
func WithMaxRequestBytes(n int64) BarrierOption { return func(o *barrierOptions) { o.maxBody = n } }

// WithBarrierRegisterer registers the barrier's txkit_barrier_ops_total on reg (listed in
// docs/metrics.md; default: none, still counted). Barriers on one reg share the series.
// [NewBarrier] fails with an error wrapping [ErrInvalidOption] when the name is taken on reg by
// a metric of another kind or labels.
func WithBarrierRegisterer(reg prometheus.Registerer) BarrierOption {
	return func(o *barrierOptions) { o.reg = reg }
}

func (o barrierOptions) validate() error {
	if o.maxBody < 1 {
		return fmt.Errorf("participant: max request bytes %d is below 1: %w", o.maxBody, ErrInvalidOption)
	}
	if o.unsigned && len(o.secrets) > 0 {
		return fmt.Errorf("participant: both WithSecrets and WithUnsignedRequests: %w", ErrInvalidOption)
	}
	if o.secrets != nil {
		if err := signing.CheckSecrets(o.secrets); err != nil {
			return fmt.Errorf("participant: secrets: %w: %w", err, ErrInvalidOption)
		}
	}
	// A timestamp may lie up to the window ahead of the clock, so a request stays acceptable until
	// receipt + 2 × window: its nonce must be kept at least that long.
	if o.window <= 0 || (len(o.secrets) > 0 && 2*o.window >= o.retain) {
		return fmt.Errorf("participant: signature window %v must be positive and twice it shorter than the retention %v (a replay is possible until receipt + 2 × window): %w",
			o.window, o.retain, ErrInvalidOption)
	}
	return nil
}

func (o barrierOptions) storeOptions() []idempotency.Option {
	return []idempotency.Option{
		idempotency.WithSchema(o.schema),
		idempotency.WithTable(o.table),
		idempotency.WithRetention(o.retain, o.schedule),
		idempotency.WithLogger(o.log),
		idempotency.WithPurgeBatch(o.batch),
	}
}
