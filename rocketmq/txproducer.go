package rocketmq

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"text/template"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/message"
	"github.com/txkit/txkit/outbox"
)

// TxProducer sends RocketMQ transactional (half) messages whose fate follows a local PostgreSQL
// transaction: [TxProducer.Send] stores the message on the broker as a half message, invisible to
// consumers, runs the caller's local transaction, and tells the broker to deliver the message if
// and only if that transaction committed.
//
// The local transaction also inserts the message's ID into a table of its own ([TxProducer.Migrate]),
// so that the answer survives a lost second phase (the client sends it one-way and ignores its
// failure): the broker then asks back (check-back) and the TxProducer answers from the
// table — commit if the row is there; rollback once the half message is older than
// 10 s (twice the 5 s that bound the local transaction) and the row is not (the check-back records the rollback so that the local
// transaction can no longer commit); "unknown", to be asked again, otherwise.
//
// The group must belong to TxProducers alone: the broker sends check-backs to any producer of the
// group, and a plain producer or another application in it would swallow them. TxProducers of one
// group in several processes are fine — they share the table. Each TxProducer runs its own
// rocketmq-client-go client (a unique instance name): v2.1.2 hands a shared client's check-backs
// to whichever producer or consumer created it first, where a consumer's nil channel blocks them
// and a plain producer's channel is never read.
//
// A TxProducer is safe for concurrent use by multiple goroutines.
type TxProducer struct {
	tp     rmq.TransactionProducer
	pool   *pgxpool.Pool
	group  string
	o      txProducerOptions
	log    *slog.Logger
	m      *txProducerMetrics
	tracer trace.Tracer

	ddl, insert, lookup, fence, purge string

	firsts firstSends // each topic's first send goes alone (firstsend.go)

	life   context.Context // ends at Close; bounds check-backs
	cancel context.CancelFunc
	once   sync.Once

	mu      sync.Mutex
	closed  bool
	pending map[uuid.UUID]*pendingTx
}

// pendingTx is a Send in progress, found by ExecuteLocalTransaction through the message's id
// (the client's ExecuteLocalTransaction gets no ctx and returns no error).
type pendingTx struct {
	ctx     context.Context
	localTx func(ctx context.Context, tx pgx.Tx) error
	ran     bool
	err     error // what Send returns for the local part
}

//go:embed sql/schema.sql
var sqlFS embed.FS

// NewTxProducer starts a transactional producer in group on the name servers. From then on the
// broker may send it check-backs, answered from pool. ctx is checked but not kept: Start does not
// block on the network. It returns an error wrapping [ErrInvalidOption] for bad arguments or
// options. Call [TxProducer.Migrate] once to create the table, and [TxProducer.Close] to stop.
func NewTxProducer(ctx context.Context, nameservers []string, group string, pool *pgxpool.Pool, opts ...TxProducerOption) (*TxProducer, error) {
	return newTxProducer(ctx, nameservers, group, pool, nil, opts)
}

// newTxProducer is NewTxProducer with a hook for tests (export_test.go): wrap, when not nil,
// wraps the listener the client calls for local transactions and check-backs.
func newTxProducer(ctx context.Context, nameservers []string, group string, pool *pgxpool.Pool,
	wrap func(primitive.TransactionListener) primitive.TransactionListener, opts []TxProducerOption) (*TxProducer, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("rocketmq: new tx producer: %w", err)
	}
	if err := checkNameservers(nameservers); err != nil {
		return nil, err
	}
	if err := checkName("group", group, maxGroupLen); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, fmt.Errorf("rocketmq: tx producer %s: nil pool: %w", group, ErrInvalidOption)
	}
	o, err := buildTxProducerOptions(opts)
	if err != nil {
		return nil, err
	}
	m, err := newTxProducerMetrics(o.reg)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: tx producer %s: %w", group, err)
	}
	p := &TxProducer{pool: pool, group: group, o: o, log: o.log.With("group", group), m: m,
		tracer: obs.TracerProvider(o.tp).Tracer(tracerName), pending: map[uuid.UUID]*pendingTx{}}
	if err := p.prepareSQL(); err != nil {
		return nil, err
	}
	var listener primitive.TransactionListener = txListener{p}
	if wrap != nil {
		listener = wrap(listener)
	}
	tp, err := rmq.NewTransactionProducer(listener,
		producer.WithNsResolver(primitive.NewPassthroughResolver(nameservers)),
		producer.WithGroupName(group),
		producer.WithInstanceName(instanceName("tx")),
		producer.WithRetry(o.retries),
		producer.WithSendMsgTimeout(o.sendTimeout),
		producer.WithQueueSelector(&keySelector{}),
		producer.WithCredentials(o.credentials),
	)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: new tx producer in group %s: %w", group, err)
	}
	p.tp = tp
	p.life, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := tp.Start(); err != nil {
		p.cancel()
		return nil, fmt.Errorf("rocketmq: start tx producer in group %s: %w", group, err)
	}
	p.register(ctx)
	return p, nil
}

