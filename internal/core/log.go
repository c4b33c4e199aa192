package core

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/participant"
)

//go:embed sql/*.sql
var sqlFS embed.FS

// Log is the durable log of global transactions and their branches in PostgreSQL, shared by the
// tcc, saga and 2pc coordinators. Every state change is one PostgreSQL transaction that
// conditions on the old status; writes made for a leader pass the [fence.Fence] with the leader's
// token first. Every time it stores is PostgreSQL's now(), never the coordinator's clock. With
// [WithGroupCommit], the starters' state changes of concurrent transactions share PostgreSQL
// transactions (each its own statement, pipelined in one round trip), each still conditioned on its own old status
// and reported to its own caller (groupcommit.go).
//
// Log is safe for concurrent use by multiple goroutines.
type Log struct {
	pool   *pgxpool.Pool
	o      options
	fence  *fence.Fence
	name   string // schema-qualified global table name, for messages and the fence resource
	branch string // the branch table, quoted
	ddl    string
	q      map[string]string
	m      *kindMetrics // the coordinator's that made the log (NewBase), or nil
	tr     trace.Tracer // the coordinator's (NewBase), or the global provider's
	gw     *groupWriter // WithGroupCommit (groupcommit.go), or nil
	lg     *slog.Logger // the coordinator's (NewBase), or a discarding one
	bg     background   // the finishes WithDeferredFinish is writing (deferred.go)
	df     deferrals    // those finishes by gid (deferred.go)
	// leaseArg is the lease in seconds as a statement's argument, boxed once (statement).
	leaseArg any
	// createN[n] is the record of a transaction with n branches as a VALUES list (sql/queries.sql
	// "create_values"): [0] sent alone, [1] grouped; addN[n] adds n branches ("add_values"); n up
	// to maxValuesRows.
	createN [maxValuesRows + 1][2]string
	addN    [maxValuesRows + 1]string
}

// maxValuesRows is the most branches a record lists as VALUES rows, rendered once per count;
// a record with more unnests arrays (create_with_branches).
const maxValuesRows = 16

// valuesRow is a branch's parameter numbers in a VALUES row (sql/queries.sql "branch_values").
type valuesRow struct{ Name, Seq, Kind, Target, Payload, Opts int }

// Transaction is a global transaction as the log holds it.
type Transaction struct {
	GID         string
	Kind        Kind
	Status      Status
	TimeoutAt   time.Time // a transaction still trying after it is cancelled
	NextRetryAt time.Time // when the leader may drive it next
	Attempts    int       // failed drives since the last status change
	LastError   string
	Payload     []byte
	CreatedAt   time.Time
	UpdatedAt   time.Time
	// TraceContext is the trace context of the ctx that began the transaction ([obs.EncodeTrace]),
	// "" when it carried none: the leader's drive of the transaction continues that trace.
	TraceContext string
	// AbortCause says why a transaction rolled back, when the log knows: [CauseRefused] (a
	// participant refused a branch: its Refusal says why) or [CauseTimeout] (cancelled at its
	// timeout); "" otherwise. Filled by Get and List.
	AbortCause string
	Branches   []Branch // in registration order; filled by Get and by the Recoverer
}

// The abort causes of [Transaction.AbortCause].
const (
	CauseRefused = "refused"
	CauseTimeout = "timeout"
)

// Target is where a branch's participant is — a URL, or a name registered with the coordinator —
// and how it is called: the headers sent to an HTTP participant and the bound of each call. The
// branch table's call_options column stores Header and Timeout (NULL when both are unset).
type Target struct {
	Kind    TargetKind
	Ref     string
	Header  http.Header   // an HTTP participant's headers (participant.HTTP.Header); nil: none
	Timeout time.Duration // bounds each call of the branch's ops; 0: Config.CallTimeout
}

