package pgutil_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

// MigrateOnce runs a version of a DDL once per database: again, it only reads, so it takes no lock
// a writer holds up — before, its "add column if not exists" waited for the open transaction
// below; a changed DDL runs.
func TestIntegrationMigrateOnce(t *testing.T) {
	ctx := t.Context()
	s := testenv.PG(t)
	ddl := `create schema if not exists ` + pgx.Identifier{s.Name}.Sanitize() + `;
create table if not exists ` + pgx.Identifier{s.Name, "m"}.Sanitize() + ` (id int primary key);
alter table ` + pgx.Identifier{s.Name, "m"}.Sanitize() + ` add column if not exists a int`
	var afters int
	after := func(context.Context) error { afters++; return nil }
	if err := pgutil.MigrateOnce(ctx, s.Pool, s.Name, ddl, after); err != nil {
		t.Fatal(err)
	}
	// A writer holds the table (RowExclusiveLock) in an open transaction.
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `insert into m values (1, 1)`); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := pgutil.MigrateOnce(short, s.Pool, s.Name, ddl, after); err != nil {
		t.Fatalf("the same DDL again, beside a writer: %v", err)
	}
	if afters != 1 {
		t.Fatalf("after ran %d times, want once", afters)
	}
	// The DDL as it was before MigrateOnce does wait for the writer.
	if _, err := s.Pool.Exec(short, ddl); err == nil {
		t.Fatal("running the DDL itself beside the writer did not wait: the test shows nothing")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// A new version runs.
	ddl2 := ddl + ";\nalter table " + pgx.Identifier{s.Name, "m"}.Sanitize() + " add column if not exists b int"
	if err := pgutil.MigrateOnce(ctx, s.Pool, s.Name, ddl2, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, `insert into m (id, a, b) values (2, 2, 2)`); err != nil {
		t.Fatalf("the second version's column: %v", err)
	}
	var versions int
	if err := s.Pool.QueryRow(ctx, `select count(*) from `+pgutil.MigrationsTable).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if versions != 2 {
		t.Fatalf("%d versions recorded, want 2", versions)
	}
}

// A version recorded as run is run again when a table it creates is missing (dropped by hand):
// the record alone is not trusted. Before, MigrateOnce returned at once and the component's
// first write failed on the missing table.
func TestIntegrationMigrateOnceTableDropped(t *testing.T) {
	ctx := t.Context()
	s := testenv.PG(t)
	main := pgx.Identifier{s.Name, "Main Table"}.Sanitize() // quoted, with a space: found as written
	ddl := `create schema if not exists ` + pgx.Identifier{s.Name}.Sanitize() + `;
create table if not exists ` + main + ` (id int primary key);
CREATE TABLE IF NOT EXISTS plain_side (id int primary key)`
	for _, drop := range []string{main, "plain_side"} {
		if err := pgutil.MigrateOnce(ctx, s.Pool, s.Name, ddl, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pool.Exec(ctx, `drop table `+drop); err != nil {
			t.Fatal(err)
		}
		if err := pgutil.MigrateOnce(ctx, s.Pool, s.Name, ddl, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pool.Exec(ctx, `insert into `+drop+` values (1)`); err != nil {
			t.Fatalf("after %s was dropped and MigrateOnce ran again: %v", drop, err)
		}
	}
}
