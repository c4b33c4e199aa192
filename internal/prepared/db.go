package prepared

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is a PostgreSQL database registered with a coordinator under Name: the caller's Pool, in
// which the branches' work runs and is prepared, and P2, the coordinator's own small pool for
// the phase two of branches whose connection is gone and for [Scan]. Phase two and the scan must
// not wait for a connection of Pool: under load every one of them may be held by work waiting for
// the row locks a prepared transaction holds. DB is safe for concurrent use.
type DB struct {
	Name       string
	Pool       *pgxpool.Pool // the caller's: the branches' work and PREPARE TRANSACTION
	P2         *pgxpool.Pool // the coordinator's: phase two of branches whose connection is gone, the scan
	canPrepare atomic.Bool   // CheckPrepare succeeded once
	votesReady atomic.Bool   // Votes.Ensure succeeded once
}

// NewDB returns the database behind pool registered as name, with P2 built from pool's
// configuration with at most phaseTwoConns connections. P2 connects only when used, so NewDB does
// not block; [DB.Close] closes it. A name that fails [CheckName], a nil pool or phaseTwoConns
// below 1 returns an error.
func NewDB(name string, pool *pgxpool.Pool, phaseTwoConns int) (*DB, error) {
	if err := CheckName("database name", name); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, fmt.Errorf("database %q: nil pool", name)
	}
	if phaseTwoConns < 1 || phaseTwoConns > math.MaxInt32 {
		return nil, fmt.Errorf("database %q: %d phase-two connections", name, phaseTwoConns)
	}
	cfg := pool.Config() // a copy
	cfg.MaxConns, cfg.MinConns, cfg.MinIdleConns = int32(phaseTwoConns), 0, 0
	p2, err := pgxpool.NewWithConfig(context.Background(), cfg) // connects on first use
	if err != nil {
		return nil, fmt.Errorf("database %q: phase-two pool: %w", name, err)
	}
	return &DB{Name: name, Pool: pool, P2: p2}, nil
}

// CheckPrepare returns nil when the server lets the database prepare transactions
// (max_prepared_transactions above zero), an error saying so when it does not, or the query's
// error. A success is remembered: later calls return nil without a round trip (a server
// restarted without prepared transactions then fails at PREPARE TRANSACTION instead). It asks
// through P2; ctx bounds the query.
func (d *DB) CheckPrepare(ctx context.Context) error {
	if d.canPrepare.Load() {
		return nil
	}
	var n int
	if err := d.P2.QueryRow(ctx, `select current_setting('max_prepared_transactions')::int`).Scan(&n); err != nil {
		return fmt.Errorf("database %s: max_prepared_transactions: %w", d.Name, err)
	}
	if n <= 0 {
		return fmt.Errorf("database %s cannot prepare transactions (max_prepared_transactions = 0)", d.Name)
	}
	d.canPrepare.Store(true)
	return nil
}

// Close closes P2 (the caller's Pool stays open), waiting for its connections to be returned
// and closed. Calling it again does nothing.
func (d *DB) Close() { d.P2.Close() }

// Verb is how [Finish] ends a prepared transaction.
type Verb string

// The two ends of a prepared transaction, with the space before the id.
const (
	Commit   Verb = "COMMIT PREPARED "
	Rollback Verb = "ROLLBACK PREPARED "
)

// ErrBusy: another session is ending the prepared transaction at this very moment (SQLSTATE
// 55000, "prepared transaction ... is busy"); it is gone or back once that session is done, so
// try again later.
var ErrBusy = errors.New("prepared transaction busy")

// Execer runs one statement: a *pgxpool.Pool, a *pgxpool.Conn or a *pgx.Conn.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Finish runs COMMIT PREPARED or ROLLBACK PREPARED (v) of the prepared transaction id on db. A
// prepared transaction that does not exist is success: it was ended before (by anyone) or, for a
// rollback, never prepared; so Finish may be repeated. One another session is ending at the same
// moment returns an error wrapping [ErrBusy]. It blocks for the statement; ctx bounds
// it. Other failures return an error naming the statement, which callers prefix with the
// database's name.
func Finish(ctx context.Context, db Execer, v Verb, id string) error {
	_, err := db.Exec(ctx, QuoteAfter(string(v), id))
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42704" { // undefined_object: no prepared transaction of that id
		return nil
	}
	if errors.As(err, &pe) && pe.Code == "55000" && strings.Contains(pe.Message, "is busy") {
		return fmt.Errorf("%s%s: %w: %w", v, id, ErrBusy, err)
	}
	return fmt.Errorf("%s%s: %w", v, id, err)
}

// Prepared is one of a namespace's prepared transactions found by [Scan].
type Prepared struct {
	ID     string    // its name in pg_prepared_xacts
	GID    string    // the global transaction's id
	Branch string    // the branch's name: the database's, for the coordinators of this module
	At     time.Time // when it was prepared
}

// Querier runs one query: a *pgxpool.Pool, a *pgxpool.Conn or a *pgx.Conn.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Scan returns the prepared transactions of ns in q's current database that were prepared more
// than olderThan ago, oldest first. Ids of ns that [Namespace.Parse] refuses are skipped. Several
// registered databases may share one server database, so callers keep only those whose Branch is
// theirs. It blocks for the query; ctx bounds it.
func Scan(ctx context.Context, q Querier, ns Namespace, olderThan time.Duration) ([]Prepared, error) {
	rows, err := q.Query(ctx, `select gid, prepared from pg_prepared_xacts
		where database = current_database() and left(gid, length($1)) = $1
		  and prepared < now() - make_interval(secs => $2) order by prepared`,
		ns.Prefix(), olderThan.Seconds())
	if err != nil {
		return nil, fmt.Errorf("scan pg_prepared_xacts: %w", err)
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		ID string
		At time.Time
	}])
	if err != nil {
		return nil, fmt.Errorf("scan pg_prepared_xacts: %w", err)
	}
	var found []Prepared
	for _, p := range all {
		if gid, branch, ok := ns.Parse(p.ID); ok {
			found = append(found, Prepared{ID: p.ID, GID: gid, Branch: branch, At: p.At})
		}
	}
	return found, nil
}
