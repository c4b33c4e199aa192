package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/signing"
)

// DBTX is what [Notifier.Enqueue] writes with: a pgx.Tx of the caller (usual), a *pgx.Conn or a
// *pgxpool.Pool.
type DBTX = pgutil.DBTX // the one interface of every txkit package (Exec, Query, QueryRow)

// The limits of a notification's fields, in bytes. [Notifier.Enqueue] refuses a longer one with
// an error wrapping [ErrTooLarge], and an inbox (package notify/inbox) reads a delivery of up to MaxPayloadLen plus
// room for the rest of its body (a longer one is answered 413), so every notification enqueued can
// be delivered.
const (
	MaxPayloadLen  = 1 << 20 // the payload (JSON)
	MaxKeyLen      = 200     // the business key
	MaxReceiverLen = 200     // the receiver's name
)

// maxDeliveryLen bounds a delivery's JSON body, and a query's answer: the payload, the key and the
// receiver's name even if JSON escaped every byte of them (6 bytes each), and the other fields.
const maxDeliveryLen = MaxPayloadLen + 6*(MaxKeyLen+MaxReceiverLen) + 4096

// Receiver is a system that is told of results: where deliveries go and how they are signed.
type Receiver struct {
	// Name identifies the receiver in notifications, headers and queries (at most
	// [MaxReceiverLen] bytes).
	Name string
	// URL is where deliveries are POSTed: https:// (http:// only with [WithPlainHTTP]).
	URL string
	// Secrets are the HMAC-SHA256 keys shared with the receiver, each at least 16 bytes. The
	// first signs deliveries and the answers to the receiver's queries; all of them verify the
	// receiver's queries. During a key rotation the receiver accepts both the
	// old and the new key while the sender moves from one to the other.
	Secrets []string
	// Echo, when set, is the body a receiver must answer (with a 2xx status) to acknowledge a
	// delivery, as payment platforms require ("success"); anything else counts as a failure.
	Echo string
	// Concurrency bounds the leader's deliveries to this receiver in flight at once (default
	// 4), so that a slow receiver never holds up the others, and the posts of one [Notifier.Do]
	// call; [Notifier.Deliver] posts in its caller's goroutine.
	Concurrency int
}

// Notification is a result to tell a receiver.
type Notification struct {
	ID       uuid.UUID       // zero: a new UUIDv7
	Receiver string          // a Receiver's Name
	Key      string          // the business key (an order number): unique per receiver
	Payload  json.RawMessage // the result, JSON
}

// Status is the state of a notification.
type Status uint8

// The states of a notification.
const (
	StatusPending   Status = iota + 1 // being delivered, or waiting for its next attempt
	StatusDelivered                   // the receiver acknowledged it
	StatusFailed                      // every attempt of the schedule failed; see Notifier.Redeliver
)

var statusNames = map[Status]string{StatusPending: "pending", StatusDelivered: "delivered", StatusFailed: "failed"}

func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText writes the status's name.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a status's name.
func (s *Status) UnmarshalText(b []byte) error {
	for st, n := range statusNames {
		if n == string(b) {
			*s = st
			return nil
		}
	}
	return fmt.Errorf("notify: unknown status %q: %w", b, ErrInvalidOption)
}

// Record is a notification as the sender keeps it.
type Record struct {
	Notification
	Status         Status
	Attempts       int        // attempts made
	NextAttemptAt  time.Time  // when the next attempt is due (pending)
	LastStatusCode int        // the HTTP status of the last attempt (0: no answer)
	LastError      string     // why the last attempt failed
	CreatedAt      time.Time  //
	DeliveredAt    *time.Time // when it was acknowledged
}

// Attempt is one delivery attempt.
type Attempt struct {
	N          int           // 1 for the first; redeliveries go on counting
	At         time.Time     // when its result was recorded
	StatusCode int           // the HTTP status (0: no answer)
	Latency    time.Duration // from sending to the answer (or the failure)
	Error      string        // why it failed; empty for a success
}

// tracerName is the instrumentation scope of the notifier's and the inbox's spans.
const tracerName = "github.com/txkit/txkit/notify"

