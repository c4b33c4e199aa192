// Package fence refuses the writes of deposed leaders in PostgreSQL. A [Fence] keeps, per
// resource, the highest fencing token (a [lock.Token]) that has written to it; [Fence.Check], called
// inside the writer's own transaction, lets the write through only when the writer's token is at
// least that high, and otherwise returns a [*FencedError] wrapping [lock.ErrFenced].
//
// The fence is its own package so that the lock backends need no PostgreSQL driver and the fence
// needs no ZooKeeper: any lock that hands out [lock.Token]s can be fenced here.
//
//	f, _ := fence.New(pool, fence.WithTable("app", ""))
//	_ = f.Migrate(ctx)
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if err := f.Check(ctx, tx, "orders-recovery", lead.Token()); err != nil {
//			return err // errors.Is(err, lock.ErrFenced): a newer leader has written
//		}
//		// ... the leader's writes ...
//		return nil
//	})
//
// [Fence.Queue] puts the same check into a pgx.Batch instead, so that it rides in the round trip
// of the writes it guards.
package fence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/lock"
)

// ErrInvalidOption: [New] or a method was given an argument it cannot use.
var ErrInvalidOption = errors.New("fence: invalid option")

// DBTX is what a [Fence] needs from PostgreSQL: pgx.Tx, *pgxpool.Pool and *pgx.Conn all satisfy
// it. [Fence.Check] wants the transaction that makes the fenced writes.
type DBTX = pgutil.DBTX // the one interface of every txkit package (Exec, Query, QueryRow)

// Option configures a [Fence].
type Option func(*options)

type options struct {
	schema string
	table  string
	reg    prometheus.Registerer
}

func defaultOptions() options { return options{table: "txkit_fence"} }

// WithTable sets the PostgreSQL schema of the fence table (default: none, so the connection's
// search_path decides; [Fence.Migrate] creates it if it does not exist) and the table's name
// (default "txkit_fence"; quoted, so used exactly as given; at most 58 bytes, so that its primary
// key's name fits). An empty schema or table keeps that part as it was.
func WithTable(schema, table string) Option {
	return func(o *options) { o.schema, o.table = cmp.Or(schema, o.schema), cmp.Or(table, o.table) }
}

// WithRegisterer registers the fence's txkit_fence_refused_total on reg (listed in
// docs/metrics.md; default: none, still counted). Fences on one reg share the series. [New] fails
// with an error wrapping [ErrInvalidOption] when the name is taken on reg by a metric of another
// kind or labels.
func WithRegisterer(reg prometheus.Registerer) Option { return func(o *options) { o.reg = reg } }

// The values of txkit_fence_refused_total's cause label.
const (
	causeEpoch   = "epoch"
	causeSeq     = "seq"
	causeUnknown = "unknown"
)

const (
	pgMaxIdent = 63 // PostgreSQL's NAMEDATALEN - 1
	maxTable   = pgMaxIdent - len("_pkey")
)

// MaxResourceLen is the longest resource name, in bytes, that [Fence.Check] accepts (the name
// is the table's primary key, and btree entries are limited to about 2.7 kB).
const MaxResourceLen = 1024

func (o options) validate() error {
	if o.schema != "" {
		if err := pgutil.CheckText(o.schema, pgMaxIdent); err != nil {
			return fmt.Errorf("fence: schema %q: %w: %w", o.schema, err, ErrInvalidOption)
		}
	}
	if err := pgutil.CheckText(o.table, maxTable); err != nil {
		return fmt.Errorf("fence: table %q: %w: %w", o.table, err, ErrInvalidOption)
	}
	return nil
}

// Fence refuses the writes of deposed lock holders in PostgreSQL. It keeps, per resource (any name
// the coordinators agree on, such as a lock path or a table), the highest fencing [lock.Token] that
// has written to it; [Fence.Check], called inside the writer's own transaction, lets the write
// through only when the writer's token is at least that high.
//
// A holder can lose its lock at any time — its ZooKeeper session can expire while it is paused —
// and may not learn of it before its next write. The fence is what makes that late write harmless:
// once a newer holder has passed the fence, every older token is refused.
//
// Fence is safe for concurrent use by multiple goroutines.
type Fence struct {
	pool   *pgxpool.Pool // Migrate's; Check runs in the caller's transaction
	table  string        // quoted, schema-qualified
	ddl    string
	upsert string
	guard  string // the upsert failing its transaction when it records nothing (Queue)
	read   string
	list   string
	reset  string

	refused *prometheus.CounterVec // txkit_fence_refused_total{cause}
}

