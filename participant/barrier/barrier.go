package barrier

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/barrierseam"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/participant"
)

// Barrier makes each operation of a branch run at most once, in the participant's own database
// transaction, and handles the two anomalies of TCC and sagas: the empty rollback (a cancel,
// compensate or abort for a branch whose try, action or prepare never ran is answered success
// without calling the business code) and the hanging try (a try arriving after that empty
// rollback is refused with [ErrHanging], which wraps [participant.ErrRefused], without calling
// it). It is a table of markers, one row per (gid, branch, op) on a unique key, kept by an
// [idempotency.Store]; every decision is a write on that key, never a check followed by a write
// (see [Barrier.Call]).
//
// Rows are purged by age ([WithRetention], [Barrier.Run]). The pool given to [New] serves
// Migrate, Run and the transactions of [Barrier.Handler] and [Barrier.Participant];
// [Barrier.Call] runs in the caller's. A Barrier is safe for concurrent use by multiple goroutines.
type Barrier struct {
	sealed // what package threepc/agent uses of the barrier (internal/barrierseam)
	pool   *pgxpool.Pool
	o      options
	store  *idempotency.Store
	table  string // quoted, schema-qualified
	exists string // select: is there a marker for (scope, key)?
	m      *metrics
	tracer trace.Tracer
}