// halfTopic is where brokers keep half messages (RocketMQ's TransactionalMessageUtil).
const halfTopic = "RMQ_SYS_TRANS_HALF_TOPIC"

// register makes the client announce the group to every broker that holds half messages, so that
// their check-backs reach this producer before it sends anything. The client heartbeats (and so
// registers its producer groups) only to brokers it has a route to, and it learns routes only by
// sending: a new process in the group would otherwise not be asked about its predecessor's
// half messages until its first Send, and brokers count (and after transactionCheckMax drop) the
// checks they could not deliver. So ask for the route of the half-message topic with a probe
// message that keySelector refuses to place: the client looks the route up, keeps refreshing it,
// and sends nothing. The first heartbeat follows Start by a second.
func (p *TxProducer) register(ctx context.Context) {
	probe := primitive.NewMessage(halfTopic, nil)
	probe.WithProperty(probeProperty, "1")
	ctx, cancel := context.WithTimeout(ctx, p.o.sendTimeout)
	defer cancel()
	if _, err := p.tp.SendMessageInTransaction(ctx, probe); err == nil {
		p.log.ErrorContext(ctx, "rocketmq: route probe was sent as a message", "topic", halfTopic)
	}
}

func (p *TxProducer) prepareSQL() error {
	t, _ := pgutil.Table(p.o.schema, p.o.table)
	tmpl, err := template.ParseFS(sqlFS, "sql/schema.sql")
	if err != nil {
		return fmt.Errorf("rocketmq: parse embedded schema.sql: %w", err)
	}
	data := struct {
		Schema, Table string
		LockKey       int64
	}{Table: t, LockKey: pgutil.MigrateLockKey("txkit/outbox/rocketmq/migrate:" + t)}
	if p.o.schema != "" {
		data.Schema = pgx.Identifier{p.o.schema}.Sanitize()
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, data); err != nil {
		return fmt.Errorf("rocketmq: render schema.sql: %w", err)
	}
	p.ddl = b.String()
	p.insert = `insert into ` + t + ` (id) values ($1)`
	p.lookup = `select committed from ` + t + ` where id = $1`
	p.fence = `insert into ` + t + ` (id, committed) values ($1, false) on conflict (id) do nothing`
	p.purge = `delete from ` + t + ` where created_at < now() - make_interval(secs => $1)`
	return nil
}

// Migrate creates the table of transaction ids (and the schema, if [WithSchema] set one) when
// they do not exist. It is idempotent and safe to run from several processes at once. It blocks
// until PostgreSQL answers; ctx scopes only this call.
func (p *TxProducer) Migrate(ctx context.Context) error {
	if _, err := p.pool.Exec(ctx, p.ddl); err != nil {
		return fmt.Errorf("rocketmq: migrate %s table: %w", p.group, err)
	}
	return nil
}

