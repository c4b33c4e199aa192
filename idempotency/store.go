package idempotency

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
)

// MaxKeyLen is the longest scope or key, in bytes, that the Store accepts.
const MaxKeyLen = 200

// DBTX is what the Store needs from PostgreSQL: pgx.Tx, *pgxpool.Pool and *pgx.Conn all satisfy it.
// Pass the transaction that makes the business change, so that the key and the change commit or
// roll back together. A pool or a bare connection works too, but then each call commits on its own.
type DBTX = pgutil.DBTX // the one interface of every txkit package (Exec, Query, QueryRow)

// Status is the state of a key. A key claimed by [Store.Claim] is [StatusCompleted] at once (the
// effect commits with it); a key claimed by [Store.Begin] is [StatusClaimed] until
// [Store.Complete] moves it — the only transition — to [StatusCompleted].
type Status uint8

const (
	StatusClaimed   Status = iota + 1 // claimed by Begin; its result is not stored yet
	StatusCompleted                   // done; Result holds what Complete stored (nil for Claim)
)

// String returns the name stored in the table's status column.
func (s Status) String() string {
	switch s {
	case StatusClaimed:
		return "claimed"
	case StatusCompleted:
		return "completed"
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

func parseStatus(s string) (Status, error) {
	switch s {
	case "claimed":
		return StatusClaimed, nil
	case "completed":
		return StatusCompleted, nil
	}
	return 0, fmt.Errorf("idempotency: unknown status %q in the table", s)
}

// Record is what [Store.Begin] found or made for a key.
type Record struct {
	// New reports that this call claimed the key: execute the request, then call [Store.Complete]
	// in the same transaction.
	New bool
	// Status is StatusClaimed when New, StatusCompleted otherwise.
	Status Status
	// Result is the result stored by [Store.Complete] for an earlier execution (nil when New).
	Result []byte
}

// Store claims idempotency keys in a PostgreSQL table, inside the caller's transactions. A key is
// a (scope, key) pair: the scope names the consumer or endpoint, the key the message or request.
//
// Store uses its pool for [Store.Migrate] and [Store.Run]; every other method takes the [DBTX] to
// work in, so that it runs in the caller's transaction. It is safe for concurrent use by multiple
// goroutines.
type Store struct {
	pool    *pgxpool.Pool
	o       options
	table   string // quoted, schema-qualified
	ddl     string
	claim   string
	claimTx string // ClaimTx's claim: a plain insert, which a duplicate aborts
	begin   string
	lookup  string
	done    string
	purge   string
	logAttr slog.Attr
	first   prometheus.Counter // txkit_idempotency_claims_total{result="first"}
	dup     prometheus.Counter // txkit_idempotency_claims_total{result="duplicate"}
}

//go:embed sql/schema.sql
var sqlFS embed.FS

// New returns a Store on pool configured by opts. It does not touch the database: call
// [Store.Migrate] to create the table. It returns an error wrapping [ErrInvalidOption] when pool
// is nil or an option is unusable.
func New(pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("idempotency: nil pool: %w", ErrInvalidOption)
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	claims, err := obs.Register(o.reg, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: obs.Namespace,
		Name: "idempotency_claims_total", Help: "Idempotency keys claimed, by result: first (claimed by this call) or duplicate (already claimed)."},
		[]string{"result"}))
	if err != nil {
		return nil, fmt.Errorf("idempotency: metrics: %w: %w", err, ErrInvalidOption)
	}
	t, name := pgutil.Table(o.schema, o.table)
	s := &Store{pool: pool, o: o, table: t, logAttr: slog.String("table", name),
		first: claims.WithLabelValues("first"), dup: claims.WithLabelValues("duplicate")}

	ddl, err := renderDDL(o, t)
	if err != nil {
		return nil, err
	}
	s.ddl = ddl
	// The retention is a validated whole number of microseconds, so it is safe to inline; the
	// statements then have no parameter that changes between Stores.
	expires := "now() + interval '" + strconv.FormatInt(o.retain.Microseconds(), 10) + " microseconds'"
	s.claim = `insert into ` + t + ` (scope, key, status, expires_at) values ($1, $2, '` +
		StatusCompleted.String() + `', ` + expires + `) on conflict (scope, key) do nothing`
	// ClaimTx owns its transaction, so a duplicate may abort it: a plain insert writes one WAL
	// record and probes the key index once less than ON CONFLICT's speculative insertion.
	s.claimTx = strings.TrimSuffix(s.claim, ` on conflict (scope, key) do nothing`)
	s.begin = `insert into ` + t + ` (scope, key, fingerprint, status, expires_at) values ($1, $2, $3, '` +
		StatusClaimed.String() + `', ` + expires + `) on conflict (scope, key) do nothing`
	s.lookup = `select fingerprint, status, result from ` + t + ` where scope = $1 and key = $2`
	s.done = `update ` + t + ` set status = '` + StatusCompleted.String() + `', result = $3` +
		` where scope = $1 and key = $2 and status = '` + StatusClaimed.String() + `'`
	// ctid = any(array(...)) plans as a TID scan; skip locked lets purges on several replicas and
	// in-flight claims proceed without waiting for one another.
	s.purge = `delete from ` + t + ` where ctid = any(array(select ctid from ` + t +
		` where expires_at < now() limit $1 for update skip locked))`
	return s, nil
}

