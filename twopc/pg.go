package twopc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/participant"
)

// maxPreparedID is the longest transaction id PREPARE TRANSACTION accepts (GIDSIZE 200, with
// its terminating NUL).
const maxPreparedID = 199

// database is a registered PostgreSQL participant database.
type database struct {
	name   string
	pool   *pgxpool.Pool // the caller's: the branches' work and PREPARE TRANSACTION
	p2     *pgxpool.Pool // the coordinator's: phase two of branches whose connection is gone, the resolver
	target core.Target
}

// RegisterDB makes the PostgreSQL database behind pool a participant called name, for
// [Global.Enlist]. Its work runs in its own transaction, prepared with PREPARE TRANSACTION in
// phase one and ended with COMMIT PREPARED or ROLLBACK PREPARED in phase two — the database's
// own two-phase commit, so the server needs max_prepared_transactions above zero. Branches store
// the name: every Coordinator that may recover a transaction (the leader may be another process)
// must register the same name for the same database.
//
// Besides pool, the database gets a small pool of the coordinator's own, built from pool's
// configuration with at most [WithPhaseTwoConns] connections and closed by [Coordinator.Close]:
// the recovery and the in-doubt resolver end prepared transactions through it, so they never wait
// behind work holding every connection of pool (see the package doc). It connects only when used.
//
// The prepared transactions are named "txkit:<schema>.<prefix>:<length of gid>:<gid>:<name>",
// so the leader's scan of pg_prepared_xacts ([Coordinator.ResolveInDoubt]) finds this
// coordinator's and leaves everyone else's alone. Coordinators with different logs must
// therefore differ in schema or table prefix.
//
// An empty name, one with a backslash or a control character or longer than 199 bytes, a nil
// pool or a name registered twice returns an error wrapping [coordinator.ErrInvalidOption]; after
// [Coordinator.Close], one wrapping [ErrClosed].
func (c *Coordinator) RegisterDB(name string, pool *pgxpool.Pool) error {
	if err := checkName("database name", name); err != nil {
		return fmt.Errorf("twopc: register database: %w: %w", err, coordinator.ErrInvalidOption)
	}
	if pool == nil {
		return fmt.Errorf("twopc: register database %q: nil pool: %w", name, coordinator.ErrInvalidOption)
	}
	cfg := pool.Config() // a copy
	cfg.MaxConns, cfg.MinConns, cfg.MinIdleConns = int32(c.o.phaseTwoConns), 0, 0
	p2, err := pgxpool.NewWithConfig(context.Background(), cfg) // connects on first use
	if err != nil {
		return fmt.Errorf("twopc: register database %q: phase-two pool: %w", name, err)
	}
	d := &database{name: name, pool: pool, p2: p2}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		p2.Close()
		return fmt.Errorf("twopc: register database %q: %w", name, ErrClosed)
	}
	h, err := c.b.Parts.Register("pg:"+name, pgParticipant{c: c, d: d})
	if err == nil {
		d.target, err = c.b.Parts.Target(h)
	}
	if err != nil {
		p2.Close()
		return fmt.Errorf("twopc: register database %q: %w", name, err)
	}
	c.dbs[name] = d
	return nil
}

// Close closes the pools the coordinator made for phase two and the resolver (one per
// [Coordinator.RegisterDB]); the caller's pools stay open. Call it after [Coordinator.Run] has
// returned and every [Global.Commit] and [Coordinator.ResolveInDoubt] has: a phase two or a scan
// that needs one of these pools afterwards fails (the leader retries it). It does not block on the
// network; calling it again does nothing and returns nil.
func (c *Coordinator) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	dbs := make([]*database, 0, len(c.dbs))
	for _, d := range c.dbs {
		dbs = append(dbs, d)
	}
	c.mu.Unlock()
	for _, d := range dbs {
		d.p2.Close()
	}
	return nil
}

func (c *Coordinator) database(name string) (*database, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	d, ok := c.dbs[name]
	if !ok {
		return nil, fmt.Errorf("database %q is not registered (RegisterDB): %w", name, coordinator.ErrInvalidBranch)
	}
	return d, nil
}

// pgParticipant carries out phase two on a registered database: the prepared transaction of a
// branch is found by its name.
type pgParticipant struct {
	c *Coordinator
	d *database
}