// Purge deletes the ids of transactions older than age and returns how many it deleted. Keep age
// well beyond the time the broker keeps asking about a half message (transactionCheckMax ×
// transactionCheckInterval, 15 min with the broker's defaults): a check-back that finds no row
// for an old message rolls it back. It blocks until PostgreSQL answers; ctx scopes only this call.
func (p *TxProducer) Purge(ctx context.Context, db outbox.DBTX, age time.Duration) (int64, error) {
	if db == nil {
		return 0, fmt.Errorf("rocketmq: purge: nil db: %w", ErrInvalidOption)
	}
	tag, err := db.Exec(ctx, p.purge, age.Seconds())
	if err != nil {
		return 0, fmt.Errorf("rocketmq: purge %s table: %w", p.group, err)
	}
	return tag.RowsAffected(), nil
}

// Send sends msg as a transactional message and runs localTx in a PostgreSQL transaction of its
// own, which also records msg.ID; the message is delivered if and only if that transaction
// commits. It blocks until the broker has the half message and the local transaction has ended.
//
// ctx scopes the whole call: the broker send (also bounded by [WithRetries]' timeout) and the local
// transaction (also bounded by 5 s); localTx receives it. msg.ID must not be
// zero; it is the transaction id, so a second Send with the same ID fails with [ErrDuplicateTx].
//
// Send returns nil when the local transaction committed — the broker delivers the message now,
// or after a check-back if the second phase was lost. It returns localTx's error (wrapped) when
// localTx failed, an error wrapping [ErrDuplicateTx] when the ID was used before, and other
// errors when the broker send or the local transaction failed: in all these cases nothing
// committed and the message is not delivered. An error wrapping [ErrOutcomeUnknown] means the
// commit's outcome is unknown; the broker then delivers the message if and only if it committed.
// Errors wrap [outbox.ErrInvalidMessage] for a message RocketMQ cannot carry and [ErrClosed]
// after Close.
//
// Send runs under a span "rocketmq send" and sends its trace context in the [PropertyTraceParent]
// and [PropertyTraceState] properties (replacing headers of those names), so that the consumer's
// span and any check-back's span are in ctx's trace (see [WithTelemetry]).
func (p *TxProducer) Send(ctx context.Context, msg message.Message, localTx func(ctx context.Context, tx pgx.Tx) error) error {
	sctx, span := p.startSend(ctx, msg)
	err := p.send(sctx, ctx, msg, localTx)
	obs.EndSpan(span, err)
	return err
}

// send is Send under the send span, which ctx carries; parent is Send's ctx.
func (p *TxProducer) send(ctx, parent context.Context, msg message.Message, localTx func(ctx context.Context, tx pgx.Tx) error) error {
	if localTx == nil {
		return fmt.Errorf("rocketmq: send %s: nil local transaction: %w", msg.ID, ErrInvalidOption)
	}
	m, err := encode(msg)
	if err != nil {
		return err
	}
	m.WithProperty(PropertyTxID, msg.ID.String())
	if trace.SpanContextFromContext(ctx).IsValid() {
		injectTrace(ctx, m)
	} else {
		injectTrace(parent, m) // this producer's provider does not record: pass the caller's trace on
	}

	pt := &pendingTx{ctx: ctx, localTx: localTx}
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return fmt.Errorf("rocketmq: send %s to %s: %w", msg.ID, msg.Topic, ErrClosed)
	case p.pending[msg.ID] != nil:
		p.mu.Unlock()
		return fmt.Errorf("rocketmq: send %s to %s: a Send with this id is in progress: %w", msg.ID, msg.Topic, ErrDuplicateTx)
	}
	p.pending[msg.ID] = pt
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.pending, msg.ID)
		p.mu.Unlock()
	}()

	var state primitive.LocalTransactionState
	err = p.firsts.do(ctx, msg.Topic, func() error {
		return send(ctx, "send", p.o.sendTimeout, msg, func(sctx context.Context) (*primitive.SendResult, error) {
			res, err := p.tp.SendMessageInTransaction(sctx, m)
			if err != nil || res == nil {
				return nil, err
			}
			state = res.State
			return res.SendResult, nil
		})
	})
	if err != nil {
		if pt.ran { // cannot happen: the local transaction runs only after SEND_OK
			return errors.Join(err, pt.err)
		}
		return err // the local transaction did not run; an orphan half message is rolled back by check-back
	}
	if !pt.ran {
		return fmt.Errorf("rocketmq: send %s to %s: the client did not run the local transaction (state %d)", msg.ID, msg.Topic, state)
	}
	return pt.err
}

