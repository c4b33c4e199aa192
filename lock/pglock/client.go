package pglock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/lock"
)

// cleanupTimeout bounds the statements that clean up after a cancelled or failed call (freeing
// a row whose acquisition may have run, closing the listening connection).
const cleanupTimeout = 5 * time.Second

// Client is the PostgreSQL side of every lock it makes: the pool, the table and sequence, and
// the one connection that LISTENs for releases on behalf of all its waiters. That connection is
// opened with the pool's configuration but outside the pool, at the first Lock that waits, and
// kept until Close. Make one Client per process (or per schema) and share it; close it before
// the pool (an [AdvisoryMutex] hold keeps a pool connection, which pgxpool's Close waits for).
// Client is safe for concurrent use by multiple goroutines.
type Client struct {
	pool  *pgxpool.Pool
	o     options
	log   *slog.Logger
	table string // plain, for messages

	ddl, acquire, acquireWait, doTake, freeRow, renew, release, holderOf string
	seqLit                                                               string // the token sequence as a regclass literal
	keepIdle, userTimeout                                                string // keepaliveSQL's settings

	ctx    context.Context // ended by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	close  sync.Once

	mu        sync.Mutex
	closed    bool
	channel   string               // LISTEN/NOTIFY channel; "" until resolved
	listening bool                 // the listener goroutine runs
	waiters   map[string][]*waiter // by lock name, in arrival order
	holds     map[string]int       // live lease holds of this Client's Mutexes, by lock name
}

// New returns a Client on pool. It does not touch the database: call [Client.Migrate] once to
// create the table and the sequence. It returns an error wrapping [lock.ErrInvalidOption] when
// pool is nil or an option is unusable.
func New(pool *pgxpool.Pool, opts ...Option) (*Client, error) {
	if pool == nil {
		return nil, fmt.Errorf("pglock: nil pool: %w", lock.ErrInvalidOption)
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	t, plain := pgutil.Table(o.schema, table)
	s, _ := pgutil.Table(o.schema, sequence)
	seqLit := "'" + strings.ReplaceAll(s, "'", "''") + "'" // the sequence's name as a regclass literal
	ttl := "interval '" + strconv.FormatInt(o.ttl.Microseconds(), 10) + " microseconds'"
	// One implicit transaction: the advisory lock serializes concurrent migrations, which could
	// otherwise fail on pg_type's unique index.
	ddl := "select pg_advisory_xact_lock(" + strconv.FormatInt(pgutil.MigrateLockKey("txkit/lock/pglock/migrate:"+plain), 10) + ");\n"
	if o.schema != "" {
		ddl += "create schema if not exists " + pgx.Identifier{o.schema}.Sanitize() + ";\n"
	}
	ddl += "create sequence if not exists " + s + ";\n"
	ddl += `create table if not exists ` + t + ` (
    name       text        primary key,
    holder     uuid        not null,
    data       text        not null default '',
    token      bigint      not null,
    expires_at timestamptz not null
)`
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		pool: pool, o: o, log: o.log, table: plain, ddl: ddl, seqLit: seqLit,
		ctx: ctx, cancel: cancel, waiters: map[string][]*waiter{}, holds: map[string]int{},
		// One statement: the token the attempt drew (null: not taken) and how long the row it
		// found has left (null: no row, 0: free or expired; the outer select reads the
		// statement's snapshot, the row as it was before the attempt). PostgreSQL's clock decides
		// expiry. A free row is locked (free) before it is taken; a row seen held is not touched,
		// so a failed attempt locks and writes nothing. A free row locked by someone else — a
		// [Mutex.Do] transaction, or another attempt about to take it — is skipped: the attempt
		// fails without waiting (acquireWait waits for it instead). The token is drawn in the
		// update's SET, after the row is locked and its expiry rechecked: it is above every
		// earlier holder's. The insert's value is drawn before the statement can wait on a
		// concurrent insert of the name, but it is used only when no row has ever had the name,
		// since releases free the row instead of deleting it: no earlier holder then.
		acquire:     acquireSQL(t, seqLit, ttl, "skip locked"),
		acquireWait: acquireSQL(t, seqLit, ttl, ""),
		// The free row a first Do of a name needs, committed on its own (once per name), so
		// that no transaction holds an uncommitted row that attempts would wait for.
		freeRow: `insert into ` + t + ` (name, holder, data, token, expires_at) values ($1, '` + uuid.Nil.String() + `', '', nextval(` + seqLit + `), '-infinity')` +
			` on conflict (name) do nothing`,
		doTake: doTakeSQL(t, seqLit),
		renew:  `update ` + t + ` set expires_at = now() + ` + ttl + ` where name = $1 and holder = $2`,
		// A released row stays, free: holder nil, expired (see acquire for why it stays).
		release: `with r as (update ` + t + ` set holder = '` + uuid.Nil.String() + `', data = '', expires_at = '-infinity'` +
			` where name = $1 and holder = $2 returning name) select pg_notify($3, name) from r`,
		holderOf: `select data, token from ` + t + ` where name = $1 and expires_at > now()`,
	}
	if o.schema != "" {
		c.channel = pgutil.Channel(o.schema, table)
	}
	c.keepIdle, c.userTimeout = keepalive(o.renew)
	return c, nil
}