// Do commits or rolls back the branch's prepared transaction. One that is not there any more is
// success: it was committed (a commit is decided only after every prepare succeeded) or rolled
// back (or, for an abort, never prepared). The starter's phase two runs on the connection the
// branch prepared on (see withHeld); everyone else's on the database's phase-two pool.
func (p pgParticipant) Do(ctx context.Context, req participant.Request) error {
	var verb string
	switch req.Op {
	case participant.OpCommit:
		verb = "COMMIT PREPARED "
	case participant.OpAbort:
		verb = "ROLLBACK PREPARED "
	default:
		return fmt.Errorf("twopc: database %s: op %s: a database is prepared by its branch's own transaction: %w",
			p.d.name, req.Op, participant.ErrBadRequest)
	}
	var db execer = p.d.p2
	if conn := heldConn(ctx, req.GID, req.Branch); conn != nil {
		db = conn
	}
	return p.c.finishPrepared(ctx, db, p.d, verb, p.c.preparedID(req.GID, req.Branch))
}

// execer runs one statement: a pool, or a connection taken from one.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// finishPrepared runs COMMIT PREPARED or ROLLBACK PREPARED of id on db, one of d's; "does not
// exist" is success.
func (c *Coordinator) finishPrepared(ctx context.Context, db execer, d *database, verb, id string) error {
	_, err := db.Exec(ctx, verb+quote(id))
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42704" { // undefined_object: no prepared transaction of that id
		return nil
	}
	if err != nil {
		return fmt.Errorf("twopc: database %s: %s%s: %w", d.name, verb, id, err)
	}
	return nil
}

// heldKey is the context key of the connections a starter's phase two runs on (withHeld).
type heldKey struct{}

// held are the connections gid's database branches prepared on, by branch name.
type held struct {
	gid   string
	conns map[string]*pgxpool.Conn
}

// withHeld returns ctx carrying conns, the connections gid's branches prepared on, for
// pgParticipant.Do: the starter's phase two goes through the core's calls (the same as the
// leader's), which know branches only by their recorded target, and this is how it reaches the
// connection each branch kept. Phase two must not wait for a connection of the database's pool:
// under load every one of them may be held by work waiting for the row locks this very prepared
// transaction holds.
func withHeld(ctx context.Context, gid string, conns map[string]*pgxpool.Conn) context.Context {
	if len(conns) == 0 {
		return ctx
	}
	return context.WithValue(ctx, heldKey{}, &held{gid: gid, conns: conns})
}

func heldConn(ctx context.Context, gid, branch string) *pgxpool.Conn {
	h, ok := ctx.Value(heldKey{}).(*held)
	if !ok || h.gid != gid {
		return nil
	}
	return h.conns[branch]
}

// preparedID names gid's branch's prepared transaction.
func (c *Coordinator) preparedID(gid, branch string) string {
	return c.preparedPrefix() + strconv.Itoa(len(gid)) + ":" + gid + ":" + branch
}

func (c *Coordinator) preparedPrefix() string { return "txkit:" + c.ns + ":" }

// parsePreparedID returns the gid and branch of one of this coordinator's prepared transaction
// ids, and false for anyone else's.
func (c *Coordinator) parsePreparedID(id string) (gid, branch string, ok bool) {
	rest, ok := strings.CutPrefix(id, c.preparedPrefix())
	if !ok {
		return "", "", false
	}
	n, rest, ok := strings.Cut(rest, ":")
	if !ok {
		return "", "", false
	}
	l, err := strconv.Atoi(n)
	if err != nil || l <= 0 || len(rest) < l+2 || rest[l] != ':' {
		return "", "", false
	}
	gid, branch = rest[:l], rest[l+1:]
	if checkName("gid", gid) != nil || checkName("branch", branch) != nil {
		return "", "", false // not a name this package makes: someone else's
	}
	return gid, branch, true
}

// quote makes s a SQL string literal (PREPARE TRANSACTION and its kin take no parameters) that
// means s whatever standard_conforming_strings is: an escape string, E'...', in which both the
// backslash and the quote are doubled. (A plain '...' with only the quote doubled is read
// differently when standard_conforming_strings is off: a backslash then escapes the quote that
// follows it, and the rest of s runs as SQL.) s holds no NUL: checkName refuses it, and so does
// PostgreSQL in any text.
func quote(s string) string {
	return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s) + "'"
}

// checkName validates a gid, a branch or database name or the namespace at the API boundary:
// they end up in the names of prepared transactions, which PostgreSQL takes only as string
// literals. Beyond what PostgreSQL accepts at all (valid UTF-8, no NUL, 199 bytes), it refuses
// the backslash (an escape character in some settings) and every control character, so a name
// cannot mean anything but itself in a statement, a log line or a terminal. Callers wrap the
// error with their sentinel.
func checkName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty %s", what)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", what)
	case len(s) > maxPreparedID:
		return fmt.Errorf("%s longer than %d bytes", what, maxPreparedID)
	case strings.IndexByte(s, '\\') >= 0:
		return fmt.Errorf("%s %q contains a backslash", what, s)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return fmt.Errorf("%s %q contains a control character", what, s)
	}
	return nil
}

