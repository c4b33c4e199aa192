// Package pgutil holds the PostgreSQL plumbing txkit's packages share: checking the names a user
// may choose for schemas, tables and channels, quoting a schema-qualified table name, and the
// adapter that gives robfig/cron a *slog.Logger.
package pgutil

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// CheckText accepts what PostgreSQL stores unchanged in a quoted identifier or a text column: a
// non-empty string of valid UTF-8, without NUL bytes, at most max bytes long.
func CheckText(s string, max int) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > max:
		return fmt.Errorf("%d bytes, more than %d", len(s), max)
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return errors.New("contains a NUL byte")
	}
	return nil
}

// Table returns table, qualified by schema when schema is not empty: quoted for SQL, and plain
// ("schema.table") for messages and logs.
func Table(schema, table string) (quoted, plain string) {
	ident := pgx.Identifier{table}
	if schema != "" {
		ident = pgx.Identifier{schema, table}
	}
	return ident.Sanitize(), strings.Join(ident, ".")
}

// CronLogger adapts a *slog.Logger to robfig/cron's Logger. The scheduler's routine messages
// (start, wake, run) go to debug; its errors (a recovered panic, a skipped run) to error.
type CronLogger struct{ L *slog.Logger }

// Info logs at debug level.
func (c CronLogger) Info(msg string, keysAndValues ...any) {
	c.L.Debug("cron: "+msg, keysAndValues...)
}

// Error logs at error level.
func (c CronLogger) Error(err error, msg string, keysAndValues ...any) {
	c.L.Error("cron: "+msg, append(keysAndValues, "err", err)...)
}
