// Command txkit is the operator's tool for txkit's tables: the outbox's backlog and dead letters,
// the global transactions of the tcc, saga, twopc and threepc coordinators, and the failed notifications.
//
//	txkit outbox backlog [-pg URL] [-schema S] [-table T]
//	txkit outbox dead    [-pg URL] [-schema S] [-table T] [-limit N]
//	txkit outbox requeue [-pg URL] [-schema S] [-table T] (-all | ID...)
//	txkit tx list        [-pg URL] [-schema S] [-prefix P] [-kind K] [-status S] [-unfinished] [-older-than D] [-limit N]
//	txkit tx show GID    [-pg URL] [-schema S] [-prefix P]
//	txkit notify failed  [-pg URL] [-schema S] [-table T] [-limit N]
//	txkit notify show ID [-pg URL] [-schema S] [-table T] [-reveal]
//	txkit notify redeliver ID... [-pg URL] [-schema S] [-table T]
//
//	txkit fence show     [-pg URL] [-schema S] [-table T] [-resource R] [-path P [-zk ADDRS]]
//	txkit fence reset    -resource R -path P [-zk ADDRS] [-pg URL] [-schema S] [-table T]
//
//	txkit serve [-listen 127.0.0.1:8089] [-listen-public] [-host NAME ...] [-tls-cert F -tls-key F]
//	            [-pg-file F] [-schema S] [-token-file F] [-zk ADDRS] [-election name=path ...]
//	            [-lock name=path ...] [-metrics-url URL]
//	            [-request-timeout D] [-max-requests N] [-max-conns N] [-audit-retention D]
//	txkit audit purge [-pg URL] [-schema S] [-table T] [-older-than 720h]
//
// The tx, outbox and notify commands and serve's JSON API and console share one implementation
// of every query: package admin. Requeue and redeliver are recorded in admin's audit table (actor
// "cli:$USER", or "cli:$TXKIT_ACTOR").
//
// The PostgreSQL URL comes from -pg, or from the file named by -pg-file, or from $TXKIT_PG_URL. A
// URL with a password given with -pg shows in the process list to every user of the machine: use
// $TXKIT_PG_URL or -pg-file (readable only by you) for one. ZooKeeper addresses come from -zk or
// $TXKIT_ZK, and its credentials (the digest user's "user:password") from $TXKIT_ZK_AUTH. Text
// read from the tables (errors, keys, payloads) is printed with control characters escaped (),
// so that it cannot drive the terminal.
//
// The exit status is 0 on success, 1 when the command failed (or requeue found fewer dead messages
// than IDs given, or reset found nothing to reset), and 2 on a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/outbox"
)