// doTakeSQL returns [Mutex.Do]'s take, in its own transaction.
func doTakeSQL(t, seqLit string) string {
	// The row is locked (for update), which waits for a row
	// locked by another taker (another Do's transaction) and locks it at that transaction's
	// end when it is free then; the token is drawn once it is locked. The row stays free
	// (expires_at -infinity) and is not rewritten: the transaction's row lock is the hold,
	// so the commit or abort that ends the transaction releases it, with no write of its
	// own, and the next Do locks the same row version (no new version per hand-over, no
	// recheck of a newer one). Only an expired Lock holder's row is freed (clr), so that the
	// holder's renewal or release finds it gone. The keepalive settings (keepaliveSQL's, for
	// this transaction only) make the server drop a holder's connection that went silent.
	// The advisory lock $4 only orders the queue of Dos (docs/lock.md): one waiter woken per
	// hand-over. q makes the settings before it waits for that lock, so that the hand-over —
	// from the holder's commit to this statement's answer — runs only the row lock and the
	// token; the row's time left is read only when the take failed.
	return `with cur as (select extract(epoch from greatest(expires_at, now()) - now())::float8 as left_s from ` + t + ` where name = $1),` +
		` q as materialized (select set_config('tcp_keepalives_idle', $2, true) as ki, set_config('tcp_keepalives_interval', '1', true) as kn,` +
		` set_config('tcp_keepalives_count', '2', true) as kc, set_config('tcp_user_timeout', $3, true) as ku,` +
		` pg_advisory_xact_lock($4) as queued),` +
		` got as materialized (select holder from ` + t + ` where name = $1 and expires_at < now() and (select true from q) for update),` +
		` clr as (update ` + t + ` set holder = '` + uuid.Nil.String() + `', data = '', expires_at = '-infinity'` +
		` where name = $1 and (select holder from got) <> '` + uuid.Nil.String() + `'),` +
		` won as materialized (select nextval(` + seqLit + `) as token from got)` +
		` select w.token, case when w.token is null then (select left_s from cur) end from (select (select token from won) as token) w`
}

// acquireSQL returns the attempt's statement (see New); skip is "skip locked" for an attempt
// that fails at once on a row locked by another taker, "" for one that waits for it.
func acquireSQL(t, seqLit, ttl, skip string) string {
	return `with cur as (select extract(epoch from greatest(expires_at, now()) - now())::float8 as left_s from ` + t + ` where name = $1),` +
		` free as (select name from ` + t + ` where name = $1 and expires_at < now() for update ` + skip + `),` +
		` upd as (update ` + t + ` as l set holder = $2, data = $3, token = nextval(` + seqLit + `), expires_at = now() + ` + ttl +
		` from free where l.name = free.name and l.expires_at < now() returning l.token),` +
		` ins as (insert into ` + t + ` (name, holder, data, token, expires_at)` +
		` select $1, $2, $3, nextval(` + seqLit + `), now() + ` + ttl + ` where not exists (select from ` + t + ` where name = $1)` +
		` on conflict (name) do nothing returning token)` +
		` select coalesce((select token from upd), (select token from ins)), (select left_s from cur)`
}