// Branch is one participant's part of a global transaction.
type Branch struct {
	Name      string
	Seq       int
	Target    Target
	Payload   []byte
	Status    BranchStatus
	Attempts  int // failed ops on this branch
	LastError string
	UpdatedAt time.Time // when Status, Attempts or LastError last changed (PostgreSQL's clock); filled by Get and the Recoverer
	// Refusal is the participant's refusal of the branch (the text of the error wrapping
	// participant.ErrRefused, at most 2000 bytes), "" when it did not refuse.
	Refusal string
}

// New returns a Log on pool configured by opts. It does not touch the database: call
// [Log.Migrate]. It returns an error wrapping [ErrInvalidOption] when an option is unusable.
func New(pool *pgxpool.Pool, opts ...LogOption) (*Log, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if pool == nil {
		return nil, fmt.Errorf("core: nil pool: %w", ErrInvalidOption)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	ident := func(n string) string {
		if o.schema != "" {
			return pgx.Identifier{o.schema, n}.Sanitize()
		}
		return pgx.Identifier{n}.Sanitize()
	}
	var fopts []fence.Option
	if o.schema != "" {
		fopts = append(fopts, fence.WithTable(o.schema, ""))
	}
	fence, err := fence.New(pool, fopts...)
	if err != nil {
		return nil, fmt.Errorf("core: fence: %w", err)
	}
	global := ident(o.prefix + "global")
	var finals []string
	for s := range statusNames {
		if s.Final() {
			finals = append(finals, "'"+s.String()+"'")
		}
	}
	sort.Strings(finals)
	// The claim moves a trying transaction past its timeout to the status the state table says.
	timedOut, ok := StatusTrying.timeoutStatus()
	if !ok || !StatusTrying.CanBecome(timedOut) {
		return nil, fmt.Errorf("core: state table: trying has no timeout status: %w", ErrInvalidState)
	}
	data := map[string]any{
		"LockKey":       strconv.FormatInt(pgutil.MigrateLockKey("txkit/core/migrate:"+global), 10),
		"Global":        global,
		"Branch":        ident(o.prefix + "branch"),
		"DueIndex":      pgx.Identifier{o.prefix + "global_due"}.Sanitize(),
		"DoneIndex":     pgx.Identifier{o.prefix + "global_done"}.Sanitize(),
		"Finals":        strings.Join(finals, ", "),
		"Trying":        StatusTrying.String(),
		"Cancelling":    timedOut.String(),
		"BranchPending": BranchPending.String(),
		"Schema":        "",
	}
	if o.schema != "" {
		data["Schema"] = pgx.Identifier{o.schema}.Sanitize()
	}
	tpl, err := template.ParseFS(sqlFS, "sql/*.sql")
	if err != nil {
		return nil, fmt.Errorf("core: parse embedded sql: %w", err)
	}
	renderWith := func(name string, data map[string]any) (string, error) {
		var b bytes.Buffer
		err := tpl.ExecuteTemplate(&b, name, data)
		return strings.TrimSpace(b.String()), err
	}
	render := func(name string) (string, error) { return renderWith(name, data) }
	l := &Log{pool: pool, o: o, fence: fence, name: strings.Trim(global, `"`), branch: ident(o.prefix + "branch"),
		q: map[string]string{}, tr: tracer(nil), lg: slog.New(slog.DiscardHandler), leaseArg: o.lease.Seconds()}
	if l.ddl, err = render("schema.sql"); err != nil {
		return nil, fmt.Errorf("core: render schema: %w", err)
	}
	for _, n := range []string{"create", "create_grouped", "create_with_branches", "create_with_branches_grouped", "add_branch", "add_branches", "decide", "status", "branches_done", "branches_failed",
		"finish", "renew", "reschedule", "claim", "refuse", "timed_out", "backlog", "get", "list", "branches", "purge", "unfinished",
		"put_step", "park"} {
		if l.q[n], err = render(n); err != nil {
			return nil, fmt.Errorf("core: render %s: %w", n, err)
		}
	}
	rows := map[string]any{}
	for k, v := range data {
		rows[k] = v
	}
	valuesRows := func(first, n int) []valuesRow {
		rs := make([]valuesRow, n)
		for i := range rs {
			p := first + 6*i
			rs[i] = valuesRow{Name: p, Seq: p + 1, Kind: p + 2, Target: p + 3, Payload: p + 4, Opts: p + 5}
		}
		return rs
	}
	for n := 1; n <= maxValuesRows; n++ {
		rows["Rows"] = valuesRows(8, n) // after the transaction's $1..$7
		for g, grouped := range []bool{false, true} {
			rows["Grouped"] = grouped
			if l.createN[n][g], err = renderWith("create_values", rows); err != nil {
				return nil, fmt.Errorf("core: render create_values: %w", err)
			}
		}
		rows["Rows"] = valuesRows(3, n) // after the gid and the status
		if l.addN[n], err = renderWith("add_values", rows); err != nil {
			return nil, fmt.Errorf("core: render add_values: %w", err)
		}
	}
	if o.groupWindow > 0 || o.deferFinish {
		// Deferred finishes ride on other writes through the group writer, grouping or not.
		l.gw = &groupWriter{l: l, window: o.groupWindow}
	}
	return l, nil
}

// Migrate creates the schema (if set), the tables, their indexes and the fence table when they do
// not exist. It is idempotent and safe to run from several processes at once (an advisory lock
// serializes them). Once this version of the schema has run on the database it only reads that
// it has (txkit_migrations, see pgutil.MigrateOnce): it takes no lock on the log's tables, so a
// process starting under load neither stalls nor deadlocks the others' writes. ctx scopes only
// this call.
func (l *Log) Migrate(ctx context.Context) error {
	if err := pgutil.MigrateOnce(ctx, l.pool, l.o.schema, l.ddl, l.dropBranchKey); err != nil {
		return fmt.Errorf("core: migrate %s: %w", l.name, err)
	}
	if err := l.fence.Migrate(ctx); err != nil {
		return fmt.Errorf("core: migrate fence: %w", err)
	}
	return nil
}

// dropBranchKey drops the foreign key from the branch table to the global one, which tables
// created before the schema left it out still have (see sql/schema.sql). Processes migrating at
// once may both find it; "if exists" lets the second pass.
func (l *Log) dropBranchKey(ctx context.Context) error {
	rows, err := l.pool.Query(ctx, `select conname from pg_constraint where conrelid = $1::regclass and contype = 'f'`, l.branch)
	if err != nil {
		return fmt.Errorf("find the branch table's foreign keys: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("find the branch table's foreign keys: %w", err)
	}
	for _, n := range names {
		if _, err := l.pool.Exec(ctx, "alter table "+l.branch+" drop constraint if exists "+pgx.Identifier{n}.Sanitize()); err != nil {
			return fmt.Errorf("drop the branch table's foreign key %s: %w", n, err)
		}
	}
	return nil
}

// Lease returns the lease a starter takes on a transaction it drives ([WithLease]).
func (l *Log) Lease() time.Duration { return l.o.lease }

// Create records a new global transaction in its kind's initial status. A transaction that is
// trying becomes due for the leader at its timeout; one that runs (a saga) when the lease passes.
// A gid already in the log returns an error wrapping [ErrInvalidState]. One write.
//
// branches, when given, are recorded with the transaction in the same statement (a saga records
// all its steps before running any), all [BranchPending]; their Status, Attempts and LastError are
// ignored. A branch [Log.AddBranch] would refuse (empty name, bad target), or two with one name,
// return an error wrapping [ErrInvalidBranch] and record nothing. A coordinator's log counts the
// transactions it records (CreateIn too) in txkit_coordinator_transactions_begun_total. A gid
// already in the log returns an error wrapping [ErrExists] and [ErrInvalidState].
func (l *Log) Create(ctx context.Context, gid string, kind Kind, timeout time.Duration, payload []byte, branches ...Branch) error {
	return l.CreateIn(ctx, gid, kind, kind.Initial(), timeout, payload, branches...)
}

// CreateIn is [Log.Create] with the status to record: the kind's initial one, or a decision
// (confirming, cancelling) recorded together with the transaction. Two-phase commit's presumed
// abort records a transaction whose branches are all databases only when it decides to commit;
// the in-doubt resolver records one it rolls back as cancelling. The unique gid makes the two
// exclusive: whichever inserts first wins, and the other gets [ErrInvalidState]. With vote
// markers, two-phase commit records it as voting while its branches prepare. A decided or voting
// transaction is the caller's for the lease. A status that is neither initial nor a decision nor
// voting (two-phase commit's only) returns an error wrapping [ErrInvalidState].
//
// It records the write in a span "<kind> begin" (attribute txkit.gid) and stores the trace context
// of that span, a child of ctx's, with the transaction ([Transaction.TraceContext]).
func (l *Log) CreateIn(ctx context.Context, gid string, kind Kind, st Status, timeout time.Duration, payload []byte, branches ...Branch) (err error) {
	ctx, span := l.tr.Start(ctx, kind.beginSpan())
	if span.IsRecording() { // built only for a span that keeps them
		span.SetAttributes(attribute.String(AttrGID, gid))
	}
	defer func() { obs.EndSpan(span, err) }()
	if gid == "" || timeout <= 0 {
		return fmt.Errorf("core: create %q with timeout %v: %w", gid, timeout, ErrInvalidOption)
	}
	if _, drives := st.BranchDone(); st != kind.Initial() && !drives || st == StatusVoting && kind != Kind2PC {
		return fmt.Errorf("core: create %s as %s: %w", gid, st, ErrInvalidState)
	}
	due := timeout
	if st != StatusTrying {
		due = min(timeout, l.o.lease)
	}
	w := &write{kind: writeCreate, gid: gid, txKind: kind.String(), status: st.String(), timeout: timeout.Seconds(),
		due: due.Seconds(), payload: payload, trace: obs.EncodeTrace(ctx)}
	if err := w.setBranches(gid, branches); err != nil {
		return fmt.Errorf("core: create %s: %w", gid, err)
	}
	created, err := l.write(ctx, w)
	if err != nil {
		return fmt.Errorf("core: create %s: %w", gid, err)
	}
	if !created {
		return fmt.Errorf("core: create %s: %w: %w", gid, ErrExists, ErrInvalidState)
	}
	l.m.began()
	return nil
}

// AddBranch records branch b of gid while gid is in status want (trying for tcc). It returns an
// error wrapping [ErrNotFound] for an unknown gid, [ErrInvalidState] when gid is no longer in
// want (a decision, or the leader's timeout, came first: the branch is not recorded), and
// [ErrInvalidBranch] for an empty name, a bad target or a name already recorded. One write.
func (l *Log) AddBranch(ctx context.Context, gid string, want Status, b Branch) error {
	switch {
	case b.Name == "":
		return fmt.Errorf("core: branch of %s: empty name: %w", gid, ErrInvalidBranch)
	case b.Target.Ref == "" || !b.Target.Kind.valid():
		return fmt.Errorf("core: branch %s of %s: target %s %q: %w", b.Name, gid, b.Target.Kind, b.Target.Ref, ErrInvalidBranch)
	}
	added, err := l.write(ctx, &write{kind: writeBranch, gid: gid, branch: b, from: want.String()})
	if err != nil {
		return fmt.Errorf("core: branch %s of %s: %w", b.Name, gid, err)
	}
	if added {
		return nil
	}
	cur, err := l.status(ctx, gid)
	if err != nil {
		return fmt.Errorf("core: branch %s of %s: %w", b.Name, gid, err)
	}
	if cur != want {
		return fmt.Errorf("core: branch %s of %s: transaction is %s, not %s: %w", b.Name, gid, cur, want, ErrInvalidState)
	}
	return fmt.Errorf("core: branch %s of %s: already recorded: %w", b.Name, gid, ErrInvalidBranch)
}

func (l *Log) status(ctx context.Context, gid string) (Status, error) {
	if err := l.settle(ctx, gid); err != nil {
		return 0, fmt.Errorf("core: status of %s: %w", gid, err)
	}
	var s string
	err := l.pool.QueryRow(ctx, l.q["status"], gid).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("core: %s: %w", gid, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("core: status of %s: %w", gid, err)
	}
	return ParseStatus(s)
}

// Decide moves gid from status from to status to (a starter's decision: trying → confirming or
// cancelling) and gives the caller the lease on it, and returns the status gid is now in.
// Deciding what is already decided the same way is not an error: it returns to, or to's outcome
// when the decision has been carried out already. Anything else returns an error wrapping
// [ErrInvalidState] naming the current status, or [ErrNotFound]. One write.
func (l *Log) Decide(ctx context.Context, gid string, from, to Status) (Status, error) {
	st, _, err := l.DecideWrote(ctx, gid, from, to)
	return st, err
}

// DecideWrote is [Log.Decide] that also reports whether this call made the decision (false when
// it found the transaction already decided the same way, by someone else or by an earlier call
// whose answer was lost).
func (l *Log) DecideWrote(ctx context.Context, gid string, from, to Status) (Status, bool, error) {
	if !from.CanBecome(to) {
		return 0, false, fmt.Errorf("core: %s: %s → %s: %w", gid, from, to, ErrInvalidState)
	}
	decided, err := l.write(ctx, &write{kind: writeDecide, gid: gid, from: from.String(), to: to.String()})
	if err != nil {
		return 0, false, fmt.Errorf("core: %s: %s → %s: %w", gid, from, to, err)
	}
	if decided {
		return to, true, nil
	}
	cur, err := l.status(ctx, gid)
	if err != nil {
		return 0, false, err
	}
	if out, _ := to.Outcome(); cur == to || cur == out {
		return cur, false, nil
	}
	return cur, false, fmt.Errorf("core: %s: %s → %s: transaction is %s: %w", gid, from, to, cur, ErrInvalidState)
}

// BranchFailure is a branch whose op failed, and why.
type BranchFailure struct {
	Branch string
	Err    error
}

// Progress is what one drive of a transaction achieved, for [Log.Record].
type Progress struct {
	GID    string
	From   Status          // the driving status the drive ran in (confirming, cancelling, ...)
	Done   []string        // branches whose op succeeded: they take From.BranchDone() (not written when Next implies it: Status.BranchesImplied)
	Failed []BranchFailure // branches whose op failed: attempts counted, error stored
	// Next, when set, moves the transaction on (to From's outcome, or saga's compensating).
	// When zero, the transaction is rescheduled with backoff and Err (or the first failure) stored.
	Next Status
	Err  error
	// Renew, with Next zero, records Done (and Failed) as progress of a drive that goes on: the
	// driver's lease is renewed instead of the transaction being rescheduled, and no attempt is
	// counted. A saga records each step's success this way before running the steps after it.
	Renew bool
}

// Record writes p in one PostgreSQL transaction. A non-zero tok — a leader's — passes the fence
// first; a refusal returns an error wrapping [lock.ErrFenced] and writes nothing. Branches already
// done are not marked again. When the transaction is no longer in p.From it returns nil if it is
// already in p.Next (another driver finished it), otherwise an error wrapping [ErrInvalidState].
// A clean finish (p.Next set) is one statement; a partial one two or three. A finish to a status
// that implies its branches' ([Status.BranchesImplied]) changes the transaction's row only. A coordinator's log
// counts the transactions this call moved to a final status in
// txkit_coordinator_transactions_finished_total (not those another driver finished).
func (l *Log) Record(ctx context.Context, tok lock.Token, p Progress) error {
	done, ok := p.From.BranchDone()
	if !ok {
		return fmt.Errorf("core: record %s: %s drives no branch: %w", p.GID, p.From, ErrInvalidState)
	}
	if p.Next != 0 && !p.From.CanBecome(p.Next) {
		return fmt.Errorf("core: record %s: %s → %s: %w", p.GID, p.From, p.Next, ErrInvalidState)
	}
	if _, implied := p.Next.BranchesImplied(); implied && len(p.Failed) == 0 {
		p.Done = nil // every branch is done: the rows keep their status, readers imply it
	}
	var moved bool
	var err error
	if tok.IsZero() && p.Next != 0 && len(p.Failed) == 0 && !errors.Is(p.Err, ErrTimeout) {
		// A starter's clean finish is one statement: no fence to pass, nothing else to write, so
		// it runs on its own (autocommit) instead of inside BEGIN ... COMMIT — one round trip.
		w := &write{kind: writeFinish, gid: p.GID, from: p.From.String(), to: p.Next.String(), done: p.Done, doneStatus: done.String()}
		if l.Defers(p.From, p.Next) {
			l.deferFinish(ctx, w, p.Next)
			return nil
		}
		moved, err = l.write(ctx, w)
	} else {
		err = l.recordTx(ctx, tok, p, done, &moved)
	}
	if err != nil {
		return fmt.Errorf("core: record %s (%s): %w", p.GID, p.From, err)
	}
	if moved {
		if p.Next.Final() {
			l.m.finished(p.Next)
		}
		return nil
	}
	cur, err := l.status(ctx, p.GID)
	if err != nil {
		return err
	}
	if p.Next != 0 && cur == p.Next {
		return nil
	}
	return fmt.Errorf("core: record %s: transaction is %s, not %s: %w", p.GID, cur, p.From, ErrInvalidState)
}

// recordTx writes p in one transaction, fenced with tok when it is a leader's; moved reports
// whether the transaction was in p.From. Its statements go out in one batch: with tok, together
// with the begin, the fence check and the commit, one round trip (leader.CommitFenced).
func (l *Log) recordTx(ctx context.Context, tok lock.Token, p Progress, done BranchStatus, moved *bool) error {
	queue := func(b *pgx.Batch) { l.queueRecord(b, p, done, moved) }
	if tok.IsZero() {
		return unknownOutcome(pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			queue(b)
			return tx.SendBatch(ctx, b).Close()
		}))
	}
	return unknownOutcome(leader.CommitFenced(ctx, l.pool, l.fence, l.resourceOf(p.GID), tok, queue))
}