// New returns a Barrier on pool configured by opts. It does not touch the database: call
// [Barrier.Migrate] to create the table. It returns an error wrapping [ErrInvalidOption] when pool
// is nil or an option is unusable.
func New(pool *pgxpool.Pool, opts ...Option) (*Barrier, error) {
	if pool == nil {
		return nil, fmt.Errorf("barrier: nil pool: %w", ErrInvalidOption)
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	st, err := idempotency.New(pool, o.storeOptions()...)
	if err != nil {
		return nil, fmt.Errorf("barrier: %w: %w", ErrInvalidOption, err)
	}
	m, err := newMetrics(o.reg)
	if err != nil {
		return nil, err
	}
	t, _ := pgutil.Table(o.schema, o.table)
	b := &Barrier{
		m:      m,
		tracer: obs.TracerProvider(o.tp).Tracer(tracerName),
		pool:   pool,
		o:      o,
		store:  st,
		table:  t,
		// The table is the idempotency store's (sql/schema.sql of package idempotency): its
		// primary key is (scope, key).
		exists: `select exists (select 1 from ` + t + ` where scope = $1 and key = $2)`,
	}
	b.sealed = barrierseam.Seal(&barrierseam.Barrier{Pool: pool, Schema: o.schema, Registerer: o.reg, Retention: o.retain,
		Do: func(ctx context.Context, req participant.Request, fn barrierseam.Func) error {
			return b.do(ctx, req, "", fn)
		},
		Secrets: o.secrets, Unsigned: o.unsigned, Window: o.window, Log: o.log,
		Serve: func(ctx context.Context, req participant.Request, nonce string, fn barrierseam.Func) (context.Context, error) {
			return b.traced(ctx, trace.SpanKindServer, req, func(ctx context.Context) error { return b.do(ctx, req, nonce, fn) })
		},
		Internal: b.internal,
		Refusal:  refusalAnswer,
	})
	return b, nil
}

// sealed is embedded in [Barrier] under an unexported name: see package internal/barrierseam.
type sealed = barrierseam.Sealed

// Migrate creates the barrier's schema (if one was set), table and index when they do not exist.
// It is idempotent and safe to run from several processes at once. It blocks until PostgreSQL
// answers; ctx scopes only this call.
func (b *Barrier) Migrate(ctx context.Context) error {
	if err := b.store.Migrate(ctx); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	return nil
}

// Purge deletes, in one pass, the barrier rows older than the retention ([WithRetention])
// and returns how many it deleted. Pass a pool, so that each batch commits on its own. It blocks
// until the pass is done or ctx ends; ctx scopes only this call. It is safe for concurrent use.
func (b *Barrier) Purge(ctx context.Context, db idempotency.DBTX) (int64, error) {
	n, err := b.store.Purge(ctx, db)
	if err != nil {
		return n, fmt.Errorf("barrier: %w", err)
	}
	return n, nil
}

// Run purges expired barrier rows on the schedule of [WithRetention] (default every minute)
// until ctx ends. It blocks; when ctx ends it cancels a purge in flight, waits for its
// scheduler to stop and returns nil. Every replica of a participant may run it: no leadership is
// needed. It purges through the pool given to [New].
func (b *Barrier) Run(ctx context.Context) error {
	if err := b.store.Run(ctx); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	return nil
}

// Call runs fn for req at most once per (GID, Branch, Op), in tx — the participant's own
// transaction, which the caller began and ends: commit it when Call returns nil, roll it back on
// an error, so the markers vanish with fn's partial work. It returns nil without calling fn for a
// duplicate and for an empty rollback (which also refuses that branch's try for good); an error
// wrapping [ErrHanging] for a try, action, prepare or precommit whose branch was cancelled;
// otherwise fn's error, wrapped with the gid, branch and op ([participant.OpCanCommit] calls fn
// every time). Run tx at READ COMMITTED: a try and a cancel of one branch serialize on the
// markers' unique index (other levels give a serialization failure to retry).
//
// ctx scopes the statements and is passed to fn. An invalid request returns an error wrapping
// [participant.ErrBadRequest], a nil tx one wrapping idempotency.ErrNilTx, before anything is
// written. Call is safe for concurrent use, each call with its own tx.
func (b *Barrier) Call(ctx context.Context, tx pgx.Tx, req participant.Request, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if tx == nil || (reflect.ValueOf(tx).Kind() == reflect.Pointer && reflect.ValueOf(tx).IsNil()) {
		return fmt.Errorf("participant: %s %s/%s: %w", req.Op, req.GID, req.Branch, idempotency.ErrNilTx)
	}
	if fn == nil {
		return errors.New("participant: barrier call with a nil function")
	}
	key, err := barrierKey(req)
	if err != nil {
		return err
	}
	if req.Op == participant.OpCanCommit { // a read-only vote: no marker, fn every time
		b.m.count(req.Op, resultRan)
		if err := fn(ctx, tx); err != nil {
			return fmt.Errorf("participant: %s %s/%s: %w", req.Op, req.GID, req.Branch, err)
		}
		return nil
	}
	claim := func(op participant.Op) (bool, error) {
		first, err := b.store.Claim(ctx, tx, markerOf(op).String(), key)
		if err != nil {
			return false, fmt.Errorf("participant: %s %s/%s: barrier: %w", req.Op, req.GID, req.Branch, err)
		}
		return first, nil
	}

	if origin, ok := originOf(req.Op); ok {
		first, err := claim(origin)
		if err != nil {
			return err
		}
		if first { // the empty rollback: no try before this cancel, and none will run after it
			if _, err := claim(req.Op); err != nil {
				return err
			}
			b.m.count(req.Op, resultEmptyRollback)
			return nil
		}
	}
	first, err := claim(req.Op)
	if err != nil {
		return err
	}
	if !first {
		if comp, ok := compensationOf(req.Op); ok {
			// The marker was there: either this try ran before (a duplicate) or a cancel wrote it
			// (hanging). The write decided fn is not called; this read only picks the answer. The
			// cancel, if any, committed both its markers together, so it is visible now.
			var cancelled bool
			if err := tx.QueryRow(ctx, b.exists, comp.String(), key).Scan(&cancelled); err != nil {
				return fmt.Errorf("participant: %s %s/%s: barrier: look for %s: %w", req.Op, req.GID, req.Branch, comp, err)
			}
			if cancelled {
				b.m.count(req.Op, resultHangingRefused)
				return fmt.Errorf("participant: %s %s/%s: %w", req.Op, req.GID, req.Branch, ErrHanging)
			}
		}
		b.m.count(req.Op, resultDuplicate)
		return nil // a duplicate: it ran and committed before
	}
	b.m.count(req.Op, resultRan)
	if err := fn(ctx, tx); err != nil {
		return fmt.Errorf("participant: %s %s/%s: %w", req.Op, req.GID, req.Branch, err)
	}
	return nil
}

// How Call decides. The markers are written with INSERT ... ON CONFLICT DO NOTHING on the
// unique key (op, gid, branch), never checked first (dtm's barrier, not Seata's fence, whose
// SELECT ... FOR UPDATE deadlocks under contention):
//
//   - A cancel (compensate, abort) first inserts the marker of its try (action, prepare or
//     precommit). If that insert wrote a row, the try never ran: the empty rollback. The cancel's
//     own marker is recorded and fn is not called; the try marker now blocks any later try.
//   - Every op then inserts its own marker. If the row was already there, the op already ran:
//     fn is not called. For a try whose branch was cancelled (its marker written by an empty
//     rollback, or the try ran and was then cancelled) the answer is ErrHanging instead; one
//     read of the cancel marker, made after the write decided fn is not called, tells the two
//     apart.
//   - A marker inserted by a transaction that has not ended blocks the second inserter until
//     it ends, so a concurrent try and cancel serialize: either the try commits first and the
//     cancel then runs fn, or the cancel commits its empty rollback first and the try is
//     refused. Confirm is not paired with try: a confirm only ever follows a successful try.
//   - 3PC: cancommit writes no marker; precommit is marked under prepare's scope, so it pairs
//     with abort as prepare does; docommit is marked like commit, unpaired.

// markerOf returns the op under whose scope op's marker is stored: prepare for 3PC's precommit,
// so that abort's pairing with prepare (empty rollback, hanging prepare) covers it; op itself
// otherwise.
func markerOf(op participant.Op) participant.Op {
	if op == participant.OpPreCommit {
		return participant.OpPrepare
	}
	return op
}

// originOf returns the op whose effect op undoes: try for cancel, action for compensate, prepare
// (or precommit, marked as prepare) for abort.
func originOf(op participant.Op) (participant.Op, bool) {
	switch op {
	case participant.OpCancel:
		return participant.OpTry, true
	case participant.OpCompensate:
		return participant.OpAction, true
	case participant.OpAbort:
		return participant.OpPrepare, true
	}
	return 0, false
}

// compensationOf returns the op that undoes op: cancel for try, compensate for action, abort for
// prepare and precommit.
func compensationOf(op participant.Op) (participant.Op, bool) {
	switch op {
	case participant.OpTry:
		return participant.OpCancel, true
	case participant.OpAction:
		return participant.OpCompensate, true
	case participant.OpPrepare, participant.OpPreCommit:
		return participant.OpAbort, true
	}
	return 0, false
}

// barrierKey returns the key under which the markers of req's branch are stored; the op is the
// scope. The key is "<len(gid)>:<gid>/<branch>": the decimal length prefix makes it injective —
// ("a/b", "c") and ("a", "b/c") give "3:a/b/c" and "1:a/b/c" — whatever bytes gid and branch hold.
// The "/" is only for people reading the table. It returns an error wrapping [participant.ErrBadRequest] for
// an unknown op, an empty gid or branch, text PostgreSQL cannot store, or a key longer than
// idempotency.MaxKeyLen bytes.
func barrierKey(req participant.Request) (string, error) {
	if _, err := req.Op.MarshalText(); err != nil { // an unknown op
		return "", fmt.Errorf("participant: unknown op %s: %w", req.Op, participant.ErrBadRequest)
	}
	if err := checkText("gid", req.GID); err != nil {
		return "", err
	}
	if err := checkText("branch", req.Branch); err != nil {
		return "", err
	}
	key := strconv.Itoa(len(req.GID)) + ":" + req.GID + "/" + req.Branch
	if len(key) > idempotency.MaxKeyLen {
		return "", fmt.Errorf("participant: gid and branch too long: their barrier key takes %d bytes, more than %d: %w",
			len(key), idempotency.MaxKeyLen, participant.ErrBadRequest)
	}
	return key, nil
}

func checkText(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("participant: empty %s: %w", what, participant.ErrBadRequest)
	case !utf8.ValidString(s):
		return fmt.Errorf("participant: %s is not valid UTF-8: %w", what, participant.ErrBadRequest)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("participant: %s contains a NUL byte: %w", what, participant.ErrBadRequest)
	}
	return nil
}