// Notifier records notifications in the caller's transactions ([Notifier.Enqueue]) and delivers
// them by signed HTTP POST — the first attempt from the enqueuing process after the commit
// ([Notifier.Do], [Notifier.Deliver]), the others on a schedule ([Notifier.Run], on the elected
// leader only) — until the receiver acknowledges or the schedule runs out. It also answers
// receivers' queries ([Notifier.QueryHandler]) and gives operators the failed ones
// ([Notifier.ListFailed], [Notifier.Redeliver]).
//
// Notifier is safe for concurrent use by multiple goroutines; Run must not run twice at once.
type Notifier struct {
	pool      *pgxpool.Pool
	o         options
	receivers map[string]Receiver
	fence     *fence.Fence
	table     string       // quoted
	attempts  string       // quoted
	marks     string       // quoted: the leader's watermarks (dueFrom)
	insert    string       // Do's deferred insert (insertClaimed)
	recordSQL [2][2]string // writeAttempts' statements: [async][single] (recordStatement)
	lease     any          // float64: the seconds of Do's claim (call timeout + directLease), boxed once
	name      string       // unquoted, schema-qualified: the fence resource
	channel   string       // LISTEN/NOTIFY: the schema-qualified name, shortened to 63 bytes if need be
	lockKey   int64
	running   atomic.Bool
	stats     stats
	mu        sync.Mutex                   // guards the leader's per-receiver state (the terms' flights)
	job       leaderJob                    // nil without an elector
	direct    map[string]*flight           // Deliver's circuit breaker of each receiver, in this process
	claims    *grouped[uuid.UUID, claimed] // Deliver's claims, shared by concurrent calls
	records   *grouped[result, struct{}]   // Deliver's records, shared by concurrent calls
	later     later                        // Do's records, sent in the background (do.go)
	metrics   *metrics
	tracer    trace.Tracer
	fails     *obs.LogLimiter // the lines of failures retried at the next tick: one per obs.LogInterval
}

type stats struct{ delivered, failedAttempts, failed, breakerOpen atomic.Int64 }

// Stats counts what a [Notifier] did.
type Stats struct {
	Delivered      int64 // notifications acknowledged
	FailedAttempts int64 // attempts that failed
	Failed         int64 // notifications that ran out of attempts
	Fenced         int64 // leadership terms the fence ended (a newer leader had written)
	BreakerOpened  int64 // times a receiver's circuit opened
}

// Stats returns the notifier's counters.
func (n *Notifier) Stats() Stats {
	st := Stats{Delivered: n.stats.delivered.Load(), FailedAttempts: n.stats.failedAttempts.Load(),
		Failed: n.stats.failed.Load(), BreakerOpened: n.stats.breakerOpen.Load()}
	if n.job != nil {
		st.Fenced = n.job.Fenced()
	}
	return st
}

// New returns a Notifier that keeps its notifications in pool and delivers them to receivers. It
// does not touch the database: call [Notifier.Migrate]. A receiver without a name (or with one
// longer than [MaxReceiverLen]), without an https:// URL (http:// only with [WithPlainHTTP]), with
// no secret or one shorter than 16 bytes, two with one name, or an unusable option returns an
// error wrapping [ErrInvalidOption].
func New(pool *pgxpool.Pool, receivers []Receiver, opts ...Option) (*Notifier, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, fmt.Errorf("notify: nil pool: %w", ErrInvalidOption)
	}
	rs := map[string]Receiver{}
	for _, r := range receivers {
		if err := checkReceiver(r, o.plainHTTP); err != nil {
			return nil, err
		}
		if _, dup := rs[r.Name]; dup {
			return nil, fmt.Errorf("notify: receiver %q twice: %w", r.Name, ErrInvalidOption)
		}
		if r.Concurrency == 0 {
			r.Concurrency = o.concurrencyPerRcv
		}
		r.Secrets = append([]string(nil), r.Secrets...)
		rs[r.Name] = r
	}
	m, err := newMetrics(o.reg, receivers, o.metricReceivers)
	if err != nil {
		return nil, err
	}
	fc, err := fence.New(pool, fence.WithTable(o.schema, ""))
	if err != nil {
		return nil, fmt.Errorf("notify: fence: %w: %w", err, ErrInvalidOption)
	}
	table, name := pgutil.Table(o.schema, o.table)
	attempts, _ := pgutil.Table(o.schema, o.table+"_attempt")
	marks, _ := pgutil.Table(o.schema, o.table+"_mark")
	n := &Notifier{pool: pool, o: o, receivers: rs, fence: fc, table: table, attempts: attempts, marks: marks, insert: insertClaimed(table), name: name,
		channel: pgutil.Channel(o.schema, o.table), lockKey: pgutil.MigrateLockKey("txkit-notify:" + name),
		metrics: m, tracer: obs.TracerProvider(o.tp).Tracer(tracerName), fails: obs.NewLogLimiter(obs.LogInterval, nil)}
	n.lease = (o.callTimeout + directLease).Seconds()
	for a := range 2 {
		for one := range 2 {
			n.recordSQL[a][one] = n.recordStatement(a == 1, one == 1)
		}
	}
	n.direct = make(map[string]*flight, len(rs))
	for name := range rs {
		n.direct[name] = &flight{direct: true}
	}
	n.newGroups()
	if n.job, err = n.newJob(); err != nil {
		return nil, err
	}
	return n, nil
}

