package outbox

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/placement"
)

//go:embed sql/*.sql
var sqlFS embed.FS

// Outbox writes messages into a PostgreSQL table inside the caller's transactions, for a [Relay]
// to deliver. It also holds the operator functions: [Outbox.Backlog], [Outbox.ListDead],
// [Outbox.Requeue].
//
// Outbox uses its pool for [Outbox.Migrate], [Outbox.Do] and its [Relay]; every other method takes the [DBTX]
// to work in, so that it runs in the caller's transaction. It is safe for concurrent use by
// multiple goroutines.
type Outbox struct {
	pool  *pgxpool.Pool
	o     options
	table string // quoted, schema-qualified
	name  string // unquoted, schema-qualified: for logs and the fence resource
	meta  string // quoted, schema-qualified: the table holding the partition count
	ddl   string
	q     queries

	mu     sync.Mutex
	relays []*Relay // running in this process: Do hands committed rows to them
}

type queries struct {
	enqueue, enqueueDirect, notify, due, deleteSent, fail, listDead, requeue, requeueAll, backlog, pending string
	partitions, unpartitioned                                                                              string
}

// New returns an Outbox on pool configured by opts. It does not touch the database: call
// [Outbox.Migrate] to create the table. It returns an error wrapping [ErrInvalidOption] when pool
// is nil or an option is unusable.
func New(pool *pgxpool.Pool, opts ...Option) (*Outbox, error) {
	if pool == nil {
		return nil, fmt.Errorf("outbox: nil pool: %w", ErrInvalidOption)
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	t, name := pgutil.Table(o.schema, o.table)
	meta, _ := pgutil.Table(o.schema, o.table+metaSuffix)
	ob := &Outbox{pool: pool, o: o, table: t, name: name, meta: meta}
	qualified := func(index string) string { // for drop index: it lives in the table's schema
		if o.schema != "" {
			return pgx.Identifier{o.schema, index}.Sanitize()
		}
		return pgx.Identifier{index}.Sanitize()
	}
	data := map[string]any{
		"Table":          ob.table,
		"Meta":           meta,
		"PartIndex":      pgx.Identifier{o.table + partIndex}.Sanitize(),
		"PendingIndex":   qualified(o.table + pendingIndex),
		"RetryIndex":     qualified(o.table + retryIndex),
		"PartRetryIndex": pgx.Identifier{o.table + partRetryIndex}.Sanitize(),
		"KeyIndex":       qualified(o.table + keyIndex),
		"KeysIndex":      pgx.Identifier{o.table + keysIndex}.Sanitize(),
		"Pending":        StatusPending.String(),
		"Dead":           StatusDead.String(),
		"Schema":         "",
		"LockKey":        int64(0),
	}
	if o.schema != "" {
		data["Schema"] = pgx.Identifier{o.schema}.Sanitize()
	}
	data["LockKey"] = pgutil.MigrateLockKey("txkit/outbox/migrate:" + ob.table)

	tmpl, err := template.ParseFS(sqlFS, "sql/*.sql")
	if err != nil {
		return nil, fmt.Errorf("outbox: parse embedded sql: %w", err)
	}
	render := func(name string) string {
		var b bytes.Buffer
		if err == nil {
			err = tmpl.ExecuteTemplate(&b, name, data)
		}
		return strings.TrimSpace(b.String())
	}
	ob.ddl = render("schema.sql")
	enqueue := "enqueue"
	if o.notify {
		enqueue = "enqueue_notify"
	}
	ob.q = queries{
		enqueue:       render(enqueue),
		enqueueDirect: render("enqueue_direct"),
		notify:        render("notify"),
		due:           render("due"),
		deleteSent:    render("delete_sent"),
		fail:          render("fail"),
		listDead:      render("list_dead"),
		requeue:       render("requeue"),
		requeueAll:    render("requeue_all"),
		backlog:       render("backlog"),
		pending:       render("pending"),

		partitions:    render("partitions"),
		unpartitioned: render("unpartitioned_backlog"),
	}
	if err != nil {
		return nil, fmt.Errorf("outbox: render embedded sql: %w", err)
	}
	return ob, nil
}

// Table returns the table's schema-qualified name as given to the options ("txkit_outbox",
// "myschema.txkit_outbox"), unquoted.
func (ob *Outbox) Table() string { return ob.name }

// Channel returns the LISTEN/NOTIFY channel (derived from the schema and the table).
func (ob *Outbox) Channel() string { return ob.o.channel }

// Migrate creates the schema (if one was set), the table and its indexes, and the fence table
// "txkit_fence" in the same schema that a [Relay] passes by default, when they do not exist. It
// is idempotent and safe to run from several processes at once (an advisory lock serializes
// them). It blocks until PostgreSQL answers; ctx scopes only this call.
func (ob *Outbox) Migrate(ctx context.Context) error {
	if err := pgutil.MigrateOnce(ctx, ob.pool, ob.o.schema, ob.ddl, nil); err != nil {
		return fmt.Errorf("outbox: migrate %s: %w", ob.name, err)
	}
	want := ob.o.parts
	var old bool
	if err := ob.pool.QueryRow(ctx, ob.q.unpartitioned, ob.meta).Scan(&old); err != nil {
		return fmt.Errorf("outbox: migrate %s: %w", ob.name, err)
	}
	if old {
		want = 1 // its pending rows are all in partition 0
	}
	stored, err := placement.StorePartitions(ctx, ob.pool, ob.meta, want)
	if err != nil {
		return fmt.Errorf("outbox: migrate %s: %w", ob.name, err)
	}
	if stored != ob.o.parts {
		return ob.partsMismatch(stored)
	}
	f, err := ob.relayFence()
	if err == nil {
		err = f.Migrate(ctx)
	}
	if err != nil {
		return fmt.Errorf("outbox: migrate %s: %w", ob.name, err)
	}
	return nil
}

// Enqueue records msg in tx, the caller's transaction, and returns its ID: msg.ID, or a new
// UUIDv7 when msg.ID is zero. The [Relay] publishes it once tx commits; a rollback leaves nothing.
// Messages of one non-empty Key are published in the order their transactions committed their
// Enqueue (two concurrent transactions of one key have no defined order). ctx's span, if any, is
// stored with the row and parents the relay's publish span. Outside [Outbox.Do] it wakes the relay
// with a NOTIFY at the commit and blocks for one round trip, ctx scoping only this statement
// (cancelling it leaves tx only to roll back); in Do's transaction it sends nothing (see Do).
//
// Before touching tx it refuses, with an error wrapping [ErrInvalidMessage], an empty topic, a
// field over its limit (also [ErrTooLarge]; docs/outbox.md "Message limits"), text PostgreSQL
// cannot store and tags RocketMQ cannot match; a nil tx wraps [ErrNilTx]. An ID already in the
// outbox wraps [ErrDuplicate] and leaves tx aborted (in Do's transaction Do returns it, or the
// statement the insert went out with). Safe for concurrent use.
func (ob *Outbox) Enqueue(ctx context.Context, tx DBTX, msg Message) (uuid.UUID, error) {
	if pgutil.IsNil(tx) {
		return uuid.Nil, fmt.Errorf("outbox: enqueue to %s: %w", msg.Topic, ErrNilTx)
	}
	if err := ob.check(msg); err != nil {
		return uuid.Nil, err
	}
	if msg.ID == uuid.Nil {
		id, err := uuid.NewV7()
		if err != nil {
			return uuid.Nil, fmt.Errorf("outbox: enqueue to %s: new id: %w", msg.Topic, err)
		}
		msg.ID = id
	}
	var headers any // SQL null rather than JSON null when there are none
	if len(msg.Headers) > 0 {
		headers = msg.Headers
	}
	body := msg.Body
	if body == nil {
		body = []byte{}
	}
	trace, part := obs.EncodeTrace(ctx), ob.partition(msg)
	if c := pgutil.Collecting[handed](ctx, ob, tx); c != nil && ob.deferEnqueue(c, msg, body, trace, part) {
		return msg.ID, nil
	}
	args := []any{pgUUID(msg.ID), msg.Topic, msg.Key, body, headers, msg.Tags, trace, part, ob.o.parts}
	var (
		n   int
		err error
	)
	if ob.o.notify {
		err = tx.QueryRow(ctx, ob.q.enqueue, append(args, ob.o.channel)...).Scan(&n)
	} else {
		err = tx.QueryRow(ctx, ob.q.enqueue, args...).Scan(&n)
	}
	if err != nil {
		return uuid.Nil, ob.enqueueError(msg, err)
	}
	if n == 0 { // the table's partition count is not this outbox's
		return uuid.Nil, ob.partsError(ctx, tx, msg)
	}
	return msg.ID, nil
}

// deferEnqueue queues msg's insert in Do's transaction, to go out with the transaction's next
// statement or its commit (pgutil.LazyTx.Defer), and the row to be handed over once it is
// committed. The insert and the hand-over read the message after Enqueue returned: they get
// copies of its body and headers. False when the transaction has ended.
func (ob *Outbox) deferEnqueue(c *pgutil.Collector[handed], msg Message, body []byte, trace string, part int) bool {
	msg.Body = bytes.Clone(body)
	var headers any // SQL null rather than JSON null when there are none
	if len(msg.Headers) > 0 {
		msg.Headers = maps.Clone(msg.Headers)
		headers = msg.Headers
	}
	e := &deferred{ob: ob, c: c, h: handed{x: row{msg: msg, trace: trace}, part: part}}
	e.args = [...]any{pgUUID(msg.ID), msg.Topic, msg.Key, msg.Body, headers, msg.Tags, trace, part, ob.o.parts}
	e.dest = [...]any{&e.h.x.id, &e.h.first, &e.age}
	return c.Defer(pgutil.Deferred{SQL: ob.q.enqueueDirect, Args: e.args[:], Dest: e.dest[:], Done: e.done})
}

// deferred is an insert of Do's transaction waiting to be sent.
type deferred struct {
	ob   *Outbox
	c    *pgutil.Collector[handed]
	h    handed
	age  float64 // seconds since the transaction's start, by the database's clock
	args [9]any  // the statement's arguments and destinations, in the one allocation
	dest [3]any
}

// done collects the inserted row for the hand-over, or returns the insert's error as Enqueue
// would have.
func (e *deferred) done(ctx context.Context, err error) error {
	var pe *pgconn.PgError
	switch {
	case err == nil:
		e.h.x.created = time.Now().Add(-time.Duration(e.age * float64(time.Second)))
		e.c.Rows = append(e.c.Rows, e.h)
		return nil
	case errors.As(err, &pe) && pe.Code == "22012": // the guard of enqueue_direct
		// The transaction is aborted: the stored count is read outside it.
		return e.ob.partsError(ctx, e.ob.pool, e.h.x.msg)
	}
	return e.ob.enqueueError(e.h.x.msg, err)
}

func (ob *Outbox) enqueueError(msg Message, err error) error {
	if pgutil.IsUniqueViolation(err) {
		return fmt.Errorf("outbox: enqueue %s to %s: %w: %w", msg.ID, msg.Topic, ErrDuplicate, err)
	}
	return fmt.Errorf("outbox: enqueue %s to %s: %w", msg.ID, msg.Topic, err)
}

// partsError is the error of an insert refused because the table's stored partition count is not
// the outbox's, reading that count through db.
func (ob *Outbox) partsError(ctx context.Context, db DBTX, msg Message) error {
	var stored int
	if err := db.QueryRow(ctx, ob.q.partitions).Scan(&stored); err != nil {
		return fmt.Errorf("outbox: enqueue %s to %s: no partition count stored (was Migrate run?): %w: %w",
			msg.ID, msg.Topic, err, ErrInvalidOption)
	}
	return fmt.Errorf("outbox: enqueue %s to %s: %w", msg.ID, msg.Topic, ob.partsMismatch(stored))
}

// Partitions returns the number of partitions the outbox is split into ([WithPartitions]).
func (ob *Outbox) Partitions() int { return ob.o.parts }

// Partition returns the partition [Outbox.Enqueue] puts msg in: a stable hash of msg.Key, or of
// msg.ID when the key is empty, modulo [Outbox.Partitions] (always 0 when the outbox is not
// split). The same function in every process and version, so all messages of a key share a
// partition.
func (ob *Outbox) Partition(msg Message) int {
	return ob.partition(msg)
}

func (ob *Outbox) partition(msg Message) int {
	if ob.o.parts < 2 {
		return 0
	}
	if msg.Key != "" {
		return placement.Partition(msg.Key, ob.o.parts)
	}
	return placement.Partition(msg.ID.String(), ob.o.parts)
}

// partsMismatch is the error for a table whose stored partition count is not the outbox's.
func (ob *Outbox) partsMismatch(stored int) error {
	return fmt.Errorf("outbox: %s is split into %d partitions, this outbox into %d (WithPartitions): "+
		"the count is fixed once stored, since moving a key to another partition while its messages are "+
		"pending could reorder them: %w", ob.name, stored, ob.o.parts, ErrInvalidOption)
}

func (ob *Outbox) check(msg Message) error {
	// %.64q: an oversized topic is named by its first 64 characters.
	bad := func(what string, err error) error {
		return fmt.Errorf("outbox: message %s to %.64q: %s: %w: %w", msg.ID, msg.Topic, what, err, ErrInvalidMessage)
	}
	tooLarge := func(what string, n, max int, unit string) error {
		return fmt.Errorf("outbox: message %s to %.64q: %s: %d %s, more than %d: %w: %w",
			msg.ID, msg.Topic, what, n, unit, max, ErrTooLarge, ErrInvalidMessage)
	}
	switch {
	case len(msg.Topic) > MaxTopicLen:
		return tooLarge("topic", len(msg.Topic), MaxTopicLen, "bytes")
	case len(msg.Key) > MaxKeyLen:
		return tooLarge("key", len(msg.Key), MaxKeyLen, "bytes")
	case len(msg.Tags) > MaxTagsLen:
		return tooLarge("tags", len(msg.Tags), MaxTagsLen, "bytes")
	case len(msg.Body) > ob.o.maxBody:
		return tooLarge("body", len(msg.Body), ob.o.maxBody, "bytes")
	case len(msg.Headers) > MaxHeaders:
		return tooLarge("headers", len(msg.Headers), MaxHeaders, "entries")
	}
	if err := pgutil.CheckText(msg.Topic, MaxTopicLen); err != nil {
		return bad("topic", err)
	}
	if msg.Key != "" {
		if err := pgutil.CheckText(msg.Key, MaxKeyLen); err != nil {
			return bad("key", err)
		}
	}
	if msg.Tags != "" {
		if err := checkTags(msg.Tags); err != nil {
			return bad("tags", err)
		}
	}
	total := 0
	for k, v := range msg.Headers {
		switch {
		case len(k) > MaxHeaderNameLen:
			return tooLarge(fmt.Sprintf("header name %.32q", k), len(k), MaxHeaderNameLen, "bytes")
		case len(v) > MaxHeaderValueLen:
			return tooLarge(fmt.Sprintf("header %.32q value", k), len(v), MaxHeaderValueLen, "bytes")
		}
		total += len(k) + len(v)
		if err := pgutil.CheckText(k, MaxHeaderNameLen); err != nil {
			return bad("header name", err)
		}
		if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
			return bad("header "+k, errors.New("value is not valid UTF-8 or contains a NUL byte"))
		}
	}
	if total > MaxHeadersSize {
		return tooLarge("headers (names and values)", total, MaxHeadersSize, "bytes")
	}
	return nil
}

