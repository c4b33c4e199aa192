package rocketmq_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

func newTxProducer(t *testing.T, e *env, g string, opts ...rocketmq.TxProducerOption) *rocketmq.TxProducer {
	t.Helper()
	return startTxProducer(t, e, rocketmq.NewTxProducer, g, opts...)
}

// newWithheldTxProducer returns a TxProducer whose messages are delivered only after a check-back.
func newWithheldTxProducer(t *testing.T, e *env, g string) *rocketmq.TxProducer {
	t.Helper()
	return startTxProducer(t, e, rocketmq.NewWithheldTxProducer, g)
}

func startTxProducer(t *testing.T, e *env,
	newTP func(context.Context, []string, string, *pgxpool.Pool, ...rocketmq.TxProducerOption) (*rocketmq.TxProducer, error),
	g string, opts ...rocketmq.TxProducerOption) *rocketmq.TxProducer {
	t.Helper()
	tp, err := newTP(t.Context(), e.ns, g, e.pool, append([]rocketmq.TxProducerOption{rocketmq.WithLogger(e.log)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Close() })
	if err := tp.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return tp
}

// insertUser is a local transaction: a business row.
func insertUser(id uuid.UUID) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `insert into users (id) values ($1)`, id)
		return err
	}
}

func createUsers(t *testing.T, e *env) {
	t.Helper()
	if _, err := e.pool.Exec(t.Context(), `create table users (id uuid primary key)`); err != nil {
		t.Fatal(err)
	}
}

// txState returns the committed column of id's row in the TxProducer's table, or "absent".
func txState(t *testing.T, e *env, id uuid.UUID) string {
	t.Helper()
	var committed bool
	err := e.pool.QueryRow(context.Background(), `select committed from txkit_rmq_tx where id = $1`, id).Scan(&committed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "absent"
	case err != nil:
		t.Fatal(err)
	case committed:
		return "committed"
	}
	return "rolled back"
}

// The commit path: the local transaction commits, the consumer applies the message once, and a
// second Send with the same ID commits nothing and delivers nothing.
func TestIntegrationTxCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	createUsers(t, e)
	rec := &recorder{}
	c := newConsumer(t, e, group(t, "txc"), rec.handler(nil))
	run(t, c)
	tp := newTxProducer(t, e, group(t, "txp"))

	user := uuid.New()
	msg := outbox.Message{ID: uuid.New(), Topic: e.topic, Key: user.String(), Body: []byte("registered"),
		Headers: map[string]string{"kind": "user.registered"}}
	if err := tp.Send(t.Context(), msg, insertUser(user)); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if n := rows(t, e.pool, `select count(*) from users where id = $1`, user); n != 1 {
		t.Fatalf("local transaction left %d users, want 1", n)
	}
	if s := txState(t, e, msg.ID); s != "committed" {
		t.Fatalf("transaction id is %s, want committed", s)
	}
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool { return c.Stats().Applied == 1 },
		"the committed message applied (stats %+v)", c.Stats())

	// The same ID again: refused before anything commits, and never delivered.
	again := uuid.New()
	err := tp.Send(t.Context(), msg, insertUser(again))
	if !errors.Is(err, rocketmq.ErrDuplicateTx) {
		t.Fatalf("second Send with the same ID: %v, want ErrDuplicateTx", err)
	}
	if n := rows(t, e.pool, `select count(*) from users where id = $1`, again); n != 0 {
		t.Fatalf("refused Send committed its local transaction")
	}
	// A later message arriving proves the consumer has had its chance to see a second copy.
	control := outbox.Message{ID: uuid.New(), Topic: e.topic, Key: user.String(), Body: []byte("control")}
	if err := tp.Send(t.Context(), control, insertUser(uuid.New())); err != nil {
		t.Fatal(err)
	}
	// The handler's call is recorded before its transaction commits and Stats counts it: wait for both.
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool {
		return rec.count(func(m outbox.Message) bool { return m.ID == control.ID }) == 1 && c.Stats().Applied == 2
	}, "the control message arrives")
	if n := rec.count(func(m outbox.Message) bool {
		return m.ID == msg.ID && m.Headers["kind"] == "user.registered" && string(m.Body) == "registered"
	}); n != 1 {
		t.Errorf("consumer saw the message %d times, want 1", n)
	}
	if s := c.Stats(); s.Duplicates != 0 || s.Applied != 2 {
		t.Errorf("stats %+v, want 2 applied and no duplicates", s)
	}
}

