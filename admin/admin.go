package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/notify"
	"github.com/txkit/txkit/outbox"
)

// Admin answers operators' questions about txkit's tables — global transactions, the outbox,
// notifications, leaders and locks — and carries out their few actions (requeue, redeliver),
// recording each action in an audit table. Its methods are the only implementation of these
// queries: the JSON API ([Admin.Handler]), the web console (package admin/console) and the txkit
// command all call them.
//
// Admin is safe for concurrent use by multiple goroutines. It holds no connection of its own: every
// method borrows one from the pool for its call.
type Admin struct {
	pool   *pgxpool.Pool
	o      options
	logs   []txLog
	ob     *outbox.Outbox
	obT    string // quoted outbox table
	nt     *notify.Notifier
	ntT    string // quoted notifications table
	audit  string // quoted audit table
	auditN string // plain audit table name, for messages
	ddl    string
	finals string // the final statuses' names as a SQL list, as core's partial indexes write it

	refused *refusals // POSTs refused before authentication: a metric and a sampled log
	limit   *limiter  // POSTs per client address; nil: no limit
}

type txLog struct {
	src    LogSource
	pool   *pgxpool.Pool // src.Pool, or the Admin's
	log    *core.Log
	global string // quoted table names
	branch string
}

// New returns an Admin on pool configured by opts. It checks the options — every table name
// through the owning package's own checks — but does not connect: call [Admin.Migrate] to create
// the audit table. It returns an error wrapping [ErrInvalidOption] when pool is nil or an option is
// unusable.
func New(pool *pgxpool.Pool, opts ...Option) (*Admin, error) {
	if pool == nil {
		return nil, fmt.Errorf("admin: nil pool: %w", ErrInvalidOption)
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	a := &Admin{pool: pool, o: o}
	var err error
	if a.refused, err = newRefusals(o.reg, o.log, o.now); err != nil {
		return nil, err
	}
	if o.rate > 0 {
		a.limit = newLimiter(o.rate, o.burst, o.now)
	}
	for _, src := range o.logs {
		lopts := []core.LogOption{core.WithTablePrefix(src.Prefix)}
		if o.schema != "" {
			lopts = append(lopts, core.WithSchema(o.schema))
		}
		lp := cmp.Or(src.Pool, pool)
		l, err := core.New(lp, lopts...)
		if err != nil {
			return nil, fmt.Errorf("admin: log %s: %w: %w", src.Name, err, ErrInvalidOption)
		}
		g, _ := pgutil.Table(o.schema, src.Prefix+"global")
		b, _ := pgutil.Table(o.schema, src.Prefix+"branch")
		a.logs = append(a.logs, txLog{src: src, pool: lp, log: l, global: g, branch: b})
	}
	if a.ob, err = outbox.New(pool, outbox.WithTable(o.schema, o.outboxTable)); err != nil {
		return nil, fmt.Errorf("admin: %w: %w", err, ErrInvalidOption)
	}
	if a.nt, err = notify.New(pool, nil, notify.WithTable(o.schema, o.notifyTable)); err != nil { // operator calls need no receiver
		return nil, fmt.Errorf("admin: %w: %w", err, ErrInvalidOption)
	}
	a.obT, _ = pgutil.Table(o.schema, o.outboxTable)
	a.ntT, _ = pgutil.Table(o.schema, o.notifyTable)
	a.audit, a.auditN = pgutil.Table(o.schema, o.auditTable)
	// The literal list (sorted, quoted, as core renders its indexes' predicates) lets the
	// overview's queries use core's partial indexes of unfinished and finished transactions.
	var finals []string
	for s := core.Status(1); !strings.HasPrefix(s.String(), "Status("); s++ {
		if s.Final() {
			finals = append(finals, "'"+s.String()+"'")
		}
	}
	sort.Strings(finals)
	a.finals = strings.Join(finals, ", ")
	a.ddl = auditDDL(o.schema, a.audit, o.auditTable)
	return a, nil
}

// Migrate creates the audit table (and the schema, if one was set) when they do not exist. The
// other tables belong to their packages, which create them. It is idempotent and safe to run from
// several processes at once; ctx scopes only this call.
func (a *Admin) Migrate(ctx context.Context) error {
	if err := pgutil.MigrateOnce(ctx, a.pool, a.o.schema, a.ddl, nil); err != nil {
		return fmt.Errorf("admin: migrate %s: %w", a.auditN, err)
	}
	return nil
}

// auditDDL is the audit table: one row per mutating call of a known actor, refused ones included.
// idem_key and response make calls with an Idempotency-Key answer a repeat with the first answer;
// nonce (a hash of a signed request's signature, never the signature) makes a signed request
// count once.
func auditDDL(schema, table, plain string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "select pg_advisory_xact_lock(%d);\n", pgutil.MigrateLockKey("txkit/admin/migrate:"+table))
	if schema != "" {
		fmt.Fprintf(&b, "create schema if not exists %s;\n", pgx.Identifier{schema}.Sanitize())
	}
	fmt.Fprintf(&b, `create table if not exists %s (
    id       bigserial   primary key,
    at       timestamptz not null default now(),
    actor    text        not null,
    action   text        not null,  -- outbox.requeue, notify.redeliver, ...
    target   text        not null,  -- the message or notification id
    result   text        not null,  -- ok, not_found, conflict, unauthorized, error, started
    status   integer     not null,  -- the HTTP status answered
    message  text        not null default '',
    remote   text        not null default '',
    idem_key text,                  -- the request's Idempotency-Key
    response bytea                  -- the answer's body, replayed for a repeat of idem_key
);
create unique index if not exists %s on %s (actor, idem_key) where idem_key is not null;
`, table, pgx.Identifier{plain + "_key"}.Sanitize(), table)
	// Version 2: signed requests claim a hash of their signature as a nonce. Rows written before
	// keyed a signed request by its signature ("signature:v1=..."): that becomes its nonce, and
	// signatures are scrubbed from the messages that quoted such a key.
	fmt.Fprintf(&b, `alter table %[1]s add column if not exists nonce text; -- sha256 hex of a signed request's signature
create unique index if not exists %[2]s on %[1]s (nonce) where nonce is not null;
create index if not exists %[3]s on %[1]s (at);
update %[1]s set nonce = encode(sha256(convert_to(substr(idem_key, 11), 'UTF8')), 'hex'), idem_key = null
where idem_key like 'signature:%%';
update %[1]s set message = regexp_replace(message, 'v1=[0-9a-f]+', 'v1=(signature removed)', 'g') where message like '%%v1=%%';
`, table, pgx.Identifier{plain + "_nonce"}.Sanitize(), pgx.Identifier{plain + "_at"}.Sanitize())
	return b.String()
}

// missing reports whether err is PostgreSQL's "relation does not exist".
func missing(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}
