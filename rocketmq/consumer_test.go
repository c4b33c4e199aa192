package rocketmq_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

func newPublisher(t *testing.T, e *env, opts ...rocketmq.PublisherOption) *rocketmq.Publisher {
	t.Helper()
	pub, err := rocketmq.NewPublisher(t.Context(), e.ns, append([]rocketmq.PublisherOption{rocketmq.WithLogger(e.log)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

func newConsumer(t *testing.T, e *env, g string, h rocketmq.Handler, opts ...rocketmq.ConsumerOption) *rocketmq.Consumer {
	t.Helper()
	c, err := rocketmq.NewConsumer(e.ns, g, e.topic, e.pool, e.store, h,
		append([]rocketmq.ConsumerOption{rocketmq.WithLogger(e.log)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Per-key order end to end: the Publisher sends the messages of a key to one queue, and an orderly
// Consumer applies each queue's messages one at a time, in queue order. (A concurrent Consumer
// applies even the messages of one queue in parallel goroutines, so it keeps no order: WithOrderly
// is what a consumer that needs the order asks for.)
func TestIntegrationPublishConsumeKeyOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const keys, perKey = 5, 40
	rec := &recorder{}
	c := newConsumer(t, e, group(t, "order"), rec.handler(nil), rocketmq.WithOrderly(time.Second))
	run(t, c)
	pub := newPublisher(t, e)

	var wg sync.WaitGroup
	errs := make(chan error, keys)
	for k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("user-%d", k)
			for i := range perKey {
				err := pub.Publish(t.Context(), outbox.Message{
					ID: uuid.New(), Topic: e.topic, Key: key, Body: []byte(key + "/" + strconv.Itoa(i)),
					Headers: map[string]string{"seq": strconv.Itoa(i), "empty": "", "Content-Type": "text/plain"},
				})
				if err != nil {
					errs <- fmt.Errorf("publish %s/%d: %w", key, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool { return c.Stats().Applied == keys*perKey },
		"%d messages applied (stats %+v)", keys*perKey, c.Stats())

	rec.mu.Lock()
	calls := append([]outbox.Message(nil), rec.calls...)
	rec.mu.Unlock()
	next := map[string]int{}
	for _, m := range calls {
		want := map[string]string{"seq": strconv.Itoa(next[m.Key]), "empty": "", "Content-Type": "text/plain"}
		if !maps.Equal(m.Headers, want) {
			t.Fatalf("key %s: got message with headers %v, want %v (out of order or headers lost)", m.Key, m.Headers, want)
		}
		if m.Topic != e.topic {
			t.Fatalf("message topic %q, want %q", m.Topic, e.topic)
		}
		next[m.Key]++
	}
	if len(calls) != keys*perKey {
		t.Errorf("%d handler calls, want %d", len(calls), keys*perKey)
	}
	if n := rows(t, e.pool, `select count(distinct id) from applied`); n != keys*perKey {
		t.Errorf("%d distinct messages applied, want %d", n, keys*perKey)
	}
	if s := c.Stats(); s.Duplicates != 0 || s.Failed != 0 || s.Poison != 0 {
		t.Errorf("stats %+v, want no duplicates, failures or poison", s)
	}
}

// A message published twice (the relay's retry after a lost acknowledgement) is applied once.
func TestIntegrationDuplicateAppliedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := &recorder{}
	g := group(t, "dup")
	c := newConsumer(t, e, g, rec.handler(nil))
	run(t, c)
	pub := newPublisher(t, e)

	dup := outbox.Message{ID: uuid.New(), Topic: e.topic, Key: "k", Body: []byte("twice")}
	other := outbox.Message{ID: uuid.New(), Topic: e.topic, Key: "k", Body: []byte("once")}
	for _, m := range []outbox.Message{dup, dup, other} {
		if err := pub.Publish(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool {
		s := c.Stats()
		return s.Applied == 2 && s.Duplicates == 1
	}, "two messages applied and one duplicate suppressed (stats %+v)", c.Stats())

	if n := rows(t, e.pool, `select count(*) from applied where id = $1`, dup.ID); n != 1 {
		t.Errorf("duplicated message applied %d times, want 1", n)
	}
	if n := rows(t, e.pool, `select count(*) from applied`); n != 2 {
		t.Errorf("%d rows applied, want 2", n)
	}
	if n := rows(t, e.pool, `select count(*) from txkit_idempotency where scope = $1`, g); n != 2 {
		t.Errorf("%d idempotency keys in the group's scope, want 2", n)
	}
}

// A handler error rolls back the handler's writes and has the message redelivered until it
// succeeds: applied once. A concurrent consumer redelivers through the group's retry topic (here
// after 1 s, delay level 1), an orderly one retries in place.
func TestIntegrationHandlerErrorRedelivered(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		opt  rocketmq.ConsumerOption
	}{
		{"concurrent", rocketmq.WithRedelivery(16, 1)},
		{"orderly", rocketmq.WithOrderly(time.Second)},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			rec := &recorder{}
			const failures = 2
			h := rec.handler(func(_ outbox.Message, call int) error {
				if call <= failures {
					return fmt.Errorf("attempt %d: %w", call, errBoom)
				}
				return nil
			})
			c := newConsumer(t, e, group(t, "retry"), h, mode.opt)
			run(t, c)
			pub := newPublisher(t, e)
			msg := outbox.Message{ID: uuid.New(), Topic: e.topic, Key: "k", Body: []byte("fails twice"),
				Headers: map[string]string{"trace": "abc"}}
			if err := pub.Publish(t.Context(), msg); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool { return c.Stats().Applied == 1 },
				"the message applied after %d failures (stats %+v)", failures, c.Stats())

			if s := c.Stats(); s.Failed != failures || s.Duplicates != 0 {
				t.Errorf("stats %+v, want Failed %d and no duplicates", s, failures)
			}
			if n := rec.count(func(m outbox.Message) bool {
				return m.ID == msg.ID && m.Headers["trace"] == "abc" && m.Topic == e.topic
			}); n != failures+1 {
				t.Errorf("handler saw the message (with its topic and headers) %d times, want %d", n, failures+1)
			}
			if n := rows(t, e.pool, `select count(*) from applied where id = $1`, msg.ID); n != 1 {
				t.Errorf("message applied %d times, want 1 (failed attempts must roll back)", n)
			}
		})
	}
}

// Messages that cannot be applied are acknowledged and logged, and the queue goes on: one without
// a txkit id (sent by another producer) and one whose handler returns ErrPoison. All of them go to
// queue 0 of the topic and the consumer is orderly, so a blocked queue would stop the rest.
func TestIntegrationPoisonAcknowledged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := &recorder{}
	refused := uuid.New()
	h := rec.handler(func(m outbox.Message, _ int) error {
		if m.ID == refused {
			return fmt.Errorf("body does not parse: %w", rocketmq.ErrPoison)
		}
		return nil
	})
	c := newConsumer(t, e, group(t, "poison"), h, rocketmq.WithOrderly(time.Second))
	run(t, c)

	raw, err := rmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver(e.ns)),
		producer.WithGroupName(group(t, "rawpub")),
		producer.WithInstanceName("txkit-test-raw-"+uuid.NewString()[:8]),
		producer.WithQueueSelector(producer.NewManualQueueSelector()),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Shutdown() })
	queue0 := firstQueue(t, e)
	sendRaw := func(m *primitive.Message) string {
		t.Helper()
		m.Queue = queue0
		res, err := raw.SendSync(t.Context(), m)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != primitive.SendOK {
			t.Fatalf("send status %d", res.Status)
		}
		return res.MsgID
	}

	poison := primitive.NewMessage(e.topic, []byte("{not json"))
	poison.WithKeys([]string{"order-17"})
	poisonID := sendRaw(poison)
	var good []uuid.UUID
	for i := range 3 {
		id := uuid.New()
		if i == 1 {
			id = refused
		}
		m, err := rocketmq.Encode(outbox.Message{ID: id, Topic: e.topic, Body: []byte("ok")})
		if err != nil {
			t.Fatal(err)
		}
		sendRaw(m)
		if id != refused {
			good = append(good, id)
		}
	}
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool {
		s := c.Stats()
		return s.Applied == 2 && s.Poison == 2
	}, "the two good messages applied and the two poison ones acknowledged (stats %+v)", c.Stats())

	if s := c.Stats(); s.Failed != 0 {
		t.Errorf("stats %+v: poison must not be retried", s)
	}
	if n := rec.count(func(m outbox.Message) bool { return m.ID == refused }); n != 1 {
		t.Errorf("handler saw the refused message %d times, want 1", n)
	}
	if n := rows(t, e.pool, `select count(*) from applied where id = any($1)`, good); n != 2 {
		t.Errorf("%d good messages applied, want 2", n)
	}
	if n := rows(t, e.pool, `select count(*) from applied where id = $1`, refused); n != 0 {
		t.Errorf("refused message left %d rows, want 0 (rolled back)", n)
	}
	logs := e.logs.String()
	if !contains(logs, poisonID) || !contains(logs, refused.String()) {
		t.Errorf("the log names neither poison message's id (%s, %s):\n%s", poisonID, refused, logs)
	}
}

