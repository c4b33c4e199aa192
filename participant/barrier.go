package participant

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
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
)

// Barrier makes each operation of a branch run at most once, in the participant's own database
// transaction, and handles the two anomalies of TCC and sagas: a cancel (compensate, abort) whose
// try never ran is answered success without calling the business code (the empty rollback), and a
// try arriving after it is refused with [ErrHanging], which wraps [ErrRefused] (the hanging try).
// Its markers are rows on a unique key, purged by age ([WithBarrierRetention], [Barrier.Run]); how
// it decides: docs/coordinators.md. The pool given to [NewBarrier] serves Migrate, Run and the
// transactions of [Barrier.Handler] and [Barrier.Participant]; [Barrier.Call] runs in the caller's.
// A Barrier is safe for concurrent use by multiple goroutines.
type Barrier struct {
	pool   *pgxpool.Pool
	o      barrierOptions
	store  *idempotency.Store
	table  string // quoted, schema-qualified
	exists string // select: is there a marker for (scope, key)?
	m      *barrierMetrics
	tracer trace.Tracer
}

// NewBarrier returns a Barrier on pool configured by opts. It does not touch the database: call
// [Barrier.Migrate] to create the table. It returns an error wrapping [ErrInvalidOption] when pool
// is nil or an option is unusable.
func NewBarrier(pool *pgxpool.Pool, opts ...BarrierOption) (*Barrier, error) {
	if pool == nil {
		return nil, fmt.Errorf("participant: barrier: nil pool: %w", ErrInvalidOption)
	}
	o := defaultBarrierOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	st, err := idempotency.New(pool, o.storeOptions()...)
	if err != nil {
		return nil, fmt.Errorf("participant: barrier: %w: %w", ErrInvalidOption, err)
	}
	m, err := newBarrierMetrics(o.reg)
	if err != nil {
		return nil, err
	}
	t, _ := pgutil.Table(o.schema, o.table)
	return &Barrier{
		m:      m,
		tracer: obs.TracerProvider(o.tp).Tracer(tracerName),
		pool:   pool,
		o:      o,
		store:  st,
		table:  t,
		// The table is the idempotency store's (sql/schema.sql of package idempotency): its
		// primary key is (scope, key).
		exists: `select exists (select 1 from ` + t + ` where scope = $1 and key = $2)`,
	}, nil
}

// Migrate creates the barrier's schema (if one was set), table and index when they do not exist.
// It is idempotent and safe to run from several processes at once. It blocks until PostgreSQL
// answers; ctx scopes only this call.
func (b *Barrier) Migrate(ctx context.Context) error {
	if err := b.store.Migrate(ctx); err != nil {
		return fmt.Errorf("participant: barrier: %w", err)
	}
	return nil
}

// Purge deletes, in one pass, the barrier rows older than the retention ([WithBarrierRetention])
// and returns how many it deleted. Pass a pool, so that each batch commits on its own. It blocks
// until the pass is done or ctx ends; ctx scopes only this call. It is safe for concurrent use.
func (b *Barrier) Purge(ctx context.Context, db idempotency.DBTX) (int64, error) {
	n, err := b.store.Purge(ctx, db)
	if err != nil {
		return n, fmt.Errorf("participant: barrier: %w", err)
	}
	return n, nil
}

// Run purges expired barrier rows on the schedule of [WithBarrierPurgeSchedule] (default every
// minute) until ctx ends. It blocks; when ctx ends it cancels a purge in flight, waits for its
// scheduler to stop and returns nil. Every replica of a participant may run it: no leadership is
// needed. It purges through the pool given to [NewBarrier].
func (b *Barrier) Run(ctx context.Context) error {
	if err := b.store.Run(ctx); err != nil {
		return fmt.Errorf("participant: barrier: %w", err)
	}
	return nil
}

