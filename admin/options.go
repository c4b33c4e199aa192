package admin

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/signing"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/outbox"
)

// Option configures an [Admin]. Options are applied in order by [New], which validates the result.
type Option func(*options)

// LogSource names a coordinator log: the tables Prefix+"global" and Prefix+"branch" of package
// core. Name shows in every [Transaction] read from it. A log spread over several databases
// (coordinator/shard) is one LogSource per shard, each with its shard's Pool.
type LogSource struct {
	Name   string        // "tcc", "saga", "2pc", "3pc", "workflow", or a name of the caller's ("tcc/1": a shard)
	Prefix string        // the protocol's table prefix (txkit_, txkit_saga_, txkit_2pc_, txkit_3pc_, txkit_workflow_)
	Pool   *pgxpool.Pool // the database holding the log (nil: the Admin's pool), in the schema of [WithSchema]
}

// StandardLogs returns the logs of the five coordinators at their default table prefixes: tcc
// "txkit_", saga "txkit_saga_", 2pc "txkit_2pc_", 3pc "txkit_3pc_" and workflow "txkit_workflow_".
func StandardLogs() []LogSource {
	return []LogSource{
		{Name: "tcc", Prefix: "txkit_"},
		{Name: "saga", Prefix: "txkit_saga_"},
		{Name: "2pc", Prefix: "txkit_2pc_"},
		{Name: "3pc", Prefix: "txkit_3pc_"},
		{Name: "workflow", Prefix: "txkit_workflow_"},
	}
}

// Election is a leader election whose current leader [Admin.Leaders] reports: the coordinator's,
// relay's or notifier's election path, read through a [lock.Inspector] of its backend.
type Election struct {
	Name      string         // shown to operators ("tcc recovery", "outbox relay")
	Path      string         // the election's path (ZooKeeper) or name (PostgreSQL, Redis)
	Inspector lock.Inspector // reads the path's holder without taking part
}

// Lock is a lock whose holder and waiters [Admin.Locks] reports.
type Lock struct {
	Name      string
	Path      string
	Inspector lock.Inspector
}

// DefaultAuditTable is the audit table's name unless [WithTables] says otherwise.
const DefaultAuditTable = "txkit_admin_audit"

// DefaultNotifyTable is the notifications table's name unless [WithTables] says otherwise
// (notify's own default).
const DefaultNotifyTable = "txkit_notify"

// DefaultHMACWindow is how far a signed request's timestamp may be from the server's clock.
const DefaultHMACWindow = 5 * time.Minute

type options struct {
	schema      string
	logs        []LogSource
	outboxTable string
	notifyTable string
	auditTable  string
	elections   []Election
	locks       []Lock
	tokens      map[string]string   // actor -> bearer token
	readTokens  map[string]string   // actor -> bearer token that may only read
	hosts       map[string]bool     // Host names allowed besides loopback (lower case)
	hmac        map[string][]string // actor -> secrets
	hmacWindow  time.Duration
	log         *slog.Logger
	gatherer    prometheus.Gatherer
	reg         prometheus.Registerer
	now         func() time.Time // checks signed requests' timestamps; tests set it (export_test.go)
	rate        float64          // POSTs a second per client address; 0: no limit
	burst       int
	retention   time.Duration // audit rows older than this are purged by Run
	purgeSpec   string
}

func defaultOptions() options {
	return options{
		logs:        StandardLogs(),
		outboxTable: outbox.DefaultTable,
		notifyTable: DefaultNotifyTable,
		auditTable:  DefaultAuditTable,
		tokens:      map[string]string{},
		readTokens:  map[string]string{},
		hosts:       map[string]bool{},
		hmac:        map[string][]string{},
		hmacWindow:  DefaultHMACWindow,
		log:         slog.New(slog.DiscardHandler),
		now:         time.Now,
		rate:        DefaultRate,
		burst:       DefaultBurst,
		retention:   DefaultAuditRetention,
		purgeSpec:   "@every 1h",
	}
}

// The defaults of [WithRateLimit] and [WithAuditRetention].
const (
	DefaultRate           = 5.0                 // POSTs a second per client address
	DefaultBurst          = 20                  // POSTs at once per client address
	DefaultAuditRetention = 30 * 24 * time.Hour // how long audit rows are kept
)

// WithSchema sets the PostgreSQL schema of every table read and of the audit table (default: none,
// so the connections' search_path decides).
func WithSchema(name string) Option { return func(o *options) { o.schema = name } }

// Tables names the tables an [Admin] reads and writes, for a service that renamed them; an empty
// field keeps its default.
type Tables struct {
	// Logs are the coordinator logs read by [Admin.Transactions] and [Admin.Transaction] (nil:
	// [StandardLogs]). A log whose tables do not exist is skipped, not an error.
	Logs   []LogSource
	Outbox string // the outbox's (default outbox.DefaultTable)
	Notify string // the notifications' (default [DefaultNotifyTable])
	Audit  string // the one recording mutating calls (default [DefaultAuditTable])
}