// The rollback path: the local transaction fails, Send returns its error, nothing commits, and the
// message is never delivered. Two control messages sent afterwards on the same topic must arrive
// first: one committed at once, and one whose second phase is withheld, delivered only through a
// check-back. The broker checks half messages in the order they were stored, so once the second
// control has been checked back, the rolled-back message has been dealt with too.
func TestIntegrationTxRollback(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	createUsers(t, e)
	rec := &recorder{}
	c := newConsumer(t, e, group(t, "txc"), rec.handler(nil))
	run(t, c)
	tp := newTxProducer(t, e, group(t, "txp"))
	withheld := newWithheldTxProducer(t, e, group(t, "txw"))

	user := uuid.New()
	doomed := outbox.Message{ID: uuid.New(), Topic: e.topic, Body: []byte("never")}
	err := tp.Send(t.Context(), doomed, func(ctx context.Context, tx pgx.Tx) error {
		if err := insertUser(user)(ctx, tx); err != nil {
			return err
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("Send: %v, want the local transaction's error", err)
	}
	if n := rows(t, e.pool, `select count(*) from users where id = $1`, user); n != 0 {
		t.Fatalf("failed local transaction left %d users", n)
	}
	if s := txState(t, e, doomed.ID); s != "absent" {
		t.Fatalf("transaction id of the failed Send is %s, want absent", s)
	}

	now := outbox.Message{ID: uuid.New(), Topic: e.topic, Body: []byte("control, committed")}
	if err := tp.Send(t.Context(), now, insertUser(uuid.New())); err != nil {
		t.Fatal(err)
	}
	late := outbox.Message{ID: uuid.New(), Topic: e.topic, Body: []byte("control, checked back")}
	if err := withheld.Send(t.Context(), late, insertUser(uuid.New())); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool {
		return rec.count(func(m outbox.Message) bool { return m.ID == now.ID || m.ID == late.ID }) == 2
	}, "both control messages arrive (stats %+v)", c.Stats())
	if n := rec.count(func(m outbox.Message) bool { return m.ID == doomed.ID }); n != 0 {
		t.Errorf("the rolled-back message was delivered %d times", n)
	}
}

// The check-back path, and v2.1.2's shared-client trap (the first client created in a process owns
// the check-back handler): a consumer is created first — in this process a plain
// rocketmq-client-go consumer with the client's DEFAULT instance name, which would own the shared
// client and its check-back handler — then a txkit Consumer, then the TxProducer. Its second phase
// is withheld after the local commit, so the message arrives only if the broker's check-back
// reaches the TxProducer and it answers commit.
func TestIntegrationTxCheckBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	createUsers(t, e)

	plain, err := rmq.NewPushConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver(e.ns)),
		consumer.WithGroupName(group(t, "plain")),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Subscribe(e.topic, consumer.MessageSelector{}, func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		return consumer.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := plain.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plain.Shutdown() })

	rec := &recorder{}
	c := newConsumer(t, e, group(t, "txc"), rec.handler(nil))
	run(t, c)
	tp := newWithheldTxProducer(t, e, group(t, "txp"))

	user := uuid.New()
	msg := outbox.Message{ID: uuid.New(), Topic: e.topic, Key: "k", Body: []byte("checked back")}
	start := time.Now()
	if err := tp.Send(t.Context(), msg, insertUser(user)); err != nil {
		t.Fatalf("Send: %v", err)
	}
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool { return c.Stats().Applied == 1 },
		"the message arrives through a check-back (stats %+v)", c.Stats())
	t.Logf("delivered %v after Send began", time.Since(start).Round(time.Millisecond))
	if n := rec.count(func(m outbox.Message) bool { return m.ID == msg.ID }); n != 1 {
		t.Errorf("consumer saw the message %d times, want 1", n)
	}
	if !contains(e.logs.String(), "check-back answered from the table") {
		t.Errorf("no check-back in the log:\n%s", e.logs.String())
	}
}