// Migrate creates the lock table and the token sequence (and the schema, if one was set) when
// they do not exist. It is idempotent and safe to run from several processes at once. It blocks
// until PostgreSQL answers; ctx scopes only this call.
func (c *Client) Migrate(ctx context.Context) error {
	if _, err := c.pool.Exec(ctx, c.ddl); err != nil {
		return fmt.Errorf("pglock: migrate %s: %w", c.table, err)
	}
	return nil
}

// Close ends every hold of the Client's locks (their leases end with an error wrapping
// [lock.ErrLockLost] and [lock.ErrClosed]; their rows are freed when PostgreSQL can be reached
// within a few seconds, otherwise they expire), stops the listening connection and waits for every
// goroutine the Client started. Waiting Lock calls return an error wrapping [lock.ErrClosed]. It
// does not close the pool. Close is idempotent and returns nil.
func (c *Client) Close() error {
	c.close.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.cancel()
		c.wg.Wait()
	})
	return nil
}

// errClosed is the error of a call on a closed Client.
func (c *Client) errClosed(name string) error {
	return fmt.Errorf("pglock: %s: %w", name, lock.ErrClosed)
}

// goOwned runs f in a goroutine that Close waits for; it returns false when the Client is closed.
func (c *Client) goOwned(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

// channelName returns the LISTEN/NOTIFY channel: the one of the schema-qualified table, the
// schema being WithSchema's or, without it, the one the connections' search_path resolves to
// (asked once).
func (c *Client) channelName(ctx context.Context, q pgutil.DBTX) (string, error) {
	c.mu.Lock()
	ch := c.channel
	c.mu.Unlock()
	if ch != "" {
		return ch, nil
	}
	var schema *string
	if err := q.QueryRow(ctx, `select current_schema()`).Scan(&schema); err != nil {
		return "", fmt.Errorf("pglock: current schema: %w", err)
	}
	ch = pgutil.Channel("", table)
	if schema != nil {
		ch = pgutil.Channel(*schema, table)
	}
	c.mu.Lock()
	c.channel = ch
	c.mu.Unlock()
	return ch, nil
}

// waiter is one Lock call waiting for its name's release.
type waiter struct {
	wake chan struct{} // buffered: a wake-up is never lost, never blocks the listener
}

// awaitRelease waits, after an attempt found the lock held with left seconds to run (nil: not
// known), for the release's wake-up w, the row's expiry or the fallback check. It returns ctx's
// error, or the closed Client's.
func (c *Client) awaitRelease(ctx context.Context, w *waiter, name string, left *float64) error {
	d := c.o.fallback
	if left != nil {
		d = min(d, max(time.Duration(*left*float64(time.Second)), 0)+time.Millisecond)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.wake:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return c.errClosed(name)
	}
}

// watch registers a waiter for name and starts the listener if it does not run yet. busy
// reports that this Client holds name or has other Lock calls waiting for it: an attempt now
// would fail, and the waiter waits for a wake-up first. Call stop when done waiting.
func (c *Client) watch(name string) (w *waiter, stop func(), busy bool) {
	w = &waiter{wake: make(chan struct{}, 1)}
	c.mu.Lock()
	busy = c.holds[name] > 0 || len(c.waiters[name]) > 0
	c.waiters[name] = append(c.waiters[name], w)
	start := !c.listening && !c.closed
	if start {
		c.listening = true
		c.wg.Add(1)
	}
	c.mu.Unlock()
	if start {
		go func() {
			defer c.wg.Done()
			c.listen()
		}()
	}
	return w, func() { c.unwatch(name, w) }, busy
}

// unwatch removes w from name's waiters. A wake-up w received and did not use goes to the next
// waiter, since a release wakes only one waiter per name, unless this Client holds name now (w
// took it).
func (c *Client) unwatch(name string, w *waiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.waiters[name]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(c.waiters, name)
		return
	}
	c.waiters[name] = ws
	select {
	case <-w.wake:
		if c.holds[name] == 0 {
			signal(ws[0])
		}
	default:
	}
}

// holding reports whether one of this Client's Mutexes holds name.
func (c *Client) holding(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.holds[name] > 0
}