func checkReceiver(r Receiver, plainHTTP bool) error {
	if err := pgutil.CheckText(r.Name, MaxReceiverLen); err != nil {
		return fmt.Errorf("notify: receiver name %q: %w: %w", r.Name, err, ErrInvalidOption)
	}
	if err := checkURL(r.URL, plainHTTP); err != nil {
		return fmt.Errorf("notify: receiver %s: %w", r.Name, err)
	}
	if err := signing.CheckSecrets(r.Secrets); err != nil {
		return fmt.Errorf("notify: receiver %s: %w: %w", r.Name, err, ErrInvalidOption)
	}
	if r.Concurrency < 0 {
		return fmt.Errorf("notify: receiver %s: concurrency %d: %w", r.Name, r.Concurrency, ErrInvalidOption)
	}
	return nil
}

// checkURL returns an error wrapping ErrInvalidOption unless raw is an https:// URL with a host,
// or an http:// one when plainHTTP allows it.
func checkURL(raw string, plainHTTP bool) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return fmt.Errorf("URL %q is not an https URL: %w", raw, ErrInvalidOption)
	case u.Scheme == "http" && !plainHTTP:
		return fmt.Errorf("URL %q is plain http (allow it with WithPlainHTTP or Client.PlainHTTP): %w", raw, ErrInvalidOption)
	}
	return nil
}

// Migrate creates the schema (if set), the notifications and attempts tables and the fence table
// when they do not exist. It is idempotent and safe to run from several processes at once (an
// advisory lock serializes them); ctx scopes only this call.
func (n *Notifier) Migrate(ctx context.Context) error {
	ddl := fmt.Sprintf(`select pg_advisory_xact_lock(%d);
%s
create table if not exists %s (
    id              uuid        primary key,
    receiver        text        not null,
    key             text        not null,
    payload         bytea       not null,
    status          text        not null default 'pending' check (status in ('pending', 'delivered', 'failed')),
    attempts        integer     not null default 0, -- attempts of the current schedule (Redeliver resets it)
    tries           integer     not null default 0, -- attempts ever made: numbers the attempts
    next_attempt_at timestamptz not null default `+dueNow+`,
    last_status     integer,
    last_error      text,
    created_at      timestamptz not null default now(),
    updated_at      timestamptz not null default now(),
    delivered_at    timestamptz,
    latency_ms      double precision, -- of the successful attempt
    trace_context   text,             -- obs.EncodeTrace of the enqueuing ctx: deliveries join its trace
    claimed         boolean     not null default false, -- its first attempt is taken (Deliver or the leader)
    unique (receiver, key)
) with (fillfactor = 80);
do $$ begin -- the columns of later versions; a role that does not own the table needs them there
    alter table %s add column if not exists latency_ms double precision;
    alter table %s add column if not exists trace_context text;
    alter table %s add column if not exists claimed boolean not null default false;
exception when insufficient_privilege then null; end $$;
-- The leader's due index: no predicate and no column a delivery changes, so that the record of a
-- success is a HOT update (docs/notify.md, "The due index"). Tables of earlier versions lose their
-- partial index (status = 'pending'), get the due time's new default and room for HOT updates;
-- a role that does not own the table keeps them as they were (it needs the owner).
do $$ begin
    create index if not exists %s on %s (receiver, next_attempt_at);
    drop index if exists %s;
    alter table %s alter column next_attempt_at set default `+dueNow+`, set (fillfactor = 80);
    -- The failed notifications, for operators: due at infinity (the success record changes no
    -- column of this index either).
    create index if not exists %s on %s (created_at) where next_attempt_at = 'infinity';
exception when insufficient_privilege then null; end $$;
update %s set next_attempt_at = 'infinity' where status = 'failed' and next_attempt_at <> 'infinity'; -- once per version
-- The leader's watermark of each receiver (dueFrom): none of its notifications due before due_from
-- is pending, so its scans start there instead of at the delivered history.
create table if not exists %s (
    receiver text        primary key,
    due_from timestamptz not null
);
-- The failed attempts; the successful one is the delivered notification's own row (tries,
-- delivered_at, last_status, latency_ms), which saves a row per delivery.
create table if not exists %s (
    id          uuid             not null, -- no foreign key: its check would lock each notification again

    n           integer          not null,
    at          timestamptz      not null default now(),
    status_code integer          not null,
    latency_ms  double precision not null,
    error       text,
    primary key (id, n)
);`, n.lockKey, n.createSchema(), n.table, n.table, n.table, n.table,
		pgx.Identifier{n.o.table + "_due_at"}.Sanitize(), n.table, n.oldDueIndex(), n.table,
		pgx.Identifier{n.o.table + "_failed"}.Sanitize(), n.table, n.table, n.marks, n.attempts)
	if err := pgutil.MigrateOnce(ctx, n.pool, n.o.schema, ddl, nil); err != nil {
		return fmt.Errorf("notify: migrate %s: %w", n.name, err)
	}
	if err := n.fence.Migrate(ctx); err != nil {
		return fmt.Errorf("notify: migrate %s: %w", n.name, err)
	}
	return nil
}