// A half message whose producer died before its local transaction ran (here: a plain transaction
// producer in the same group that answers "unknown" and shuts down) is rolled back by the
// TxProducer's check-back once it is older than the grace period, and the rollback is fenced: a
// late local transaction with that ID fails instead of committing an undelivered effect.
func TestIntegrationTxOrphanRolledBackAndFenced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	createUsers(t, e)
	rec := &recorder{}
	c := newConsumer(t, e, group(t, "txc"), rec.handler(nil))
	run(t, c)
	g := group(t, "txp")
	tp := newTxProducer(t, e, g, rocketmq.CheckGraceForTest(3*time.Second))

	orphan := outbox.Message{ID: uuid.New(), Topic: e.topic, Body: []byte("orphan")}
	m, err := rocketmq.Encode(orphan)
	if err != nil {
		t.Fatal(err)
	}
	m.WithProperty(rocketmq.PropertyTxID, orphan.ID.String())
	leaveHalfMessages(t, e, g, m) // the broker now asks the TxProducer, the group's only producer

	testenv.Eventually(t, waitFor, 100*time.Millisecond, func() bool { return txState(t, e, orphan.ID) == "rolled back" },
		"the check-back fences the orphan's transaction id")
	err = tp.Send(t.Context(), orphan, insertUser(uuid.New()))
	if !errors.Is(err, rocketmq.ErrDuplicateTx) {
		t.Fatalf("late Send of the orphan: %v, want ErrDuplicateTx", err)
	}
	if n := rows(t, e.pool, `select count(*) from users`); n != 0 {
		t.Fatalf("the late local transaction committed %d users", n)
	}
	// A message checked back after the orphan's rollback proves the consumer would have seen it.
	control := outbox.Message{ID: uuid.New(), Topic: e.topic, Body: []byte("control")}
	withheld := newWithheldTxProducer(t, e, group(t, "txw"))
	if err := withheld.Send(t.Context(), control, insertUser(uuid.New())); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool {
		return rec.count(func(m outbox.Message) bool { return m.ID == control.ID }) == 1
	}, "the control message arrives")
	if n := rec.count(func(m outbox.Message) bool { return m.ID == orphan.ID }); n != 0 {
		t.Errorf("the orphan was delivered %d times", n)
	}
}

// leaveHalfMessages sends msgs as half messages from a plain transaction producer of group g that
// answers "unknown" and then shuts down, as a producer that died before its local transactions
// ran: the broker asks the group's other producers about them.
func leaveHalfMessages(t *testing.T, e *env, g string, msgs ...*primitive.Message) {
	t.Helper()
	dying, err := rmq.NewTransactionProducer(unknownListener{},
		producer.WithNsResolver(primitive.NewPassthroughResolver(e.ns)),
		producer.WithGroupName(g),
		producer.WithInstanceName("txkit-test-dying-"+uuid.NewString()[:8]),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := dying.Start(); err != nil {
		t.Fatal(err)
	}
	defer dying.Shutdown() //nolint:errcheck // test helper
	for _, m := range msgs {
		res, err := dying.SendMessageInTransaction(t.Context(), m)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != primitive.SendOK || res.State != primitive.UnknowState {
			t.Fatalf("half message: status %d, state %d", res.Status, res.State)
		}
	}
}

type unknownListener struct{}

func (unknownListener) ExecuteLocalTransaction(*primitive.Message) primitive.LocalTransactionState {
	return primitive.UnknowState
}

func (unknownListener) CheckLocalTransaction(*primitive.MessageExt) primitive.LocalTransactionState {
	return primitive.UnknowState
}

// Concurrent Sends on one TxProducer each get their own local transaction and ctx, and Migrate
// may run concurrently and repeatedly; Purge deletes old ids only.
func TestIntegrationTxConcurrentSendsMigratePurge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	createUsers(t, e)
	tp := newTxProducer(t, e, group(t, "txp"))
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := tp.Migrate(t.Context()); err != nil {
				errs <- err
			}
		}()
	}
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var fn func(context.Context, pgx.Tx) error = insertUser(uuid.New())
			if i%4 == 0 {
				fn = func(context.Context, pgx.Tx) error { return errBoom }
			}
			err := tp.Send(t.Context(), outbox.Message{ID: uuid.New(), Topic: e.topic, Body: []byte("x")}, fn)
			if i%4 == 0 && !errors.Is(err, errBoom) || i%4 != 0 && err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := rows(t, e.pool, `select count(*) from txkit_rmq_tx where committed`); n != 12 {
		t.Errorf("%d committed transaction ids, want 12", n)
	}
	if n := rows(t, e.pool, `select count(*) from users`); n != 12 {
		t.Errorf("%d users, want 12", n)
	}
	if _, err := e.pool.Exec(t.Context(), `update txkit_rmq_tx set created_at = now() - interval '2 hours'
		where id = (select id from txkit_rmq_tx limit 1)`); err != nil {
		t.Fatal(err)
	}
	n, err := tp.Purge(t.Context(), e.pool, time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("Purge: %d, %v; want 1 deleted", n, err)
	}
}

// Send and Close: Send after Close is refused.
func TestIntegrationTxClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tp := newTxProducer(t, e, group(t, "txp"))
	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tp.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	err := tp.Send(t.Context(), outbox.Message{ID: uuid.New(), Topic: e.topic}, func(context.Context, pgx.Tx) error { return nil })
	if !errors.Is(err, rocketmq.ErrClosed) {
		t.Fatalf("Send after Close: %v, want ErrClosed", err)
	}
}
