package pgutil

import (
	"context"
	"hash/fnv"
	"reflect"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what txkit's packages need from PostgreSQL: *pgxpool.Pool, *pgx.Conn and pgx.Tx all
// satisfy it, so a call can run in the caller's transaction. The public packages name it as their
// own DBTX (a type alias), so one interface serves them all.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// IsNil reports whether x is nil, or a nil pointer, map, func, channel, slice or interface held in
// an interface (a nil *pgxpool.Pool passed as a DBTX).
func IsNil(x any) bool {
	if x == nil {
		return true
	}
	switch v := reflect.ValueOf(x); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// MigrateLockKey returns the key of the transaction-scoped advisory lock that serialises
// concurrent migrations of what name designates (two CREATE TABLE IF NOT EXISTS of one table at
// once can fail on pg_type's unique index): FNV-1a of name, as a bigint.
func MigrateLockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

// ErrorText makes err's text storable in a text column of at most max bytes: valid UTF-8, no NUL
// byte, cut at a character boundary.
func ErrorText(err error, max int) string {
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	if len(s) > max {
		s = strings.ToValidUTF8(s[:max], "")
	}
	return s
}