func renderDDL(o options, table string) (string, error) {
	tmpl, err := template.ParseFS(sqlFS, "sql/schema.sql")
	if err != nil {
		return "", fmt.Errorf("idempotency: parse embedded schema.sql: %w", err)
	}
	data := struct {
		Schema, Table, Index string
		LockKey              int64
	}{
		Table:   table,
		Index:   pgx.Identifier{o.table + indexSuffix}.Sanitize(),
		LockKey: pgutil.MigrateLockKey("txkit/idempotency/migrate:" + table),
	}
	if o.schema != "" {
		data.Schema = pgx.Identifier{o.schema}.Sanitize()
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, data); err != nil {
		return "", fmt.Errorf("idempotency: render schema.sql: %w", err)
	}
	return b.String(), nil
}

// Retention returns how long a claimed key is kept ([WithRetention]). It is safe for concurrent
// use.
func (s *Store) Retention() time.Duration { return s.o.retain }

// Migrate creates the schema (if one was set), the table and its expiry index when they do not
// exist. It is idempotent and safe to run from several processes at once (an advisory lock
// serializes them). It blocks until PostgreSQL answers; ctx scopes only this call.
func (s *Store) Migrate(ctx context.Context) error {
	if err := pgutil.MigrateOnce(ctx, s.pool, s.o.schema, s.ddl, nil); err != nil {
		return fmt.Errorf("idempotency: migrate %s: %w", s.table, err)
	}
	return nil
}

// Claim claims (scope, key) in tx with one write, an INSERT ... ON CONFLICT DO NOTHING. It returns
// first == true when this call inserted the key — the caller goes on to make its change in the same
// tx — and first == false with a nil error when the key was already claimed: a duplicate, whose
// change is already made. Callers who prefer an error use [Store.ClaimFirst].
//
// The claim belongs to tx: it commits with the caller's change or rolls back with it, leaving no
// key. A key claimed by Claim is [StatusCompleted] at once.
//
// Claim blocks while another transaction holds an uncommitted claim of the same key, until that
// transaction ends: if it commits, Claim returns false; if it rolls back, Claim inserts and returns
// true. Under REPEATABLE READ or SERIALIZABLE the waiter fails instead with a serialization failure
// (SQLSTATE 40001) when the other transaction commits; retry the whole transaction then.
//
// ctx scopes only this statement. Cancelling it aborts the statement and (with pgx's default
// settings) closes the connection, so the caller's transaction can only be rolled back. Bad input returns an error
// wrapping [ErrInvalidKey] or [ErrNilTx]. Claim is safe for concurrent use.
func (s *Store) Claim(ctx context.Context, tx DBTX, scope, key string) (first bool, err error) {
	if err := check(tx, scope, key); err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, s.claim, scope, key)
	if err != nil {
		return false, fmt.Errorf("idempotency: claim %s/%s: %w", scope, key, err)
	}
	first = tag.RowsAffected() == 1
	s.count(first)
	return first, nil
}