// oldDueIndex is the quoted, schema-qualified name of the partial due index of earlier versions.
func (n *Notifier) oldDueIndex() string {
	if n.o.schema == "" {
		return pgx.Identifier{n.o.table + "_due"}.Sanitize()
	}
	return pgx.Identifier{n.o.schema, n.o.table + "_due"}.Sanitize()
}

func (n *Notifier) createSchema() string {
	if n.o.schema == "" {
		return ""
	}
	return "create schema if not exists " + pgx.Identifier{n.o.schema}.Sanitize() + ";"
}

// Enqueue records nt in tx — the caller's own transaction, so the notification exists if and only
// if the result it reports was committed — and returns its id. Given the ctx and tx of
// [Notifier.Do]'s fn, it writes the notification claimed, and Do posts it after the commit;
// otherwise, once tx has committed, call [Notifier.Deliver] with the id to post it at once from
// this process. What that attempt does not finish (a failure, a process that died first, no
// Deliver call) the leader delivers: an unclaimed one from its next tick ([WithTick]), or within
// 100 ms while the receiver has pending notifications; a claimed one after the claim's lease.
// Enqueuing a second notification with the receiver and key of an existing one records nothing
// and returns the existing id: enqueuing is idempotent per business key. An unknown receiver, an empty key, or a payload that is not JSON returns an error
// wrapping [ErrInvalidNotification]; a payload, key or receiver name over its limit
// ([MaxPayloadLen], [MaxKeyLen], [MaxReceiverLen]) one wrapping [ErrTooLarge] as well, before
// anything is written; a nil tx one wrapping [ErrNilTx]. It blocks for one statement (two when the key has one; none in Do's transaction). The trace
// context of ctx (its span, if any) is stored with the notification: every delivery attempt is a
// span in that trace ([WithTelemetry]).
func (n *Notifier) Enqueue(ctx context.Context, tx DBTX, nt Notification) (uuid.UUID, error) {
	if tx == nil || (reflect.ValueOf(tx).Kind() == reflect.Pointer && reflect.ValueOf(tx).IsNil()) {
		return uuid.Nil, fmt.Errorf("notify: enqueue %s/%s: %w", nt.Receiver, nt.Key, ErrNilTx)
	}
	switch {
	case len(nt.Receiver) > MaxReceiverLen:
		return uuid.Nil, fmt.Errorf("notify: enqueue: receiver name of %d bytes, more than %d: %w: %w",
			len(nt.Receiver), MaxReceiverLen, ErrTooLarge, ErrInvalidNotification)
	case len(nt.Key) > MaxKeyLen:
		return uuid.Nil, fmt.Errorf("notify: enqueue %s: key of %d bytes, more than %d: %w: %w",
			nt.Receiver, len(nt.Key), MaxKeyLen, ErrTooLarge, ErrInvalidNotification)
	case len(nt.Payload) > MaxPayloadLen:
		return uuid.Nil, fmt.Errorf("notify: enqueue %s/%s: payload of %d bytes, more than %d: %w: %w",
			nt.Receiver, nt.Key, len(nt.Payload), MaxPayloadLen, ErrTooLarge, ErrInvalidNotification)
	}
	if _, ok := n.receivers[nt.Receiver]; !ok {
		return uuid.Nil, fmt.Errorf("notify: enqueue: unknown receiver %q: %w", nt.Receiver, ErrInvalidNotification)
	}
	if err := pgutil.CheckText(nt.Key, MaxKeyLen); err != nil {
		return uuid.Nil, fmt.Errorf("notify: enqueue %s: key %q: %w: %w", nt.Receiver, nt.Key, err, ErrInvalidNotification)
	}
	if len(nt.Payload) == 0 || !json.Valid(nt.Payload) {
		return uuid.Nil, fmt.Errorf("notify: enqueue %s/%s: payload is not JSON: %w", nt.Receiver, nt.Key, ErrInvalidNotification)
	}
	id := nt.ID
	if id == uuid.Nil {
		var err error
		if id, err = uuid.NewV7(); err != nil {
			return uuid.Nil, fmt.Errorf("notify: enqueue: %w", err)
		}
	}
	trace := obs.EncodeTrace(ctx)
	c := pgutil.Collecting[collected](ctx, n, tx)
	if c != nil && ctx.Value(sendAtOnce{}) == nil && n.deferEnqueue(c, nt, id, trace) {
		return id, nil
	}
	var (
		err      error
		created  time.Time
		inserted bool
	)
	// The insert returns no row when the receiver and key have a notification already (the rare
	// case): a second statement reads its id. (One statement with a fallback select in it cost
	// every insert about a tenth more of PostgreSQL's time.)
	if c == nil {
		err = tx.QueryRow(ctx, `insert into `+n.table+` (id, receiver, key, payload, trace_context) values ($1, $2, $3, $4, nullif($5, ''))
	on conflict (receiver, key) do nothing returning id`,
			pgtype.UUID{Bytes: id, Valid: true}, nt.Receiver, nt.Key, []byte(nt.Payload), trace).Scan(&id)
	} else {
		// In Do's transaction: written claimed by this process, its due time past the post and
		// its record (the lease Deliver's claim sets), for Do to post after the commit.
		err = tx.QueryRow(ctx, `insert into `+n.table+` (id, receiver, key, payload, trace_context, claimed, next_attempt_at)
	values ($1, $2, $3, $4, nullif($5, ''), true, clock_timestamp() + make_interval(secs => $6))
	on conflict (receiver, key) do nothing returning id, created_at`,
			pgtype.UUID{Bytes: id, Valid: true}, nt.Receiver, nt.Key, []byte(nt.Payload), trace, (n.o.callTimeout+directLease).Seconds()).Scan(&id, &created)
		inserted = err == nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		// Not inserted: the receiver and key have a notification, committed before (or by this
		// transaction), or by another transaction while the statement ran (the insert waited for
		// it to commit and did nothing). A new statement (read committed) sees it.
		err = tx.QueryRow(ctx, `select id from `+n.table+` where receiver = $1 and key = $2`, nt.Receiver, nt.Key).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			err = fmt.Errorf("another transaction enqueued it and this one cannot see it (isolation above read committed?): %w", err)
		}
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("notify: enqueue %s/%s: %w", nt.Receiver, nt.Key, err)
	}
	if inserted { // not an existing notification of the key: that one is not Do's to post
		c.Rows = append(c.Rows, collected{enqueued: time.Now(), d: due{Delivery: Delivery{ID: id, Receiver: nt.Receiver,
			Key: nt.Key, Payload: append(json.RawMessage(nil), nt.Payload...), CreatedAt: created}, trace: trace, attempt: 1}})
	}
	return id, nil
}