// queueRecord queues into b the statements of recordTx.
func (l *Log) queueRecord(b *pgx.Batch, p Progress, done BranchStatus, moved *bool) {
	exec := func(what string, sql string, args ...any) {
		b.Queue(sql, args...).Fn = func(br pgx.BatchResults) error {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			return nil
		}
	}
	if len(p.Done) > 0 && p.Next == 0 {
		exec("mark branches "+done.String(), l.q["branches_done"], p.GID, p.Done, done.String())
	}
	if len(p.Failed) > 0 {
		names := make([]string, len(p.Failed))
		errs := make([]string, len(p.Failed))
		refusals := make([]*string, len(p.Failed))
		for i, f := range p.Failed {
			names[i], errs[i] = f.Branch, pgutil.ErrorText(f.Err, maxErrorLen)
			if errors.Is(f.Err, participant.ErrRefused) {
				refusals[i] = &errs[i]
			}
		}
		exec("count failed branches", l.q["branches_failed"], p.GID, names, errs, refusals)
	}
	if p.Next != 0 && errors.Is(p.Err, ErrTimeout) {
		exec("record the timeout", l.q["timed_out"], p.GID)
	}
	var q *pgx.QueuedQuery
	switch {
	case p.Next != 0:
		q = b.Queue(l.q["finish"], p.GID, p.From.String(), p.Next.String(), l.o.lease.Seconds(), p.Done, done.String())
	case p.Renew:
		q = b.Queue(l.q["renew"], p.GID, p.From.String(), l.o.lease.Seconds())
	default:
		why := p.Err
		if why == nil && len(p.Failed) > 0 {
			why = fmt.Errorf("branch %s: %w", p.Failed[0].Branch, p.Failed[0].Err)
		}
		if why == nil {
			why = errors.New("unfinished")
		}
		q = b.Queue(l.q["reschedule"], p.GID, p.From.String(), pgutil.ErrorText(why, maxErrorLen),
			l.o.backoffMin.Seconds(), l.o.backoffMax.Seconds())
	}
	q.Query(func(rows pgx.Rows) error {
		*moved = rows.Next()
		return nil
	})
}