// ClaimTx begins a transaction on db (a pool or a connection) and claims (scope, key) in it as
// [Store.Claim] does, sending the begin and the claim together: one round trip where Begin then
// Claim take two. It returns the open transaction — make the change in it and commit, or roll it
// back — with first as Claim returns it (a duplicate costs two more round trips: its claim aborts
// the first transaction, and ClaimTx begins another). On an error no transaction is left open (tx
// is nil). It blocks as Claim does; ctx scopes only this call. Bad input returns an error wrapping
// [ErrInvalidKey] or [ErrNilTx]; a db that is itself a transaction is refused by pgx. ClaimTx is
// safe for concurrent use.
func (s *Store) ClaimTx(ctx context.Context, db interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}, scope, key string) (tx pgx.Tx, first bool, err error) {
	if pgutil.IsNil(db) {
		return nil, false, ErrNilTx
	}
	if err := checkKey(scope, key); err != nil {
		return nil, false, err
	}
	tx, err = s.sendClaim(ctx, db, scope, key)
	first = err == nil
	if pgutil.IsUniqueViolation(err) {
		// Claimed before: the claim aborted tx, which sendClaim rolled back. The caller gets an
		// open transaction as promised, at two round trips that only a duplicate pays.
		b := &pgx.Batch{}
		b.BeginTx(pgx.TxOptions{})
		tx, err = s.send(ctx, db, b)
	}
	if err != nil {
		return nil, false, fmt.Errorf("idempotency: claim %s/%s: %w", scope, key, err)
	}
	s.count(first)
	return tx, first, nil
}

// sendClaim sends the begin and ClaimTx's claim in one batch and returns the open transaction;
// on an error (a duplicate's unique violation among them) it has rolled the transaction back.
func (s *Store) sendClaim(ctx context.Context, db batchSender, scope, key string) (pgx.Tx, error) {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(s.claimTx, scope, key)
	return s.send(ctx, db, b)
}

// send sends b, which begins a transaction, and returns the open transaction; when a statement
// fails it rolls the transaction back and returns the error.
func (s *Store) send(ctx context.Context, db batchSender, b *pgx.Batch) (tx pgx.Tx, err error) {
	br := db.SendBatch(ctx, b)
	tx = br.Tx()
	for range b.Len() {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if tx != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
			_ = tx.Rollback(rctx) // ErrTxClosed when the begin never ran; releases a pool's connection
			cancel()
		}
		return nil, err
	}
	return tx, nil
}

// batchSender is what ClaimTx needs of its db: a pool or a connection.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// rollbackTimeout bounds ClaimTx's rollback after a failed claim, once ctx may have ended.
const rollbackTimeout = 5 * time.Second

// ClaimFirst is [Store.Claim] for callers that prefer an error: it returns nil when this call
// claimed the key and an error wrapping [ErrDuplicate] when the key was already claimed. Inside
// pgx.BeginFunc that error rolls the transaction back, so a handler can return it and the consumer
// acknowledge the message when errors.Is(err, ErrDuplicate).
func (s *Store) ClaimFirst(ctx context.Context, tx DBTX, scope, key string) error {
	first, err := s.Claim(ctx, tx, scope, key)
	if err != nil {
		return err
	}
	if !first {
		return fmt.Errorf("idempotency: claim %s/%s: %w", scope, key, ErrDuplicate)
	}
	return nil
}

// maxBeginTries bounds how often Begin retries when the key it collided with is purged before it
// can read it.
const maxBeginTries = 3