// New returns a Fence on pool configured by opts. It does not touch the database: call
// [Fence.Migrate] to create the table. It returns an error wrapping [ErrInvalidOption] when pool
// is nil or an option is unusable.
func New(pool *pgxpool.Pool, opts ...Option) (*Fence, error) {
	if pool == nil {
		return nil, fmt.Errorf("fence: nil pool: %w", ErrInvalidOption)
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	refused, err := obs.Register(o.reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: prometheus.BuildFQName(obs.Namespace, "fence", "refused_total"),
		Help: "Writes the fence refused because their token was below the recorded one, by cause: epoch, seq or unknown."},
		[]string{"cause"}))
	if err != nil {
		return nil, fmt.Errorf("fence: metrics: %w: %w", err, ErrInvalidOption)
	}
	for _, c := range []string{causeEpoch, causeSeq, causeUnknown} {
		refused.WithLabelValues(c).Add(0) // the series exist, at 0, before the first refusal
	}
	t, _ := pgutil.Table(o.schema, o.table)
	// One implicit transaction: the advisory lock serializes concurrent migrations, which could
	// otherwise fail on pg_type's unique index.
	ddl := "select pg_advisory_xact_lock(" + strconv.FormatInt(pgutil.MigrateLockKey("txkit/lock/fence/migrate:"+t), 10) + ");\n"
	if o.schema != "" {
		ddl += "create schema if not exists " + pgx.Identifier{o.schema}.Sanitize() + ";\n"
	}
	ddl += `create table if not exists ` + t + ` (
    resource   text        primary key,
    epoch      bigint      not null,
    seq        bigint      not null,
    updated_at timestamptz not null default now()
)`
	upsert := `insert into ` + t + ` as f (resource, epoch, seq) values ($1, $2, $3)` +
		` on conflict (resource) do update set epoch = excluded.epoch, seq = excluded.seq, updated_at = now()` +
		` where (f.epoch, f.seq) <= (excluded.epoch, excluded.seq) returning 1`
	return &Fence{
		pool:    pool,
		table:   t,
		ddl:     ddl,
		list:    `select resource, epoch, seq, updated_at from ` + t + ` where $1 = '' or resource = $1 order by resource`,
		reset:   `delete from ` + t + ` where resource = $1 and epoch > $2 returning epoch, seq, updated_at`,
		upsert:  upsert,
		read:    `select epoch, seq from ` + t + ` where resource = $1`,
		guard:   `with u as (` + upsert + `) select 1 / count(*)::int from u`,
		refused: refused,
	}, nil
}

// Migrate creates the fence table (and the schema, if one was set) when they do not exist. It is
// idempotent and safe to run from several processes at once. It blocks until PostgreSQL answers;
// ctx scopes only this call.
func (f *Fence) Migrate(ctx context.Context) error {
	if _, err := f.pool.Exec(ctx, f.ddl); err != nil {
		return fmt.Errorf("fence: migrate %s: %w", f.table, err)
	}
	return nil
}