// Refuse records that the participant of branch refused it with err (its text, bounded, is the
// branch's Refusal) and that the transaction rolls back because of it ([CauseRefused]). It writes
// whatever the transaction's status; the caller records the decision itself. One statement; ctx
// scopes the call.
func (l *Log) Refuse(ctx context.Context, gid, branch string, err error) error {
	if _, xerr := l.pool.Exec(ctx, l.q["refuse"], gid, branch, pgutil.ErrorText(err, maxErrorLen)); xerr != nil {
		return fmt.Errorf("core: record the refusal of %s/%s: %w", gid, branch, xerr)
	}
	return nil
}

func (l *Log) resource() string { return "core:" + l.name }

// Get returns gid's transaction with its branches, or an error wrapping [ErrNotFound]. It first
// waits for the log's deferred finish of gid, if one is pending ([WithDeferredFinish]).
func (l *Log) Get(ctx context.Context, gid string) (*Transaction, error) {
	if !pgutil.IsText(gid) { // PostgreSQL would refuse the query: no row can have it
		return nil, fmt.Errorf("core: %q: %w", gid, ErrNotFound)
	}
	if err := l.settle(ctx, gid); err != nil { // this process's own deferred finish of gid first
		return nil, fmt.Errorf("core: get %s: %w", gid, err)
	}
	rows, err := l.pool.Query(ctx, l.q["get"], gid)
	if err != nil {
		return nil, fmt.Errorf("core: get %s: %w", gid, err)
	}
	txs, err := pgx.CollectRows(rows, scanTransaction)
	if err != nil {
		return nil, fmt.Errorf("core: get %s: %w", gid, err)
	}
	if len(txs) == 0 {
		return nil, fmt.Errorf("core: %s: %w", gid, ErrNotFound)
	}
	if err := l.loadBranches(ctx, l.pool, txs); err != nil {
		return nil, err
	}
	return txs[0], nil
}