// A failed notification is due at infinity (its index, for ListFailed); its NextAttemptAt is
// when it failed.
const recordColumns = `id, receiver, key, payload, status, attempts,
	case when next_attempt_at = 'infinity' then updated_at else next_attempt_at end, coalesce(last_status, 0),
	coalesce(last_error, ''), created_at, delivered_at`

func scanRecord(row pgx.CollectableRow) (*Record, error) {
	var r Record
	var payload []byte
	var status string
	if err := row.Scan(&r.ID, &r.Receiver, &r.Key, &payload, &status, &r.Attempts, &r.NextAttemptAt,
		&r.LastStatusCode, &r.LastError, &r.CreatedAt, &r.DeliveredAt); err != nil {
		return nil, err
	}
	r.Payload = payload
	if err := r.Status.UnmarshalText([]byte(status)); err != nil {
		return nil, err
	}
	return &r, nil
}

func (n *Notifier) one(ctx context.Context, what, where string, args ...any) (*Record, error) {
	rows, err := n.pool.Query(ctx, `select `+recordColumns+` from `+n.table+` where `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("notify: %s: %w", what, err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanRecord)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("notify: %s: %w", what, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("notify: %s: %w", what, err)
	}
	return r, nil
}

// Get returns the notification id, or an error wrapping [ErrNotFound].
func (n *Notifier) Get(ctx context.Context, id uuid.UUID) (*Record, error) {
	return n.one(ctx, "get "+id.String(), `id = $1`, id)
}

// ByKey returns the notification of receiver for business key, or an error wrapping
// [ErrNotFound].
func (n *Notifier) ByKey(ctx context.Context, receiver, key string) (*Record, error) {
	return n.one(ctx, "get "+receiver+"/"+key, `receiver = $1 and key = $2`, receiver, key)
}

// Attempts returns every attempt made for notification id, first first, across redeliveries
// (none for an unknown id).
func (n *Notifier) Attempts(ctx context.Context, id uuid.UUID) ([]Attempt, error) {
	rows, err := n.pool.Query(ctx, `select n, at, status_code, latency_ms, coalesce(error, '') from `+n.attempts+` where id = $1
union all
select tries, delivered_at, last_status, latency_ms, '' from `+n.table+`
where id = $1 and status = 'delivered' and latency_ms is not null
order by 1`, id)
	if err != nil {
		return nil, fmt.Errorf("notify: attempts of %s: %w", id, err)
	}
	as, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		var ms float64
		err := r.Scan(&a.N, &a.At, &a.StatusCode, &ms, &a.Error)
		a.Latency = time.Duration(ms * float64(time.Millisecond))
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("notify: attempts of %s: %w", id, err)
	}
	return as, nil
}