// held counts a lease hold of name taken by this Client.
func (c *Client) held(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holds[name]++
}

// dropped counts a hold of name released or lost and wakes this Client's longest waiter on
// name, without waiting for the release's notification to come back.
func (c *Client) dropped(name string) {
	c.mu.Lock()
	if c.holds[name]--; c.holds[name] <= 0 {
		delete(c.holds, name)
	}
	c.mu.Unlock()
	c.wakeOne(name)
}

func signal(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// wakeOne signals the waiter of name that has waited longest in this Client: a release frees the
// lock once, so one waiter per process tries again (those of other processes are woken by their
// own Client). It wakes none while this Client holds name (the notification of its own release,
// whose waiter already took the lock): that hold's end wakes the next.
func (c *Client) wakeOne(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holds[name] > 0 {
		return
	}
	if ws := c.waiters[name]; len(ws) > 0 {
		signal(ws[0])
	}
}

// wakeAll signals every waiter: a release may have been missed while the listener was not
// listening.
func (c *Client) wakeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ws := range c.waiters {
		for _, w := range ws {
			signal(w)
		}
	}
}

// listen keeps one connection LISTENing on the Client's channel until Close, and dispatches each
// release notification to the waiters of its lock name. After every (re)connection it wakes every
// waiter, since a release may have been missed meanwhile.
func (c *Client) listen() {
	bo := lock.Backoff{Min: 50 * time.Millisecond, Max: 5 * time.Second}
	for c.ctx.Err() == nil {
		err := c.listenOnce(bo.Reset)
		if c.ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrPooled) {
			c.log.Warn("pglock: LISTEN through a connection pooler receives no notification; waiters retry at the fallback interval only",
				"table", c.table)
			return
		}
		pause := bo.Next()
		c.log.Warn("pglock: listening connection lost; reconnecting", "table", c.table, "err", err, "pause", pause)
		c.wakeAll()
		if sleep(c.ctx, c.ctx, pause) != nil {
			return
		}
	}
}

// listenOnce connects, LISTENs and dispatches notifications until the connection fails or Close.
func (c *Client) listenOnce(listening func()) error {
	conn, err := pgx.ConnectConfig(c.ctx, c.pool.Config().ConnConfig)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_ = conn.Close(ctx)
	}()
	ch, err := c.channelName(c.ctx, conn)
	if err != nil {
		return err
	}
	if pooled, err := pgutil.BehindPooler(c.ctx, conn); err != nil {
		return err
	} else if pooled {
		return ErrPooled
	}
	if _, err := conn.Exec(c.ctx, "listen "+pgx.Identifier{ch}.Sanitize()); err != nil {
		return fmt.Errorf("listen %s: %w", ch, err)
	}
	listening()
	c.wakeAll() // a release before LISTEN took effect was missed
	for {
		n, err := conn.WaitForNotification(c.ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) && c.ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("wait for notification: %w", err)
		}
		c.wakeOne(n.Payload)
	}
}

// waitOn runs a statement that may wait on the server (for a lock) on conn, until it answers, ctx
// ends or the Client closes. run's context is one that ctx does not cancel: when ctx ends (or
// Close), a cancel request stops the wait on the server and the connection stays usable; only if
// the server does not answer within cleanupTimeout is run's context cancelled, which closes the
// connection. It returns run's error (the cancelled statement's, when it was stopped).
func (c *Client) waitOn(ctx context.Context, conn *pgconn.PgConn, run func(ctx context.Context) error) error {
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	stopClose := context.AfterFunc(c.ctx, wcancel)
	defer stopClose()
	qctx, qcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer qcancel()
	qdone := make(chan struct{})
	canceled := make(chan struct{})
	stop := context.AfterFunc(wctx, func() {
		defer close(canceled)
		cctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_ = conn.CancelRequest(cctx)
		t := time.NewTimer(cleanupTimeout)
		defer t.Stop()
		select {
		case <-qdone:
		case <-t.C:
			qcancel()
		}
	})
	err := run(qctx)
	close(qdone)
	if !stop() { // the cancel has started: wait for it to be done with conn
		<-canceled
	}
	return err
}