// createTopic creates a topic on the broker; group's cleanup deletes it.
func createTopic(t *testing.T, e *env, topic string, queues int) {
	t.Helper()
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(e.ns)))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close() //nolint:errcheck // test helper
	if err := adm.CreateTopic(t.Context(), admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(testenv.Broker(t)),
		admin.WithReadQueueNums(queues), admin.WithWriteQueueNums(queues)); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// firstQueue returns the topic's queue 0 as the name server routes it.
func firstQueue(t *testing.T, e *env) *primitive.MessageQueue {
	t.Helper()
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(e.ns)))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close() //nolint:errcheck // test helper
	mqs, err := adm.FetchPublishMessageQueues(t.Context(), e.topic)
	if err != nil {
		t.Fatalf("route of %s: %v", e.topic, err)
	}
	for _, q := range mqs {
		if q.QueueId == 0 {
			return q
		}
	}
	t.Fatalf("topic %s has no queue 0 in %v", e.topic, mqs)
	return nil
}

// A message that keeps failing goes to the group's dead-letter topic after WithRedelivery's maxTimes
// redeliveries, and the queue goes on. (An orderly consumer of v2.1.2 tries once more than a
// concurrent one: it dead-letters when the count of earlier attempts exceeds the maximum, the
// broker when it reaches it.)
func TestIntegrationDeadLetter(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name     string
		opts     []rocketmq.ConsumerOption
		attempts int
	}{
		{"concurrent", []rocketmq.ConsumerOption{rocketmq.WithRedelivery(1, 1)}, 2},
		{"orderly", []rocketmq.ConsumerOption{rocketmq.WithOrderly(time.Second), rocketmq.WithRedelivery(1, 0)}, 3},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			rec := &recorder{}
			doomed, after := uuid.New(), uuid.New()
			h := rec.handler(func(m outbox.Message, _ int) error {
				if m.ID == doomed {
					return errBoom
				}
				return nil
			})
			g := group(t, "dlq")
			// A consumer of the dead-letter topic, in a group of its own, applies what lands there.
			// The broker would create the topic with the first dead letter, but the name server
			// learns of it only at the broker's next registration (up to 30 s later), and a
			// consumer cannot start before: create it now.
			createTopic(t, e, "%DLQ%"+g, 1)
			dlqRec := &recorder{}
			dlq, err := rocketmq.NewConsumer(e.ns, group(t, "dlqreader"), "%DLQ%"+g, e.pool, e.store, dlqRec.handler(nil),
				rocketmq.WithLogger(e.log))
			if err != nil {
				t.Fatal(err)
			}
			run(t, dlq)
			c := newConsumer(t, e, g, h, mode.opts...)
			run(t, c)
			pub := newPublisher(t, e)
			for _, id := range []uuid.UUID{doomed, after} {
				if err := pub.Publish(t.Context(), outbox.Message{ID: id, Topic: e.topic, Key: "k", Body: []byte("x")}); err != nil {
					t.Fatal(err)
				}
			}

			testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool { return dlq.Stats().Applied == 1 && c.Stats().Applied == 1 },
				"the failing message reaches %%DLQ%%%s and the next one is applied (stats %+v, dead-letter stats %+v)",
				g, c.Stats(), dlq.Stats())
			if n := dlqRec.count(func(m outbox.Message) bool { return m.ID == doomed }); n != 1 {
				t.Errorf("dead-letter consumer saw the message %d times, want 1", n)
			}
			if n := rec.count(func(m outbox.Message) bool { return m.ID == doomed }); n != mode.attempts {
				t.Errorf("handler saw the message %d times, want %d", n, mode.attempts)
			}
			if s := c.Stats(); s.Failed != int64(mode.attempts) {
				t.Errorf("stats %+v, want %d failures", s, mode.attempts)
			}
		})
	}
}