// ListFailed returns up to limit failed notifications, oldest first, for operators.
func (n *Notifier) ListFailed(ctx context.Context, limit int) ([]*Record, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := n.pool.Query(ctx, `select `+recordColumns+` from `+n.table+
		` where next_attempt_at = 'infinity' and status = 'failed' order by created_at limit $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("notify: list failed: %w", err)
	}
	rs, err := pgx.CollectRows(rows, scanRecord)
	if err != nil {
		return nil, fmt.Errorf("notify: list failed: %w", err)
	}
	return rs, nil
}

// Redeliver puts the failed notification id back on the schedule from its start: its next
// attempt is due now, and it gets the whole schedule again. Its earlier attempts stay recorded.
// An unknown id returns an error wrapping [ErrNotFound]; one that is not failed returns one
// wrapping [ErrInvalidOption].
func (n *Notifier) Redeliver(ctx context.Context, id uuid.UUID) error {
	var status string
	err := n.pool.QueryRow(ctx, `with u as (
	update `+n.table+` set status = 'pending', attempts = 0, next_attempt_at = `+dueNow+`, updated_at = now()
	where id = $1 and status = 'failed' returning 1)
select coalesce((select 'redelivered' from u), (select status from `+n.table+` where id = $1), '')`, id).Scan(&status)
	switch {
	case err != nil:
		return fmt.Errorf("notify: redeliver %s: %w", id, err)
	case status == "":
		return fmt.Errorf("notify: redeliver %s: %w", id, ErrNotFound)
	case status != "redelivered":
		return fmt.Errorf("notify: redeliver %s: it is %s, not failed: %w", id, status, ErrInvalidOption)
	}
	if _, err := n.pool.Exec(ctx, `select pg_notify($1, '')`, n.channel); err != nil {
		return fmt.Errorf("notify: redeliver %s: notify: %w", id, err)
	}
	return nil
}
