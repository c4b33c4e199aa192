package testenv

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

var paramRE = regexp.MustCompile(`\$(\d+)`)

// GenericPlan returns the generic plan PostgreSQL makes for stmt as a prepared statement on pool's
// database as it is now: the plan a driver caching prepared statements (pgx's default) runs once
// PostgreSQL stops planning it afresh for every call. Every parameter of stmt needs a type, from a
// cast ($1::text[]) or its place. A statement whose tables were just created, and are not yet
// analyzed, shows the plan a new deployment runs until autovacuum's first analyze: a join to
// arrays of keys read with "Seq Scan" there keeps reading the whole table while it grows.
func GenericPlan(t testing.TB, pool *pgxpool.Pool, stmt string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	n := 0
	for _, m := range paramRE.FindAllStringSubmatch(stmt, -1) {
		k, _ := strconv.Atoi(m[1])
		n = max(n, k)
	}
	nulls := strings.TrimSuffix(strings.Repeat("null, ", n), ", ")
	name := "testenv_generic_plan"
	var plan strings.Builder
	err = func() error {
		if _, err := conn.Exec(ctx, "set plan_cache_mode = force_generic_plan"); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, "prepare "+name+" as "+stmt); err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
		defer conn.Exec(ctx, "deallocate "+name) //nolint:errcheck // the session is reset below
		exec := "execute " + name
		if n > 0 {
			exec += "(" + nulls + ")"
		}
		rows, err := conn.Query(ctx, "explain (costs off) "+exec)
		if err != nil {
			return fmt.Errorf("explain: %w", err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				rows.Close()
				return err
			}
			plan.WriteString(line + "\n")
		}
		return rows.Err()
	}()
	if _, rerr := conn.Exec(ctx, "reset plan_cache_mode"); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		t.Fatalf("generic plan of %s: %v", stmt, err)
	}
	return plan.String()
}

// NoSeqScan fails t when plan, from GenericPlan, reads one of tables (names as the plan shows
// them, unquoted) with a sequential scan.
func NoSeqScan(t testing.TB, plan string, tables ...string) {
	t.Helper()
	for _, tb := range tables {
		if strings.Contains(plan, "Seq Scan on "+tb+" ") || strings.Contains(plan, "Seq Scan on "+tb+"\n") {
			t.Errorf("the generic plan reads %s sequentially:\n%s", tb, plan)
		}
	}
}
