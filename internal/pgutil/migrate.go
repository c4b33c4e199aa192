package pgutil

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
)

// MigrationsTable is the table, in each schema a component migrates, that records which
// versions of its DDL have run there: one row per SHA-256 of the DDL's text.
const MigrationsTable = "txkit_migrations"

// createdTable finds the name, as written (quoted, qualified), of a table a DDL creates.
var createdTable = regexp.MustCompile(`(?i)create\s+table\s+if\s+not\s+exists\s+((?:"(?:[^"]|"")*"|[\w$]+)(?:\s*\.\s*(?:"(?:[^"]|"")*"|[\w$]+))?)`)

// MigrateOnce runs ddl — a component's statements, which pgx runs as one implicit transaction
// when given no arguments — on db, then after (when not nil), and records ddl's SHA-256 in
// schema's [MigrationsTable] (the search_path's schema when schema is empty); unless that hash
// is recorded already and every table ddl creates ("create table if not exists <name>") exists,
// when it returns nil at once: a table dropped by hand is created again. Every statement of such a DDL is idempotent,
// but "alter table ... add column if not exists" and "create index if not exists" still lock
// their table — the first against everything, the second against writes — when there is nothing
// to do, and so wait for every transaction writing to it, and make all the writes that come
// after wait behind them: a process restarted under load stalled its component's writes, and
// deadlocked with one of them. A recorded version runs one read instead. ddl must create schema
// when it is not empty. db is a pool or a connection, not a transaction (the read fails while the
// table does not exist yet). To run a version again, delete its row.
func MigrateOnce(ctx context.Context, db DBTX, schema, ddl string, after func(context.Context) error) error {
	sum := sha256.Sum256([]byte(ddl))
	hash := hex.EncodeToString(sum[:])
	table, name := Table(schema, MigrationsTable)
	var created []string
	for _, m := range createdTable.FindAllStringSubmatch(ddl, -1) {
		created = append(created, m[1])
	}
	var done bool
	err := db.QueryRow(ctx, "select exists (select 1 from "+table+" where ddl_hash = $1)"+
		" and not exists (select 1 from unnest($2::text[]) t where to_regclass(t) is null)", hash, created).Scan(&done)
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000"): // no table or no schema yet
	case err != nil:
		return fmt.Errorf("read %s: %w", name, err)
	case done:
		return nil
	}
	if _, err := db.Exec(ctx, ddl); err != nil {
		return err
	}
	if after != nil {
		if err := after(ctx); err != nil {
			return err
		}
	}
	record := "select pg_advisory_xact_lock(" + strconv.FormatInt(MigrateLockKey("txkit/migrations:"+name), 10) + ");\n" +
		"create table if not exists " + table + " (ddl_hash text primary key, applied_at timestamptz not null default now());\n" +
		"insert into " + table + " (ddl_hash) values ('" + hash + "') on conflict (ddl_hash) do nothing"
	if _, err := db.Exec(ctx, record); err != nil {
		return fmt.Errorf("record the migration in %s: %w", name, err)
	}
	return nil
}