// executeLocal runs the local transaction of the Send that owns m, and answers the broker.
func (p *TxProducer) executeLocal(m *primitive.Message) primitive.LocalTransactionState {
	id, err := uuid.Parse(m.GetProperty(PropertyTxID))
	if err != nil {
		p.log.ErrorContext(messageContext(p.life, m), "rocketmq: local transaction for a message without a txkit tx id", "err", err)
		return primitive.UnknowState
	}
	p.mu.Lock()
	pt := p.pending[id]
	p.mu.Unlock()
	if pt == nil {
		p.log.ErrorContext(messageContext(p.life, m), "rocketmq: local transaction for no pending Send; leaving it to the check-back", "msg_id", id)
		return primitive.UnknowState
	}
	pt.ran = true
	ctx, span := p.startLocal(pt.ctx, id)
	state, err := p.runLocal(ctx, pt, id)
	span.SetAttributes(attribute.String("txkit.local_tx.state", stateName(state)))
	obs.EndSpan(span, err)
	if err != nil {
		pt.err = fmt.Errorf("rocketmq: send %s to %s: %w", id, m.Topic, err)
	}
	return state
}

func (p *TxProducer) runLocal(ctx context.Context, pt *pendingTx, id uuid.UUID) (primitive.LocalTransactionState, error) {
	ctx, cancel := context.WithTimeout(ctx, p.o.localTxTimeout)
	defer cancel()
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return primitive.RollbackMessageState, fmt.Errorf("begin local transaction: %w", err)
	}
	rollback := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx) // a broken connection is closed by pgx; the server rolls back
	}
	// The id first: a check-back fencing this id now waits for us, and one that fenced it
	// already makes this insert fail.
	if _, err := tx.Exec(ctx, p.insert, id); err != nil {
		rollback()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return primitive.RollbackMessageState, fmt.Errorf("%w: %w", ErrDuplicateTx, err)
		}
		return primitive.RollbackMessageState, fmt.Errorf("record transaction id: %w", err)
	}
	if err := callLocal(ctx, tx, pt.localTx); err != nil {
		rollback()
		return primitive.RollbackMessageState, fmt.Errorf("local transaction: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		if commitSurelyFailed(err) {
			return primitive.RollbackMessageState, fmt.Errorf("commit local transaction: %w", err)
		}
		return primitive.UnknowState, fmt.Errorf("commit local transaction: %w: %w", ErrOutcomeUnknown, err)
	}
	return primitive.CommitMessageState, nil
}

func callLocal(ctx context.Context, tx pgx.Tx, fn func(context.Context, pgx.Tx) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return fn(ctx, tx)
}

// commitSurelyFailed reports whether a COMMIT error leaves no doubt that nothing was committed:
// the server answered with an error (or turned the commit into a rollback), or the request never
// left the client.
func commitSurelyFailed(err error) bool {
	var pgErr *pgconn.PgError
	return errors.Is(err, pgx.ErrTxCommitRollback) || errors.As(err, &pgErr) || pgconn.SafeToRetry(err)
}

// checkLocal answers a check-back from the table, under the check-back's span. The client calls
// it from a single goroutine, so it is bounded by checkTimeout (5 s).
func (p *TxProducer) checkLocal(m *primitive.MessageExt) primitive.LocalTransactionState {
	ctx, cancel := context.WithTimeout(p.life, p.o.checkTimeout)
	defer cancel()
	ctx, span := p.startCheckBack(ctx, m)
	state, err := p.answerCheck(ctx, m)
	span.SetAttributes(attribute.String("txkit.checkback.result", stateName(state)))
	obs.EndSpan(span, err)
	return state
}