// DeadMessage is a message that failed every publish [WithRetry] allows, as [Outbox.ListDead] returns it.
type DeadMessage struct {
	Message
	Attempts  int       // failed publishes
	LastError string    // the last publish's error
	CreatedAt time.Time // when it was enqueued
}

// ListDead returns up to limit dead messages, oldest first. It blocks for one query; ctx scopes
// only this call. limit must be positive (else an error wrapping [ErrInvalidOption]). It is safe
// for concurrent use.
func (ob *Outbox) ListDead(ctx context.Context, db DBTX, limit int) ([]DeadMessage, error) {
	if pgutil.IsNil(db) {
		return nil, fmt.Errorf("outbox: list dead in %s: %w", ob.name, ErrNilTx)
	}
	if limit < 1 {
		return nil, fmt.Errorf("outbox: list dead in %s: limit %d: %w", ob.name, limit, ErrInvalidOption)
	}
	rows, err := db.Query(ctx, ob.q.listDead, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: list dead in %s: %w", ob.name, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeadMessage, error) {
		var d DeadMessage
		err := r.Scan(&d.ID, &d.Topic, &d.Key, &d.Body, &d.Headers, &d.Attempts, &d.LastError, &d.CreatedAt, &d.Tags)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: list dead in %s: %w", ob.name, err)
	}
	return out, nil
}