// Begin is the HTTP Idempotency-Key variant of [Store.Claim]: it claims (scope, key) in tx and
// remembers fingerprint, a digest of the request that the caller computes (say SHA-256 of method,
// path and body; nil is allowed). It returns
//
//   - a Record with New == true the first time: execute the request in tx and call
//     [Store.Complete] with its result before committing;
//   - New == false and the stored Result on a retry of a completed request with the same
//     fingerprint: reply with it and do nothing else;
//   - an error wrapping [ErrFingerprintMismatch] (HTTP 422 in the IETF draft) when the key was
//     used with a different fingerprint, completed or not;
//   - an error wrapping [ErrNotCompleted] when the key was begun and committed without Complete,
//     or begun earlier in this same tx; [ErrInvalidKey] or [ErrNilTx] for bad input.
//
// A request in progress elsewhere makes Begin block until its transaction ends, then answer as
// above (New == true if it rolled back). It needs READ COMMITTED (under REPEATABLE READ or
// SERIALIZABLE the waiter gets a serialization failure to retry); it issues one write and, only
// on a collision, one read. ctx scopes only this call. Begin is safe for concurrent use.
func (s *Store) Begin(ctx context.Context, tx DBTX, scope, key string, fingerprint []byte) (*Record, error) {
	if err := check(tx, scope, key); err != nil {
		return nil, err
	}
	// One write and, only on a collision, one read of the committed row (READ COMMITTED sees it).
	for range maxBeginTries {
		tag, err := tx.Exec(ctx, s.begin, scope, key, fingerprint)
		if err != nil {
			return nil, fmt.Errorf("idempotency: begin %s/%s: %w", scope, key, err)
		}
		if tag.RowsAffected() == 1 {
			s.count(true)
			return &Record{New: true, Status: StatusClaimed}, nil
		}
		var (
			fp, result []byte
			status     string
		)
		err = tx.QueryRow(ctx, s.lookup, scope, key).Scan(&fp, &status, &result)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // purged between the two statements: claim again
		}
		if err != nil {
			return nil, fmt.Errorf("idempotency: begin %s/%s: read existing key: %w", scope, key, err)
		}
		if !bytes.Equal(fp, fingerprint) {
			return nil, fmt.Errorf("idempotency: begin %s/%s: %w", scope, key, ErrFingerprintMismatch)
		}
		st, err := parseStatus(status)
		if err != nil {
			return nil, err
		}
		if st != StatusCompleted {
			return nil, fmt.Errorf("idempotency: begin %s/%s: %w", scope, key, ErrNotCompleted)
		}
		s.count(false)
		return &Record{Status: st, Result: result}, nil
	}
	return nil, fmt.Errorf("idempotency: begin %s/%s: key vanished %d times between claim and read", scope, key, maxBeginTries)
}

// Complete stores result for a key that [Store.Begin] claimed, marking it [StatusCompleted]. Call
// it in the same transaction as Begin, after the request's change; the result becomes visible to
// retries when that transaction commits. It returns an error wrapping [ErrNotClaimed] when tx sees
// no claimed, uncompleted row for the key (never begun, already completed, or purged). ctx scopes
// only this call. Complete is safe for concurrent use.
func (s *Store) Complete(ctx context.Context, tx DBTX, scope, key string, result []byte) error {
	if err := check(tx, scope, key); err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, s.done, scope, key, result)
	if err != nil {
		return fmt.Errorf("idempotency: complete %s/%s: %w", scope, key, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("idempotency: complete %s/%s: %w", scope, key, ErrNotClaimed)
	}
	return nil
}

// count counts a claim: first, or a duplicate.
func (s *Store) count(first bool) {
	if first {
		s.first.Inc()
	} else {
		s.dup.Inc()
	}
}

func check(tx DBTX, scope, key string) error {
	if pgutil.IsNil(tx) {
		return ErrNilTx
	}
	return checkKey(scope, key)
}

func checkKey(scope, key string) error {
	if err := pgutil.CheckText(scope, MaxKeyLen); err != nil {
		return fmt.Errorf("idempotency: scope %q: %w: %w", truncate(scope), err, ErrInvalidKey)
	}
	if err := pgutil.CheckText(key, MaxKeyLen); err != nil {
		return fmt.Errorf("idempotency: key %q: %w: %w", truncate(key), err, ErrInvalidKey)
	}
	return nil
}

// truncate shortens s for an error message.
func truncate(s string) string {
	if len(s) <= 40 {
		return s
	}
	return s[:40] + "…"
}