const usage = `usage: txkit <command> ...

commands:
  outbox backlog   count pending and dead messages
  outbox dead      list dead messages, oldest first      [-limit N] (default 50)
  outbox requeue   make dead messages pending again      ID... | -all

flags of every outbox command (before the verb or after it):
  -pg URL       PostgreSQL URL (default $TXKIT_PG_URL; shows in the process list: prefer
                $TXKIT_PG_URL or -pg-file for a URL with a password)
  -pg-file F    file holding the PostgreSQL URL
  -schema NAME  schema of the outbox table (default: the URL's search_path)
  -table NAME   outbox table (default txkit_outbox)

  tx list          global transactions, in gid order   [-kind tcc|saga|2pc|3pc] [-status S] [-unfinished]
                   [-older-than 10m] [-after GID] [-limit N]
  tx show GID      one global transaction and its branches

flags of every tx command (before the verb or after it):
  -pg URL, -pg-file F   as above
  -schema NAME  schema of the coordinator's tables (default: the URL's search_path)
  -prefix P     table prefix of one log (default: all four, tcc txkit_, saga txkit_saga_, two-phase
                commit txkit_2pc_, three-phase commit txkit_3pc_)

  notify failed      notifications that ran out of attempts   [-limit N]
  notify show ID     one notification and its attempts; its payload redacted unless -reveal
                     (which the audit table records)
  notify redeliver ID...  put failed notifications back on the schedule

flags of every notify command (before the verb or after it):
  -pg URL, -pg-file F   as above
  -schema NAME  schema of the notifier's tables (default: the URL's search_path)
  -table NAME   notifications table (default txkit_notify)

  fence show       the highest fencing token recorded per resource   [-resource R] [-path P]
                   with -path: the lock path's current epoch, and the resources whose recorded
                   epoch is above it (every holder of P is refused there)
  fence reset      forget resource R's token if its epoch is above lock path P's   -resource R -path P
                   (after the ensemble was rebuilt from empty data, which fences every leader)

flags of every fence command (before the verb or after it):
  -pg URL, -pg-file F   as above
  -schema NAME  schema of the fence table (default: the URL's search_path)
  -table NAME   fence table (default txkit_fence)
  -zk ADDRS     ZooKeeper servers, host:port,... (default $TXKIT_ZK; $TXKIT_ZK_AUTH: digest user:password)

  serve            the admin JSON API (/api/) and the web console (/) on one listener, until SIGTERM
  -listen ADDR     default 127.0.0.1:8089; a non-loopback address needs -listen-public, which
                   needs -token-file
  -token-file F    "actor token" lines (may act), "actor token read" lines (may only read);
                   mode 600. Every read needs a token: without the file, serve prints a read
                   token for the run
  -host NAME       a name clients use besides localhost and the -listen address (repeatable);
                   other Host headers are refused (421)
  -tls-cert F, -tls-key F   serve HTTPS with this PEM certificate and key
  -zk ADDRS, -election name=path, -lock name=path   leaders and lock holders to show
                   (ZooKeeper credentials from $TXKIT_ZK_AUTH, user:password: the applications' digest user)
  -metrics-url URL a /metrics page whose txkit_ figures the overview shows
  -request-timeout D   answer 503 to a request not done in D (default 30s)
  -max-requests N  requests served at once; more are answered 503 (default 64)
  -max-conns N     open connections; more are closed at once (default 256)
  -audit-retention D   purge audit rows older than D every hour (default 720h)
  -pg URL, -pg-file F, -schema NAME   as above

  audit purge      delete audit rows older than -older-than (default 720h; more than 5m)
                   [-pg URL] [-pg-file F] [-schema NAME] [-table NAME (default txkit_admin_audit)]

exit status: 0 success, 1 failure (or fewer dead messages requeued than IDs given), 2 usage error
`

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError is an error of the caller's: exit status 2 and the usage text.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// run is the whole command, minus the process: it returns the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, getenv, stdout, stderr)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return exitOK
	case errors.As(err, new(*usageError)):
		fmt.Fprintf(stderr, "txkit: %v\n\n%s", err, usage)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "txkit: %s\n", printable(err.Error()))
		return exitFail
	}
}

func usageErr(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// common holds the flags every outbox command takes.
type common struct {
	pg            pgFlags
	schema, table string
}

func (c *common) register(fs *flag.FlagSet) {
	c.pg.register(fs)
	fs.StringVar(&c.schema, "schema", c.schema, "schema of the outbox table")
	fs.StringVar(&c.table, "table", c.table, "outbox table")
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, by run
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErr("%s: %v", fs.Name(), err)
	}
	return nil
}