// Call runs fn for req at most once per (GID, Branch, Op), in tx — the participant's own
// transaction, which the caller began and must end (Call never commits or rolls it back): commit
// it when Call returns nil, roll it back when Call returns an error, so that the markers Call wrote
// vanish with fn's partial work and a retry runs again. Run tx at READ COMMITTED (the default): a
// try and a cancel of one branch running at once then serialize, the second waiting for the first
// one's transaction to end; under REPEATABLE READ or SERIALIZABLE it fails with a serialization
// failure to retry.
//
// It returns nil without calling fn for an op that already ran and for an empty rollback; an error
// wrapping [ErrHanging] for a try (action, prepare, precommit) whose branch was cancelled;
// otherwise fn's error, wrapped with the gid, branch and op ([OpCanCommit] calls fn every time).
// An invalid request returns an error wrapping [ErrBadRequest], a nil tx one wrapping
// idempotency.ErrNilTx, before anything is written. ctx scopes the statements and is passed to fn.
// Call is safe for concurrent use, each call with its own tx. The markers it writes:
// docs/coordinators.md.
func (b *Barrier) Call(ctx context.Context, tx pgx.Tx, req Request, fn func(ctx context.Context, tx pgx.Tx) error) error {
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
	if req.Op == OpCanCommit { // a read-only vote: no marker, fn every time
		b.m.count(req.Op, barrierRan)
		if err := fn(ctx, tx); err != nil {
			return fmt.Errorf("participant: %s %s/%s: %w", req.Op, req.GID, req.Branch, err)
		}
		return nil
	}
	claim := func(op Op) (bool, error) {
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
			b.m.count(req.Op, barrierEmptyRollback)
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
				b.m.count(req.Op, barrierHangingRefused)
				return fmt.Errorf("participant: %s %s/%s: %w", req.Op, req.GID, req.Branch, ErrHanging)
			}
		}
		b.m.count(req.Op, barrierDuplicate)
		return nil // a duplicate: it ran and committed before
	}
	b.m.count(req.Op, barrierRan)
	if err := fn(ctx, tx); err != nil {
		return fmt.Errorf("participant: %s %s/%s: %w", req.Op, req.GID, req.Branch, err)
	}
	return nil
}

// markerOf returns the op under whose scope op's marker is stored: prepare for 3PC's precommit,
// so that abort's pairing with prepare (empty rollback, hanging prepare) covers it; op itself
// otherwise.
func markerOf(op Op) Op {
	if op == OpPreCommit {
		return OpPrepare
	}
	return op
}

// originOf returns the op whose effect op undoes: try for cancel, action for compensate, prepare
// (or precommit, marked as prepare) for abort.
func originOf(op Op) (Op, bool) {
	switch op {
	case OpCancel:
		return OpTry, true
	case OpCompensate:
		return OpAction, true
	case OpAbort:
		return OpPrepare, true
	}
	return 0, false
}

// compensationOf returns the op that undoes op: cancel for try, compensate for action, abort for
// prepare and precommit.
func compensationOf(op Op) (Op, bool) {
	switch op {
	case OpTry:
		return OpCancel, true
	case OpAction:
		return OpCompensate, true
	case OpPrepare, OpPreCommit:
		return OpAbort, true
	}
	return 0, false
}

// barrierKey returns the key under which the markers of req's branch are stored; the op is the
// scope. The key is "<len(gid)>:<gid>/<branch>": the decimal length prefix makes it injective —
// ("a/b", "c") and ("a", "b/c") give "3:a/b/c" and "1:a/b/c" — whatever bytes gid and branch hold.
// The "/" is only for people reading the table. It returns an error wrapping [ErrBadRequest] for
// an unknown op, an empty gid or branch, text PostgreSQL cannot store, or a key longer than
// idempotency.MaxKeyLen bytes.
func barrierKey(req Request) (string, error) {
	if _, ok := opNames[req.Op]; !ok {
		return "", fmt.Errorf("participant: unknown op %s: %w", req.Op, ErrBadRequest)
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
			len(key), idempotency.MaxKeyLen, ErrBadRequest)
	}
	return key, nil
}

func checkText(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("participant: empty %s: %w", what, ErrBadRequest)
	case !utf8.ValidString(s):
		return fmt.Errorf("participant: %s is not valid UTF-8: %w", what, ErrBadRequest)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("participant: %s contains a NUL byte: %w", what, ErrBadRequest)
	}
	return nil
}