// InDoubt counts what one [Coordinator.ResolveInDoubt] pass found and did.
type InDoubt struct {
	Found      int // this coordinator's prepared transactions older than the grace
	Committed  int // committed: their transaction decided to commit
	RolledBack int // rolled back: decided to abort, or not in the log (presumed abort)
	Undecided  int // left alone: their transaction is still in phase one (its timeout will abort it)
}

// ResolveInDoubt scans pg_prepared_xacts of every registered database for this coordinator's
// prepared transactions older than the grace of [WithInDoubtResolution] and ends each as the log
// says: COMMIT PREPARED when its transaction decided to commit, ROLLBACK PREPARED when it decided
// to abort or is not in the log at all — presumed abort: a transaction of databases only is
// recorded when it decides to commit, and deleted only long after phase two. Before rolling back
// one the log does not know, it records the gid as aborting, so a starter that was about to
// decide finds the abort instead of committing half a transaction. Transactions recorded and
// still in phase one (those with participant branches) are left to their timeout. So no prepared transaction, and none of the row locks it
// holds, outlives a failover. It scans and ends them through each database's phase-two pool
// (see [Coordinator.RegisterDB]), so it does not wait while work holds every connection of the
// registered pool. The leader runs it on a schedule ([Coordinator.Run]); operators may run it any
// time: it only carries out decisions already recorded. It blocks until every
// database was scanned or ctx ends; failures are joined and returned after the others were done.
func (c *Coordinator) ResolveInDoubt(ctx context.Context) (InDoubt, error) {
	c.mu.RLock()
	dbs := make([]*database, 0, len(c.dbs))
	for _, d := range c.dbs {
		dbs = append(dbs, d)
	}
	c.mu.RUnlock()
	var (
		res  InDoubt
		errs []error
	)
	for _, d := range dbs {
		if err := c.resolveDB(ctx, d, &res); err != nil {
			errs = append(errs, err)
		}
	}
	c.stats.resolved.Add(int64(res.Committed + res.RolledBack))
	return res, errors.Join(errs...)
}

func (c *Coordinator) resolveDB(ctx context.Context, d *database, res *InDoubt) error {
	rows, err := d.p2.Query(ctx, `select gid from pg_prepared_xacts
		where database = current_database() and left(gid, length($1)) = $1
		  and prepared < now() - make_interval(secs => $2) order by prepared`,
		c.preparedPrefix(), c.o.resolveGrace.Seconds())
	if err != nil {
		return fmt.Errorf("twopc: database %s: scan pg_prepared_xacts: %w", d.name, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("twopc: database %s: scan pg_prepared_xacts: %w", d.name, err)
	}
	var errs []error
	for _, id := range ids {
		gid, branch, ok := c.parsePreparedID(id)
		if !ok || branch != d.name { // another registered database's (they may share a server database)
			continue
		}
		res.Found++
		st, err := c.b.Status(ctx, gid)
		if errors.Is(err, core.ErrNotFound) {
			// Presumed abort. Record the abort first: the starter may still be about to insert
			// its decision to commit, and the unique gid lets only one of the two in.
			// The tiny timeout makes the record due at once: the leader's next tick finishes it.
			err = c.b.Log.CreateIn(ctx, gid, core.Kind2PC, core.StatusCancelling, time.Millisecond, nil,
				core.Branch{Name: d.name, Target: d.target})
			if err == nil || errors.Is(err, core.ErrInvalidState) {
				st, err = c.b.Status(ctx, gid)
			}
		}
		verb := ""
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("twopc: in-doubt %s: %w", id, err))
			continue
		case st == core.StatusConfirming || st == core.StatusConfirmed:
			verb = "COMMIT PREPARED "
		case st == core.StatusCancelling || st == core.StatusCancelled:
			verb = "ROLLBACK PREPARED "
		default:
			res.Undecided++
			continue
		}
		if err := c.finishPrepared(ctx, d.p2, d, verb, id); err != nil {
			errs = append(errs, err)
			continue
		}
		if verb == "COMMIT PREPARED " {
			res.Committed++
		} else {
			res.RolledBack++
		}
		c.b.Cfg.Logger.Info("twopc: resolved an in-doubt prepared transaction", slog.String("gid", gid),
			slog.String("database", d.name), slog.String("action", strings.TrimSpace(verb)))
	}
	return errors.Join(errs...)
}