// Check passes tx through the fence of resource with token tok, or refuses it. Call it inside the
// transaction that makes the holder's writes, and commit only if it returns nil.
//
// It is one upsert that records tok for resource unless a higher token is already recorded. Equal
// tokens pass, since one holder writes many times. A lower token is refused with a *[FencedError]
// wrapping [lock.ErrFenced] that names the resource and both tokens; the refusal raises no SQL error,
// so tx stays usable (roll it back), and is counted in txkit_fence_refused_total ([WithRegisterer]). Tokens compare as [lock.Token.Compare] does: the epoch first, so a
// token from a re-created lock path ({Epoch: 2, Seq: 0}) beats any from the old one ({1, 99}).
//
// The upsert locks the resource's row until tx ends, so concurrent writers of one resource are
// serialized: a second Check blocks until the first writer's transaction commits or rolls back,
// then compares against what was committed. A deposed holder whose transaction began before the
// new holder wrote is therefore refused once the new holder commits. Under REPEATABLE READ or
// SERIALIZABLE such a writer may get a serialization failure (SQLSTATE 40001) instead; either way
// its write does not commit.
//
// ctx scopes only this call; cancelling it aborts the statement, after which tx can only be rolled
// back. An empty resource or one longer than [MaxResourceLen] bytes, a zero or negative
// token, or a nil tx returns an error wrapping [ErrInvalidOption]. Check is safe for concurrent use.
func (f *Fence) Check(ctx context.Context, tx DBTX, resource string, tok lock.Token) error {
	if pgutil.IsNil(tx) {
		return fmt.Errorf("fence: %q: nil DBTX: %w", resource, ErrInvalidOption)
	}
	if err := f.checkArgs(resource, tok); err != nil {
		return err
	}
	var one int
	err := tx.QueryRow(ctx, f.upsert, resource, tok.Epoch, tok.Seq).Scan(&one)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("fence: %q with token %s: %w", resource, tok, err)
	}
	return f.refusal(ctx, tx, resource, tok)
}

// checkArgs checks Check's and Queue's resource and token.
func (f *Fence) checkArgs(resource string, tok lock.Token) error {
	if err := pgutil.CheckText(resource, MaxResourceLen); err != nil {
		return fmt.Errorf("fence: resource %q: %w: %w", resource, err, ErrInvalidOption)
	}
	if tok.IsZero() || tok.Epoch < 0 || tok.Seq < 0 {
		return fmt.Errorf("fence: %q: token %s was not handed out by a lock: %w", resource, tok, ErrInvalidOption)
	}
	return nil
}

// refusal returns the *FencedError of tok refused for resource, with the higher token read on db
// only to explain it, and counts it.
func (f *Fence) refusal(ctx context.Context, db DBTX, resource string, tok lock.Token) error {
	fe := &FencedError{Resource: resource, Token: tok}
	if err := db.QueryRow(ctx, f.read, resource).Scan(&fe.Current.Epoch, &fe.Current.Seq); err != nil {
		f.refused.WithLabelValues(causeUnknown).Inc()
		return fmt.Errorf("%w (reading the current token: %w)", fe, err)
	}
	if tok.Epoch < fe.Current.Epoch {
		f.refused.WithLabelValues(causeEpoch).Inc()
	} else {
		f.refused.WithLabelValues(causeSeq).Inc()
	}
	return fe
}

// Queue queues into b the check [Fence.Check] makes, as a statement that fails its transaction
// when the fence refuses tok, so that the check rides in the round trip of the writes it guards
// and nothing queued after it commits. Queue it after the transaction's begin
// ([pgx.Batch.BeginTx]) and before the writes, and read b's results with
// [pgx.BatchResults.Close]; when that returns an error, roll the transaction back and pass the
// error to [Queued.Err]. Arguments are checked as Check checks them: an error wrapping
// [ErrInvalidOption] queues nothing.
func (f *Fence) Queue(b *pgx.Batch, resource string, tok lock.Token) (*Queued, error) {
	if b == nil {
		return nil, fmt.Errorf("fence: %q: nil batch: %w", resource, ErrInvalidOption)
	}
	if err := f.checkArgs(resource, tok); err != nil {
		return nil, err
	}
	q := &Queued{f: f, resource: resource, tok: tok}
	// With the upsert's row counted, 1 / 0 raises SQLSTATE 22012 when it recorded nothing (the
	// refusal), which aborts the transaction in PostgreSQL. Only this statement's own result is
	// taken for the refusal: a 22012 of another statement of b stays what it is.
	b.Queue(f.guard, resource, tok.Epoch, tok.Seq).QueryRow(func(row pgx.Row) error {
		var one int
		err := row.Scan(&one)
		var pe *pgconn.PgError
		q.refused = errors.As(err, &pe) && pe.Code == "22012" // division_by_zero
		return err
	})
	return q, nil
}

