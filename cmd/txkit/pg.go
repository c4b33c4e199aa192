package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/internal/pgutil"
)

// pgFlags say which PostgreSQL a command connects to. The URL may carry a password: given with -pg
// it shows in the process list (ps, /proc/<pid>/cmdline) to every user of the machine, so
// $TXKIT_PG_URL and -pg-file (a file holding the URL, readable only by its owner) are the ways to
// pass one.
type pgFlags struct {
	url, file string
}

func (p *pgFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.url, "pg", p.url, "PostgreSQL `URL` (default $TXKIT_PG_URL; shows in the process list: prefer\n"+
		"$TXKIT_PG_URL or -pg-file for a URL with a password)")
	fs.StringVar(&p.file, "pg-file", p.file, "`file` holding the PostgreSQL URL")
}

// maxURLFile bounds what -pg-file reads.
const maxURLFile = 64 << 10

// resolve returns the URL: -pg, else the contents of -pg-file, else $TXKIT_PG_URL.
func (p *pgFlags) resolve(getenv func(string) string) (string, error) {
	switch {
	case p.url != "" && p.file != "":
		return "", usageErr("give -pg or -pg-file, not both")
	case p.url != "":
		return p.url, nil
	case p.file != "":
		f, err := os.Open(p.file)
		if err != nil {
			return "", fmt.Errorf("-pg-file: %w", err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxURLFile+1))
		if err != nil {
			return "", fmt.Errorf("-pg-file %s: %w", p.file, err)
		}
		url := strings.TrimSpace(string(b))
		if url == "" || len(b) > maxURLFile || strings.ContainsAny(url, "\r\n") {
			return "", fmt.Errorf("-pg-file %s: want one line holding a PostgreSQL URL", p.file)
		}
		return url, nil
	}
	if url := getenv("TXKIT_PG_URL"); url != "" {
		return url, nil
	}
	return "", usageErr("no PostgreSQL URL: set TXKIT_PG_URL, -pg-file or -pg")
}

// printable escapes what a terminal would act on in s — control characters (ESC, CR, BEL, the C1
// controls), Unicode format characters (bidirectional overrides) and invalid UTF-8 — as Go escapes
// (\x1b, \u202e), so that text stored by others (last errors, keys, payloads) cannot move the
// cursor, retitle the window or hide what is printed around it. A backslash is escaped too, so
// that an escape in the output always means an escaped character.
func printable(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// oneLine shortens s to at most n runes on one line, for a table cell, and escapes what a
// terminal would act on (see printable).
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "-"
	}
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return printable(s)
}

// newPool returns a pool of at most one PostgreSQL connection to url (a command's calls are one
// after another). It does not connect (the components given it check their options first);
// [connect] does.
func newPool(ctx context.Context, url string) (*pgxpool.Pool, error) { return newPoolOf(ctx, url, 1) }

// newPoolOf is newPool with at most max connections.
func newPoolOf(ctx context.Context, url string, max int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	cfg.MaxConns = max
	pgutil.SetTCPTimeouts(&cfg.ConnConfig.Config) // a partition fails a command within a minute
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	return pool, nil
}

// connect opens pool's connection, so that an unreachable server is reported as such.
func connect(ctx context.Context, pool *pgxpool.Pool) error {
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	return nil
}

// openAdmin returns an Admin with opts on a new pool of at most conns connections to url, and the
// pool (the caller closes it). It does not connect; [connect] does. Bad options are a usage error.
func openAdmin(ctx context.Context, url string, conns int32, opts ...admin.Option) (*admin.Admin, *pgxpool.Pool, error) {
	pool, err := newPoolOf(ctx, url, conns)
	if err != nil {
		return nil, nil, err
	}
	a, err := admin.New(pool, opts...)
	if err != nil {
		pool.Close()
		return nil, nil, usageErr("%v", err)
	}
	return a, pool, nil
}

// registerPG registers the flags that say which PostgreSQL and schema a command works in: -pg,
// -pg-file and -schema, the schema of the tables named by of.
func (e *env) registerPG(fs *flag.FlagSet, of string) {
	e.pg.register(fs)
	fs.StringVar(&e.schema, "schema", "", "`schema` of "+of+" (default: the URL's search_path)")
}

// admin resolves the PostgreSQL URL and returns an Admin with opts (and -schema's schema, if
// given) on a new pool of one connection, and the pool (the caller closes it). It does not
// connect; [connect] does.
func (e *env) admin(ctx context.Context, opts ...admin.Option) (*admin.Admin, *pgxpool.Pool, error) {
	url, err := e.pg.resolve(e.getenv)
	if err != nil {
		return nil, nil, err
	}
	if e.schema != "" {
		opts = append(opts, admin.WithSchema(e.schema))
	}
	return openAdmin(ctx, url, 1, opts...)
}