// subcommand parses a command's flags up to its verb, and returns the verb, a flag set for what
// follows it (with the same flags registered, so they may come before the verb or after it) and
// the arguments after the verb.
func subcommand(name string, args []string, register func(*flag.FlagSet), verbs string) (string, *flag.FlagSet, []string, error) {
	fs := newFlagSet(name)
	register(fs)
	if err := parse(fs, args); err != nil {
		return "", nil, nil, err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return "", nil, nil, usageErr("%s: no verb (%s)", name, verbs)
	}
	vs := newFlagSet(name + " " + rest[0])
	register(vs)
	return rest[0], vs, rest[1:], nil
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

func dispatch(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErr("no command")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		return flag.ErrHelp
	case "outbox":
	case "tx":
		return txCmd(ctx, args[1:], getenv, stdout)
	case "notify":
		return notifyCmd(ctx, args[1:], getenv, stdout)
	case "fence":
		return fenceCmd(ctx, args[1:], getenv, stdout)
	case "serve":
		return serveCmd(ctx, args[1:], getenv, stdout, stderr)
	case "audit":
		return auditCmd(ctx, args[1:], getenv, stdout)
	default:
		return usageErr("unknown command %q", args[0])
	}
	c := common{table: outbox.DefaultTable}
	verb, vs, rest, err := subcommand("outbox", args[1:], c.register, "backlog, dead, requeue")
	if err != nil {
		return err
	}
	var (
		limit int
		all   bool
	)
	switch verb {
	case "backlog":
	case "dead":
		vs.IntVar(&limit, "limit", 50, "how many dead messages to list")
	case "requeue":
		vs.BoolVar(&all, "all", false, "requeue every dead message")
	default:
		return usageErr("outbox: unknown verb %q", verb)
	}
	if err := parse(vs, rest); err != nil {
		return err
	}
	rest = vs.Args()

	// Check the arguments before connecting.
	var ids []uuid.UUID
	switch verb {
	case "backlog", "dead":
		if len(rest) > 0 {
			return usageErr("outbox %s: unexpected arguments %q", verb, rest)
		}
		if verb == "dead" && limit < 1 {
			return usageErr("outbox dead: -limit %d: must be at least 1", limit)
		}
	case "requeue":
		if all == (len(rest) > 0) {
			return usageErr("outbox requeue: give message IDs or -all, not both or neither")
		}
		for _, a := range rest {
			id, err := uuid.Parse(a)
			if err != nil {
				return usageErr("outbox requeue: %q is not a message ID: %v", a, err)
			}
			ids = append(ids, id)
		}
	}
	pgURL, err := c.pg.resolve(getenv)
	if err != nil {
		return err
	}
	opts := []admin.Option{admin.WithOutboxTable(c.table)}
	if c.schema != "" {
		opts = append(opts, admin.WithSchema(c.schema))
	}
	a, pool, err := openAdmin(ctx, pgURL, 1, opts...)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := connect(ctx, pool); err != nil {
		return err
	}

	switch verb {
	case "backlog":
		return backlog(ctx, a, stdout)
	case "dead":
		return dead(ctx, a, limit, stdout)
	default:
		if err := a.Migrate(ctx); err != nil { // the audit table
			return err
		}
		return requeue(ctx, a, cliActor(getenv), ids, all, stdout)
	}
}

func backlog(ctx context.Context, a *admin.Admin, w io.Writer) error {
	s, err := a.Outbox(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "table\t%s\n", s.Table)
	fmt.Fprintf(tw, "pending\t%d\n", s.Pending)
	fmt.Fprintf(tw, "dead\t%d\n", s.Dead)
	return tw.Flush()
}

func dead(ctx context.Context, a *admin.Admin, limit int, w io.Writer) error {
	list, err := a.DeadMessages(ctx, limit, uuid.Nil)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		_, err := fmt.Fprintf(w, "no dead messages in %s\n", a.OutboxTable())
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MSG_ID\tTOPIC\tKEY\tATTEMPTS\tCREATED\tBYTES\tLAST_ERROR")
	for _, d := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\n", d.ID, oneLine(d.Topic, 40), oneLine(d.Key, 40), d.Attempts,
			d.CreatedAt.UTC().Format(time.RFC3339), d.Body.Size, oneLine(d.LastError, 100))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(list) == limit {
		_, err := fmt.Fprintf(w, "(first %d; -limit shows more)\n", limit)
		return err
	}
	return nil
}

// requeue requeues the dead messages ids (or all of them) through admin, which records each in
// its audit table. An ID that is not a dead message is counted, not fatal.
func requeue(ctx context.Context, a *admin.Admin, actor string, ids []uuid.UUID, all bool, w io.Writer) error {
	if all {
		n, err := a.RequeueAll(ctx, actor)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "requeued %d dead messages\n", n)
		return err
	}
	var n int
	for _, id := range ids {
		err := a.Requeue(ctx, actor, id)
		switch {
		case err == nil:
			n++
		case errors.Is(err, admin.ErrConflict), errors.Is(err, admin.ErrNotFound):
		default:
			return err
		}
	}
	fmt.Fprintf(w, "requeued %d of %d messages\n", n, len(ids))
	if n < len(ids) {
		return fmt.Errorf("%d of the IDs given are not dead messages in %s", len(ids)-n, a.OutboxTable())
	}
	return nil
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