// WithTables sets the coordinator logs and the outbox, notifications and audit tables' names
// (default [Tables] zero: every default), for a service whose coordinators, outbox or notifier
// were given other tables.
func WithTables(t Tables) Option {
	return func(o *options) {
		if t.Logs != nil {
			o.logs = append([]LogSource(nil), t.Logs...)
		}
		o.outboxTable = cmp.Or(t.Outbox, o.outboxTable)
		o.notifyTable = cmp.Or(t.Notify, o.notifyTable)
		o.auditTable = cmp.Or(t.Audit, o.auditTable)
	}
}

// WithInspected adds the elections whose leaders [Admin.Leaders] reports and the locks whose
// holders and waiters [Admin.Locks] reports (default: none); either may be nil.
func WithInspected(elections []Election, locks []Lock) Option {
	return func(o *options) {
		o.elections = append(o.elections, elections...)
		o.locks = append(o.locks, locks...)
	}
}

// WithTokens adds the bearer tokens of the actors, actor name -> token (either map may be nil):
// write's actors may mutate, and read and reveal too; read's may only read. A request carrying
// "Authorization: Bearer <token>" acts as that token's actor; tokens are compared in constant time.
// Every read of [Admin.Handler] and of the console needs a credential — one of these tokens, an
// HMAC signature or a session of [Admin.Login] — and an Admin without any answers every read 401;
// without write tokens and HMAC secrets every action and reveal is refused.
func WithTokens(write, read map[string]string) Option {
	return func(o *options) {
		for a, t := range write {
			o.tokens[a] = t
		}
		for a, t := range read {
			o.readTokens[a] = t
		}
	}
}