// Run waits for a handler in flight before it shuts the push consumer down, and the handler's
// ctx does not end with Run's.
func TestIntegrationRunWaitsForHandlers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	started := make(chan struct{})
	release := make(chan struct{})
	var handlerErr atomic.Value
	var once sync.Once
	h := func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
		once.Do(func() { close(started) })
		<-release
		_, err := tx.Exec(ctx, `insert into applied (id) values ($1)`, msg.ID)
		if err != nil {
			handlerErr.Store(err)
		}
		return err
	}
	c := newConsumer(t, e, group(t, "drain"), h)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	pub := newPublisher(t, e)
	if err := pub.Publish(t.Context(), outbox.Message{ID: uuid.New(), Topic: e.topic, Body: []byte("slow")}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(waitFor):
		t.Fatalf("handler not called within %v", waitFor)
	}
	cancel()
	// A negative check needs a window: Run must still be waiting for the handler after it.
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while a handler was in flight", err)
	case <-time.After(time.Second):
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatalf("Run did not return within %v after the handler finished", waitFor)
	}
	if err, _ := handlerErr.Load().(error); err != nil {
		t.Fatalf("handler's write after Run's ctx ended: %v", err)
	}
	if s := c.Stats(); s.Applied != 1 {
		t.Errorf("stats %+v, want the in-flight message applied", s)
	}
}