// Queued is a check [Fence.Queue] put in a batch. Not safe for concurrent use.
type Queued struct {
	f        *Fence
	resource string
	tok      lock.Token
	refused  bool // the check's own statement failed as refused
}

// Err returns what err, the error of the batch carrying q, means: a *[FencedError] (counted as
// [Fence.Check] counts it) when the check refused the token, its Current read on db — a pool or a
// connection no longer in the failed transaction —, else err unchanged (nil when nil). ctx scopes
// the read.
func (q *Queued) Err(ctx context.Context, db DBTX, err error) error {
	if err == nil || !q.refused {
		return err
	}
	return q.f.refusal(ctx, db, q.resource, q.tok)
}

// Entry is what a [Fence] records for one resource: the highest token that has written to it.
type Entry struct {
	Resource  string
	Token     lock.Token
	UpdatedAt time.Time
}

// Entries returns what the fence records, in resource order: for every resource, or for resource
// alone when it is not empty. It is for operators (txkit fence show). It blocks until PostgreSQL
// answers; ctx scopes only this call.
func (f *Fence) Entries(ctx context.Context, db DBTX, resource string) ([]Entry, error) {
	if pgutil.IsNil(db) {
		return nil, fmt.Errorf("fence: %s entries: nil DBTX: %w", f.table, ErrInvalidOption)
	}
	rows, err := db.Query(ctx, f.list, resource)
	if err != nil {
		return nil, fmt.Errorf("fence: %s entries: %w", f.table, err)
	}
	es, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) {
		var e Entry
		err := r.Scan(&e.Resource, &e.Token.Epoch, &e.Token.Seq, &e.UpdatedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("fence: %s entries: %w", f.table, err)
	}
	return es, nil
}

// Reset forgets the token recorded for resource if its epoch is above epoch, and returns what it
// forgot (ok false when nothing was above). Pass the epoch of the lock path whose holders write to
// resource (zklock.Session.LockEpoch).
//
// A token's epoch is the lock path's ZooKeeper creation zxid. Deleting and re-creating the path on
// the same ensemble raises it, so holders keep passing; but an ensemble rebuilt from empty data
// numbers its transactions from zero again, so every holder's token is then below the one recorded
// and every write is refused, for ever. Reset is the way out: after it, the next holder's
// [Fence.Check] records its token. A recorded epoch at or below the path's is left alone, since
// forgetting it would let a deposed holder of the current path write once more. Run it only when no
// holder of the old ensemble can still write. It blocks until PostgreSQL answers; ctx scopes only
// this call.
func (f *Fence) Reset(ctx context.Context, db DBTX, resource string, epoch int64) (Entry, bool, error) {
	if pgutil.IsNil(db) {
		return Entry{}, false, fmt.Errorf("fence: reset %q: nil DBTX: %w", resource, ErrInvalidOption)
	}
	if err := pgutil.CheckText(resource, MaxResourceLen); err != nil {
		return Entry{}, false, fmt.Errorf("fence: reset resource %q: %w: %w", resource, err, ErrInvalidOption)
	}
	e := Entry{Resource: resource}
	err := db.QueryRow(ctx, f.reset, resource, epoch).Scan(&e.Token.Epoch, &e.Token.Seq, &e.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, fmt.Errorf("fence: reset %q: %w", resource, err)
	}
	return e, true, nil
}

// FencedError is the refusal [Fence.Check] returns: a write to Resource carried Token, lower than
// Current, the highest token that has written to it. It wraps [lock.ErrFenced]. Current is zero when it
// could not be read.
type FencedError struct {
	Resource string
	Token    lock.Token // the refused writer's token
	Current  lock.Token // the higher token already recorded
}

func (e *FencedError) Error() string {
	cur := "a higher token"
	if !e.Current.IsZero() {
		cur = e.Current.String()
	}
	return fmt.Sprintf("fence: %q: token %s is below %s: %v", e.Resource, e.Token, cur, lock.ErrFenced)
}

// Unwrap returns [lock.ErrFenced].
func (e *FencedError) Unwrap() error { return lock.ErrFenced }