// WithAllowedHosts adds the names (or addresses) clients reach the API and the console by, besides
// the loopback ones ([Admin.AllowedHost]): a request with another Host is answered 421.
func WithAllowedHosts(hosts ...string) Option {
	return func(o *options) {
		for _, h := range hosts {
			o.hosts[strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")] = true
		}
	}
}

// WithHMACSecrets lets actor sign mutating requests the way txkit's participant requests are
// signed (headers X-Txkit-Timestamp and X-Txkit-Signature over the timestamp, method, target and
// body; see [DefaultHMACWindow]) with any of secrets (two during a rotation; each at least 16
// bytes).
func WithHMACSecrets(actor string, secrets ...string) Option {
	return func(o *options) { o.hmac[actor] = append([]string(nil), secrets...) }
}

// WithLogger sets the logger (default: discard). Internal errors behind a 500 answer are logged
// here with the request id the answer names.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = obs.Logger(l) } }

// WithMetrics sets the Prometheus metrics the Admin writes and reads. reg registers its
// txkit_admin_refused_total (listed in docs/metrics.md; default: none, still counted); [New] fails
// with an error wrapping [ErrInvalidOption] when the name is taken on reg by a metric of another
// kind or labels. g is where [Admin.Overview] takes its Figures from: the txkit_ metrics it returns
// (a prometheus.Registry, or one reading a /metrics page; default: none, no figures). A nil reg or
// g keeps that part as it was.
func WithMetrics(reg prometheus.Registerer, g prometheus.Gatherer) Option {
	return func(o *options) {
		if reg != nil {
			o.reg = reg
		}
		if g != nil {
			o.gatherer = g
		}
	}
}

// WithRateLimit sets how many POSTs [Admin.Handler] takes from one client address (the host of
// the request's RemoteAddr): perSecond on average, burst at once (default [DefaultRate],
// [DefaultBurst]). Past it a POST is answered 429 with Retry-After, before authentication and
// without an audit row. WithRateLimit(0, 0) turns the limit off, for a server behind a proxy
// that limits instead (behind a proxy every client has the proxy's address).
func WithRateLimit(perSecond float64, burst int) Option {
	return func(o *options) { o.rate, o.burst = perSecond, burst }
}

// WithAuditRetention sets how long [Admin.Run] keeps audit rows (default [DefaultAuditRetention])
// and the cron spec of its purge (default "@every 1h"). keep must be longer than
// [DefaultHMACWindow], so that a signature is remembered for as long as it verifies.
func WithAuditRetention(keep time.Duration, spec string) Option {
	return func(o *options) { o.retention, o.purgeSpec = keep, spec }
}

func (o *options) validate() error {
	if o.schema != "" {
		if err := pgutil.CheckText(o.schema, maxIdent); err != nil {
			return fmt.Errorf("admin: schema %q: %w: %w", o.schema, err, ErrInvalidOption)
		}
	}
	if err := pgutil.CheckText(o.auditTable, maxIdent-len("_nonce")); err != nil {
		return fmt.Errorf("admin: audit table %q: %w: %w", o.auditTable, err, ErrInvalidOption)
	}
	names := map[string]bool{}
	for _, l := range o.logs {
		if l.Name == "" || names[l.Name] {
			return fmt.Errorf("admin: log name %q empty or used twice: %w", l.Name, ErrInvalidOption)
		}
		names[l.Name] = true
	}
	if err := o.checkCredentials(); err != nil {
		return err
	}
	for h := range o.hosts {
		if h == "" || strings.ContainsAny(h, "/: \t") && net.ParseIP(h) == nil {
			return fmt.Errorf("admin: allowed host %q: want a host name or address, without a port: %w", h, ErrInvalidOption)
		}
	}
	for _, e := range o.elections {
		if e.Name == "" || e.Path == "" || e.Inspector == nil {
			return fmt.Errorf("admin: election %q at %q: name, path and inspector are needed: %w", e.Name, e.Path, ErrInvalidOption)
		}
	}
	for _, l := range o.locks {
		if l.Name == "" || l.Path == "" || l.Inspector == nil {
			return fmt.Errorf("admin: lock %q at %q: name, path and inspector are needed: %w", l.Name, l.Path, ErrInvalidOption)
		}
	}
	switch {
	case o.log == nil:
		return fmt.Errorf("admin: nil logger: %w", ErrInvalidOption)
	case o.now == nil:
		return fmt.Errorf("admin: nil clock: %w", ErrInvalidOption)
	case o.hmacWindow <= 0:
		return fmt.Errorf("admin: HMAC window %v: %w", o.hmacWindow, ErrInvalidOption)
	case !(o.rate == 0 && o.burst == 0) && (o.rate <= 0 || o.burst < 1):
		return fmt.Errorf("admin: rate limit %v a second, burst %d: want both positive, or both 0 for none: %w", o.rate, o.burst, ErrInvalidOption)
	case o.retention <= o.hmacWindow:
		return fmt.Errorf("admin: audit retention %v: must be longer than the HMAC window %v: %w", o.retention, o.hmacWindow, ErrInvalidOption)
	}
	if err := pgutil.CheckCron(o.purgeSpec); err != nil {
		return fmt.Errorf("admin: audit purge schedule %q: %w: %w", o.purgeSpec, err, ErrInvalidOption)
	}
	return nil
}

// CLIActorPrefix starts the actor names of the txkit command ("cli:" + $USER or $TXKIT_ACTOR),
// which a token or HMAC actor may not take.
const CLIActorPrefix = "cli:"

// checkCredentials refuses a credential given to two actors (one actor would be credited with
// the other's calls; sorted, so that the error names the same two every time), an actor with a
// token and a read token, and actor names [checkActor] refuses.
func (o *options) checkCredentials() error {
	owner := map[string]string{} // token or secret -> the actor it was given to
	for _, set := range []map[string]string{o.tokens, o.readTokens} {
		for _, a := range slices.Sorted(maps.Keys(set)) {
			t := set[a]
			if err := checkActor(a); err != nil {
				return fmt.Errorf("admin: token of %q: %w: %w", a, err, ErrInvalidOption)
			}
			switch {
			case len(t) < minTokenLen:
				return fmt.Errorf("admin: token of %s: %d bytes, shorter than %d: %w", a, len(t), minTokenLen, ErrInvalidOption)
			case owner[t] != "":
				return fmt.Errorf("admin: token of %s: given to %s too: %w", a, owner[t], ErrInvalidOption)
			}
			owner[t] = a
		}
	}
	for a := range o.readTokens {
		if _, ok := o.tokens[a]; ok {
			return fmt.Errorf("admin: actor %s has a token and a read token: give it one: %w", a, ErrInvalidOption)
		}
	}
	for _, a := range slices.Sorted(maps.Keys(o.hmac)) {
		if err := checkActor(a); err != nil {
			return fmt.Errorf("admin: HMAC secrets of %q: %w: %w", a, err, ErrInvalidOption)
		}
		if err := signing.CheckSecrets(o.hmac[a]); err != nil {
			return fmt.Errorf("admin: HMAC secrets of %s: %w: %w", a, err, ErrInvalidOption)
		}
		for _, s := range o.hmac[a] {
			if other := owner[s]; other != "" && other != a {
				return fmt.Errorf("admin: HMAC secret of %s: given to %s too (as a secret or a token): %w", a, other, ErrInvalidOption)
			}
			owner[s] = a
		}
	}
	return nil
}

// checkActor refuses an actor name that is empty or that the txkit command's actors use.
func checkActor(a string) error {
	switch {
	case a == "":
		return errors.New("empty actor name")
	case strings.HasPrefix(a, CLIActorPrefix):
		return fmt.Errorf("the prefix %q is the txkit command's (its audit rows are %s$USER); name the actor otherwise", CLIActorPrefix, CLIActorPrefix)
	}
	return nil
}

const (
	maxIdent    = 63 // PostgreSQL's NAMEDATALEN - 1
	minTokenLen = 16 // bytes of a bearer token
)
