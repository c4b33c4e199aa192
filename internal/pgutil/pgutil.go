// Package pgutil holds the PostgreSQL plumbing txkit's packages share, written once: the DBTX
// interface every package names as its own, the nil check of a DBTX, checking the names a user may
// choose for schemas, tables and channels, quoting a schema-qualified table name, the key of the
// advisory lock that serialises a migration, error text fit for a text column, the cron parser and
// checks, the adapter that gives robfig/cron a *slog.Logger, and the scheduler loop of the jobs
// every replica runs ([RunSchedule]).
package pgutil

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/robfig/cron/v3"
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

// IsText reports whether PostgreSQL can hold s in a text value: valid UTF-8 without NUL bytes.
// A query given a parameter that is not fails (22021); a row cannot hold one.
func IsText(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

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

// CronParser reads the schedules txkit's packages accept: five fields ("* * * * *"), six with
// seconds first ("*/2 * * * * *"), and descriptors ("@hourly", "@every 5s"). Unlike robfig/cron's
// own parser, which rounds an "@every" to whole seconds (at least one), it keeps "@every 200ms"
// as written: every 200 ms after the previous run.
func CronParser() cron.ScheduleParser {
	return cronParser{cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)}
}

type cronParser struct{ cron.Parser }

func (p cronParser) Parse(spec string) (cron.Schedule, error) {
	d, ok := strings.CutPrefix(spec, "@every ")
	if !ok {
		return p.Parser.Parse(spec)
	}
	every, err := time.ParseDuration(strings.TrimSpace(d))
	if err != nil {
		return nil, fmt.Errorf("%q: %w", spec, err)
	}
	if every <= 0 {
		return nil, fmt.Errorf("%q: the interval must be positive", spec)
	}
	return everySchedule(every), nil
}

// everySchedule runs a fixed interval after the previous run.
type everySchedule time.Duration

func (e everySchedule) Next(t time.Time) time.Time { return t.Add(time.Duration(e)) }

// RunSchedule runs job on the schedule spec ([CronParser]'s syntax) until ctx ends, with a
// robfig/cron scheduler that skips a run while the previous one is still going and recovers from
// a panic in job, logging both through log. job gets ctx: it scopes the work too. RunSchedule
// blocks; when ctx ends it waits for a run in flight to return and returns nil. A spec the parser
// refuses returns its error before anything runs.
func RunSchedule(ctx context.Context, spec string, log *slog.Logger, job func(ctx context.Context)) error {
	l := CronLogger{L: log}
	c := cron.New(cron.WithParser(CronParser()), cron.WithLogger(l), cron.WithChain(cron.Recover(l), cron.SkipIfStillRunning(l)))
	if _, err := c.AddFunc(spec, func() { job(ctx) }); err != nil {
		return fmt.Errorf("schedule %q: %w", spec, err)
	}
	c.Start()
	<-ctx.Done()
	<-c.Stop().Done()
	return nil
}

// CheckCron reports whether [CronParser] accepts spec.
func CheckCron(spec string) error {
	_, err := CronParser().Parse(spec)
	return err
}

// maxIdent is the longest identifier PostgreSQL keeps (NAMEDATALEN - 1 bytes).
const maxIdent = 63

// Channel is the default LISTEN/NOTIFY channel of a table: "schema.table" (or "table" without a
// schema) when that fits in 63 bytes, else its first bytes followed by a hash of the whole, so
// that tables of the same name in different schemas never share a channel.
func Channel(schema, table string) string {
	name := table
	if schema != "" {
		name = schema + "." + table
	}
	if len(name) <= maxIdent {
		return name
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	sum := fmt.Sprintf("%016x", h.Sum64())
	head := name[:maxIdent-1-len(sum)]
	for !utf8.ValidString(head) { // do not cut a character in two
		head = head[:len(head)-1]
	}
	return head + "~" + sum
}