// Filter selects transactions for [Log.List]. Zero fields select everything.
type Filter struct {
	Kind       Kind
	Status     Status
	Unfinished bool   // only transactions not in a final status
	After      string // gids greater than this (paging)
	Limit      int    // default 100
	// OlderThan, when positive, selects only transactions created more than OlderThan ago, by
	// PostgreSQL's clock (created_at < now() - OlderThan). Zero selects every age.
	OlderThan time.Duration
}

// Unfinished returns those of gids that the log holds in a status that is not final; a gid it
// does not hold (never recorded, or deleted by the retention job) is not among them. One query.
func (l *Log) Unfinished(ctx context.Context, gids []string) (map[string]bool, error) {
	rows, err := l.pool.Query(ctx, l.q["unfinished"], gids)
	if err != nil {
		return nil, fmt.Errorf("core: unfinished: %w", err)
	}
	open, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("core: unfinished: %w", err)
	}
	out := make(map[string]bool, len(open))
	for _, g := range open {
		out[g] = true
	}
	return out, nil
}

// List returns the transactions f selects, in the byte order of their gids (whatever the database's
// collation), without their branches.
func (l *Log) List(ctx context.Context, f Filter) ([]*Transaction, error) {
	var kind, status string
	if f.Kind != 0 {
		kind = f.Kind.String()
	}
	if f.Status != 0 {
		status = f.Status.String()
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	rows, err := l.pool.Query(ctx, l.q["list"], kind, status, f.After, f.Unfinished, f.Limit, f.OlderThan.Seconds())
	if err != nil {
		return nil, fmt.Errorf("core: list: %w", err)
	}
	txs, err := pgx.CollectRows(rows, scanTransaction)
	if err != nil {
		return nil, fmt.Errorf("core: list: %w", err)
	}
	return txs, nil
}

func scanTransaction(r pgx.CollectableRow) (*Transaction, error) {
	var t Transaction
	var kind, status string
	if err := r.Scan(&t.GID, &kind, &status, &t.TimeoutAt, &t.NextRetryAt, &t.Attempts, &t.LastError,
		&t.Payload, &t.CreatedAt, &t.UpdatedAt, &t.TraceContext, &t.AbortCause); err != nil {
		return nil, err
	}
	return parsed(&t, kind, status)
}

func parsed(t *Transaction, kind, status string) (*Transaction, error) {
	var err error
	if t.Kind, err = ParseKind(kind); err != nil {
		return nil, err
	}
	if t.Status, err = ParseStatus(status); err != nil {
		return nil, err
	}
	return t, nil
}

func (l *Log) loadBranches(ctx context.Context, db fence.DBTX, txs []*Transaction) error {
	if len(txs) == 0 {
		return nil
	}
	rows, err := db.Query(ctx, l.q["branches"], gidsOf(txs))
	if err != nil {
		return fmt.Errorf("core: branches: %w", err)
	}
	return scanBranches(rows, txs)
}

// gidsOf returns the gids of txs.
func gidsOf(txs []*Transaction) []string {
	gids := make([]string, len(txs))
	for i, t := range txs {
		gids[i] = t.GID
	}
	return gids
}

// scanBranches adds the branches rows (the branches statement's, for txs) holds to their
// transactions in txs.
func scanBranches(rows pgx.Rows, txs []*Transaction) error {
	byGID := make(map[string]*Transaction, len(txs))
	for _, t := range txs {
		byGID[t.GID] = t
	}
	var (
		gid, tk, st string
		b           Branch
		opts        *string
	)
	_, err := pgx.ForEachRow(rows, []any{&gid, &b.Name, &b.Seq, &tk, &b.Target.Ref, &b.Payload, &st, &b.Attempts, &b.LastError, &b.UpdatedAt, &b.Refusal, &opts}, func() error {
		var err error
		if b.Target.Kind, err = ParseTargetKind(tk); err != nil {
			return err
		}
		b.Target.Header, b.Target.Timeout = nil, 0
		if err := decodeCallOptions(&b.Target, opts); err != nil {
			return err
		}
		if b.Status, err = ParseBranchStatus(st); err != nil {
			return err
		}
		t := byGID[gid]
		if implied, ok := t.Status.BranchesImplied(); ok && t.Kind != KindWorkflow && b.Status != implied {
			// Its finish left the row as it was (Record): it took the status then. A workflow's
			// rows are each written with its own status (PutStep): a TCC step stays confirmed.
			b.Status, b.UpdatedAt = implied, t.UpdatedAt
		}
		t.Branches = append(t.Branches, b)
		b.Payload = nil
		return nil
	})
	if err != nil {
		return fmt.Errorf("core: branches: %w", err)
	}
	return nil
}

// maxErrorLen bounds the last_error stored.
const maxErrorLen = 2000