// Run fails at once when the topic does not exist (the client does not create topics for
// consumers), and two Runs of one Consumer do not overlap.
func TestIntegrationRunErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	missing, err := rocketmq.NewConsumer(e.ns, group(t, "missing"), "txkit-no-such-topic-"+uuid.NewString()[:8], e.pool, e.store,
		func(context.Context, pgx.Tx, outbox.Message) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	if err := missing.Run(ctx); err == nil {
		t.Fatal("Run on a missing topic returned nil")
	}

	c := newConsumer(t, e, group(t, "twice"), func(context.Context, pgx.Tx, outbox.Message) error { return nil })
	stop := run(t, c)
	pub := newPublisher(t, e)
	if err := pub.Publish(t.Context(), outbox.Message{ID: uuid.New(), Topic: e.topic}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool { return c.Stats().Applied == 1 }, "the first Run consumes")
	if err := c.Run(ctx); !errors.Is(err, rocketmq.ErrRunning) {
		t.Errorf("a second Run while the first runs: %v, want ErrRunning", err)
	}
	stop()
}

// Publish refuses what RocketMQ cannot carry, honours an ended ctx, and stops after Close.
func TestIntegrationPublisherErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub := newPublisher(t, e)
	if err := pub.Publish(t.Context(), outbox.Message{ID: uuid.New(), Topic: e.topic,
		Headers: map[string]string{"UNIQ_KEY": "x"}}); !errors.Is(err, outbox.ErrInvalidMessage) {
		t.Errorf("reserved header: %v, want ErrInvalidMessage", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := pub.Publish(ctx, outbox.Message{ID: uuid.New(), Topic: e.topic}); !errors.Is(err, context.Canceled) {
		t.Errorf("ended ctx: %v, want context.Canceled", err)
	}
	if err := pub.Publish(t.Context(), outbox.Message{ID: uuid.New(), Topic: e.topic, Body: []byte("ok")}); err != nil {
		t.Errorf("Publish: %v", err)
	}
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := pub.Publish(t.Context(), outbox.Message{ID: uuid.New(), Topic: e.topic}); !errors.Is(err, rocketmq.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}
