package prepared

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txkit/txkit/internal/pgutil"
)

// Votes is one coordinator's vote table in its registered databases: "<schema>.<prefix>vote",
// one row per branch id ([Namespace.ID]). A branch's own transaction inserts its row (yes) just
// before PREPARE TRANSACTION, so the row is visible exactly when the branch has committed; a
// recovering leader that finds a branch neither prepared nor committed inserts the row itself as
// a no (a tombstone), and the branch's late insert then fails on the primary key, so it can never
// prepare. Between them, the rows tell a branch that committed from one that never prepared,
// which pg_prepared_xacts alone cannot once the prepared transaction is gone. A Votes is a value,
// safe for concurrent use.
type Votes struct {
	table  string // quoted, schema-qualified when the coordinator has a schema
	schema string // as given, or ""
	ddl    string // the table's versioned DDL (pgutil.MigrateOnce)
}

// voteAgeSuffix names the index on (created_at, id) the table had until issue 35: the DDL drops
// it where an earlier version created it.
const voteAgeSuffix = "vote_age"

// NewVotes returns the vote table of a coordinator whose log is in schema (empty: the
// search_path's) with table prefix prefix.
func NewVotes(schema, prefix string) Votes {
	v := Votes{table: pgx.Identifier{prefix + "vote"}.Sanitize(), schema: schema}
	ddl := ""
	age := pgx.Identifier{prefix + voteAgeSuffix}.Sanitize()
	if schema != "" {
		v.table = pgx.Identifier{schema, prefix + "vote"}.Sanitize()
		age = pgx.Identifier{schema, prefix + voteAgeSuffix}.Sanitize()
		ddl = "create schema if not exists " + pgx.Identifier{schema}.Sanitize() + ";\n"
	}
	// Processes creating it at once are serialized by the advisory lock. The primary key is the
	// table's only index: every transfer inserts a row per branch, and a second index (the
	// (created_at, id) one of earlier versions, dropped here) cost each insert a third of its WAL;
	// the sweep ([Votes.Old]) pages in id order on the primary key instead, a pass every few seconds.
	// A role that does not own a table an earlier version made leaves its index in place (dropping
	// it needs the owner): it costs that table's inserts their WAL, nothing else.
	v.ddl = "select pg_advisory_xact_lock(" + strconv.FormatInt(pgutil.MigrateLockKey("txkit/prepared/votes:"+v.table), 10) + ");\n" +
		ddl + "create table if not exists " + v.table + ` (
    id         text        collate "C" primary key, -- the branch's prepared transaction id (byte order: cheaper to compare)
    yes        boolean     not null,          -- true: the branch's own row, committed with it; false: a leader's tombstone
    created_at timestamptz not null default now()
);
do $$ begin drop index if exists ` + age + `; exception when insufficient_privilege then null; end $$`
	return v
}

// Table returns the quoted table name.
func (v Votes) Table() string { return v.table }

// Ensure creates the table in d's database and its schema when
// they do not exist, through d.P2, as a versioned DDL ([pgutil.MigrateOnce]: a version run
// before costs one read). A success is remembered: later calls return nil at once.
func (v Votes) Ensure(ctx context.Context, d *DB) error {
	if d.votesReady.Load() {
		return nil
	}
	if err := pgutil.MigrateOnce(ctx, d.P2, v.schema, v.ddl, nil); err != nil {
		return fmt.Errorf("create the vote table %s: %w", v.table, err)
	}
	d.votesReady.Store(true)
	return nil
}

// PrepareSQL returns what a branch's transaction runs to end phase one with vote markers: its
// yes row, then PREPARE TRANSACTION id, in one round trip (simple protocol). If the row is taken
// — a leader's tombstone — the insert fails and PREPARE does not run.
func (v Votes) PrepareSQL(id string) string {
	var b strings.Builder // one allocation: it runs on every branch's prepare
	b.Grow(len(v.table) + 2*len(id) + 80)
	b.WriteString("insert into ")
	b.WriteString(v.table)
	b.WriteString(" (id, yes) values (")
	writeQuoted(&b, id)
	b.WriteString(", true); PREPARE TRANSACTION ")
	writeQuoted(&b, id)
	return b.String()
}

// ErrUndecided: a branch's own transaction holds its vote row (it is between its insert and
// PREPARE TRANSACTION), so its vote cannot be known yet. Ask again later.
var ErrUndecided = errors.New("branch still voting")

// Vote returns the branch id's vote in d's database, making it final when it is not: true when
// the branch is prepared or has committed, false when it rolled back or never prepared — in which
// case its tombstone is in the table (inserted now if it was not), so it never will. A branch
// whose own transaction holds the row longer than wait returns an error wrapping
// [ErrUndecided]. It runs on d.P2; ctx bounds it.
func (v Votes) Vote(ctx context.Context, d *DB, id string, wait time.Duration) (bool, error) {
	if ok, err := isPrepared(ctx, d, id); err != nil || ok {
		return ok, err
	}
	var tombstoned bool
	err := pgx.BeginFunc(ctx, d.P2, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "select set_config('lock_timeout', $1, true)", strconv.FormatInt(max(wait.Milliseconds(), 1), 10)+"ms"); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, "insert into "+v.table+" (id, yes) values ($1, false) on conflict (id) do nothing", id)
		tombstoned = tag.RowsAffected() == 1
		return err
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "55P03" { // lock_not_available: the branch's transaction holds the row
		if ok, perr := isPrepared(ctx, d, id); perr != nil || ok {
			return ok, perr // it prepared meanwhile
		}
		return false, fmt.Errorf("vote of %s: %w", id, ErrUndecided)
	}
	if err != nil {
		return false, fmt.Errorf("vote of %s: %w", id, err)
	}
	if tombstoned {
		return false, nil
	}
	var yes bool
	if err := d.P2.QueryRow(ctx, "select yes from "+v.table+" where id = $1", id).Scan(&yes); err != nil {
		return false, fmt.Errorf("vote of %s: %w", id, err)
	}
	return yes, nil
}

func isPrepared(ctx context.Context, d *DB, id string) (bool, error) {
	var ok bool
	if err := d.P2.QueryRow(ctx, "select exists (select 1 from pg_prepared_xacts where gid = $1 and database = current_database())",
		id).Scan(&ok); err != nil {
		return false, fmt.Errorf("vote of %s: find it in pg_prepared_xacts: %w", id, err)
	}
	return ok, nil
}

// Old returns the ids of at most limit rows of d's vote table older than age whose ids come after
// after (byte order; "" is before every id), in that order: pass the last one back as after to read
// the next page. It reads the table's primary key, a page's worth of rows past after.
func (v Votes) Old(ctx context.Context, d *DB, age time.Duration, after string, limit int) ([]string, error) {
	rows, err := d.P2.Query(ctx, "select id from "+v.table+
		" where id > $1 and created_at < now() - make_interval(secs => $2) order by id limit $3",
		after, age.Seconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("read old votes: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read old votes: %w", err)
	}
	return ids, nil
}

// Delete deletes the rows of ids from d's vote table and returns how many it deleted.
func (v Votes) Delete(ctx context.Context, d *DB, ids []string) (int64, error) {
	tag, err := d.P2.Exec(ctx, "delete from "+v.table+" where id = any($1::text[])", ids)
	if err != nil {
		return 0, fmt.Errorf("delete votes: %w", err)
	}
	return tag.RowsAffected(), nil
}