// Requeue makes the dead messages with the given IDs pending again, with no failed attempts, due
// at once, and wakes the relay (NOTIFY). IDs that are not dead messages are
// ignored; it returns how many messages it requeued. A requeued message is published after any
// later message of its key that was already sent: per-key order cannot be restored for it.
//
// Pass a pool to requeue at once, or a transaction to requeue with the caller's commit. Requeue
// blocks for one or two round trips; ctx scopes only this call. It is safe for concurrent use.
func (ob *Outbox) Requeue(ctx context.Context, db DBTX, ids ...uuid.UUID) (int64, error) {
	if pgutil.IsNil(db) {
		return 0, fmt.Errorf("outbox: requeue in %s: %w", ob.name, ErrNilTx)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	return ob.requeue(ctx, db, ob.q.requeue, ids)
}

// RequeueAll makes every dead message pending again, as [Outbox.Requeue] does for some.
func (ob *Outbox) RequeueAll(ctx context.Context, db DBTX) (int64, error) {
	if pgutil.IsNil(db) {
		return 0, fmt.Errorf("outbox: requeue in %s: %w", ob.name, ErrNilTx)
	}
	return ob.requeue(ctx, db, ob.q.requeueAll)
}

func (ob *Outbox) requeue(ctx context.Context, db DBTX, q string, args ...any) (int64, error) {
	tag, err := db.Exec(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("outbox: requeue in %s: %w", ob.name, err)
	}
	n := tag.RowsAffected()
	if n > 0 && ob.o.notify {
		if _, err := db.Exec(ctx, ob.q.notify, ob.o.channel); err != nil {
			// The rows are requeued (or will be, with the caller's commit); the relay's next poll
			// finds them.
			return n, fmt.Errorf("outbox: requeue in %s: notify %s: %w", ob.name, ob.o.channel, err)
		}
	}
	return n, nil
}

// Backlog returns how many messages are pending (waiting to be published, including those waiting
// out a backoff) and how many are dead. It counts the table, so it costs a scan of the pending
// index and of the dead rows; it blocks for one query and ctx scopes only this call. It is safe for
// concurrent use.
func (ob *Outbox) Backlog(ctx context.Context, db DBTX) (pending, dead int64, err error) {
	if pgutil.IsNil(db) {
		return 0, 0, fmt.Errorf("outbox: backlog of %s: %w", ob.name, ErrNilTx)
	}
	if err := db.QueryRow(ctx, ob.q.backlog).Scan(&pending, &dead); err != nil {
		return 0, 0, fmt.Errorf("outbox: backlog of %s: %w", ob.name, err)
	}
	return pending, dead, nil
}

// pgUUID is id as pgx encodes it directly: a uuid.UUID goes through its driver.Valuer, a string
// that pgx fails to encode as a uuid and then parses back (about 18 allocations per argument).
func pgUUID(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

// relayFence is the fence a [Relay] of ob passes by default: the table "txkit_fence" in ob's
// schema, created by [Outbox.Migrate].
func (ob *Outbox) relayFence() (*fence.Fence, error) {
	var opts []fence.Option
	if ob.o.schema != "" {
		opts = append(opts, fence.WithTable(ob.o.schema, ""))
	}
	f, err := fence.New(ob.pool, opts...)
	if err != nil {
		return nil, fmt.Errorf("outbox: fence: %w: %w", err, ErrInvalidOption)
	}
	return f, nil
}