// answerCheck decides the answer to a check-back; an error comes with "unknown" (the broker asks
// again) and is logged here.
func (p *TxProducer) answerCheck(ctx context.Context, m *primitive.MessageExt) (primitive.LocalTransactionState, error) {
	raw := m.GetProperty(PropertyTxID)
	id, err := uuid.Parse(raw)
	if err != nil {
		// Not one of ours (only Send makes half messages in this group): do not decide for it.
		p.log.ErrorContext(ctx, "rocketmq: check-back for a message without a txkit tx id", "mq_msg_id", m.MsgId, "tx_id", raw)
		return primitive.UnknowState, fmt.Errorf("rocketmq: check-back for %s: no txkit tx id: %w", m.MsgId, err)
	}
	log := p.log.With("msg_id", id, "topic", m.Topic)

	state, found, err := p.lookupState(ctx, id)
	if err != nil {
		log.WarnContext(ctx, "rocketmq: check-back lookup failed; the broker will ask again", "err", err)
		return primitive.UnknowState, fmt.Errorf("rocketmq: check-back for %s: lookup: %w", id, err)
	}
	if found {
		log.InfoContext(ctx, "rocketmq: check-back answered from the table", "state", stateName(state))
		return state, nil
	}
	age := time.Since(time.UnixMilli(m.BornTimestamp))
	if age < p.o.checkGrace {
		log.DebugContext(ctx, "rocketmq: check-back for a transaction that may still run", "age", age)
		return primitive.UnknowState, nil
	}
	// Fence: record the rollback unless the local transaction's row gets in first. A local
	// transaction still running holds its row and makes this insert wait for its outcome.
	if _, err := p.pool.Exec(ctx, p.fence, id); err != nil {
		log.WarnContext(ctx, "rocketmq: check-back fence failed; the broker will ask again", "err", err)
		return primitive.UnknowState, fmt.Errorf("rocketmq: check-back for %s: fence: %w", id, err)
	}
	state, found, err = p.lookupState(ctx, id)
	if err != nil || !found {
		log.WarnContext(ctx, "rocketmq: check-back lookup after fence failed; the broker will ask again", "err", err, "found", found)
		if err == nil {
			err = errors.New("no row")
		}
		return primitive.UnknowState, fmt.Errorf("rocketmq: check-back for %s: lookup after fence: %w", id, err)
	}
	log.InfoContext(ctx, "rocketmq: check-back decided", "state", stateName(state), "age", age)
	return state, nil
}

func (p *TxProducer) lookupState(ctx context.Context, id uuid.UUID) (primitive.LocalTransactionState, bool, error) {
	var committed bool
	err := p.pool.QueryRow(ctx, p.lookup, id).Scan(&committed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	case committed:
		return primitive.CommitMessageState, true, nil
	}
	return primitive.RollbackMessageState, true, nil
}

func stateName(s primitive.LocalTransactionState) string {
	switch s {
	case primitive.CommitMessageState:
		return "commit"
	case primitive.RollbackMessageState:
		return "rollback"
	case primitive.UnknowState:
		return "unknown"
	}
	return "LocalTransactionState(" + strconv.Itoa(int(s)) + ")"
}

// Close stops the producer: Sends after it return [ErrClosed], and check-backs in flight answer
// "unknown" (the broker asks another producer of the group, or asks again later). It does not
// close the pool. It is idempotent and returns nil. rocketmq-client-go v2.1.2 never stops the
// goroutine that serves check-backs (its issue #1147).
func (p *TxProducer) Close() error {
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.cancel()
		if err := p.tp.Shutdown(); err != nil {
			p.log.Warn("rocketmq: tx producer shutdown", "err", err)
		}
	})
	return nil
}

// txListener keeps the client's callbacks off the TxProducer's exported API.
type txListener struct{ p *TxProducer }

func (l txListener) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	return l.p.executeLocal(m)
}

func (l txListener) CheckLocalTransaction(m *primitive.MessageExt) primitive.LocalTransactionState {
	s := l.p.checkLocal(m)
	l.p.m.checkback(s)
	return s
}
