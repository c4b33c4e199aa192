package rocketmq_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

var ns = []string{"127.0.0.1:1"} // never contacted: every case fails before the client starts

func TestConstructorsRefuseBadInput(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://nobody@127.0.0.1:1/none") // connects lazily; never used
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store, err := idempotency.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, pgx.Tx, outbox.Message) error { return nil }
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	tests := []struct {
		name string
		new  func() error
		want error
	}{
		{"publisher: no name server", func() error { _, err := rocketmq.NewPublisher(ctx, nil); return err }, rocketmq.ErrInvalidOption},
		{"publisher: bad name server", func() error { _, err := rocketmq.NewPublisher(ctx, []string{"localhost"}); return err }, rocketmq.ErrInvalidOption},
		{"publisher: ended ctx", func() error { _, err := rocketmq.NewPublisher(cancelled, ns); return err }, context.Canceled},
		{"publisher: negative retries", func() error {
			_, err := rocketmq.NewPublisher(ctx, ns, rocketmq.WithRetries(-1, time.Second))
			return err
		}, rocketmq.ErrInvalidOption},
		{"publisher: zero send timeout", func() error {
			_, err := rocketmq.NewPublisher(ctx, ns, rocketmq.WithRetries(2, 0))
			return err
		}, rocketmq.ErrInvalidOption},
		{"publisher: bad group", func() error {
			_, err := rocketmq.NewPublisher(ctx, ns, rocketmq.GroupForTest("a b"))
			return err
		}, rocketmq.ErrInvalidOption},
		{"publisher: access key without secret key", func() error {
			_, err := rocketmq.NewPublisher(ctx, ns, rocketmq.WithCredentials("ak", ""))
			return err
		}, rocketmq.ErrInvalidOption},
		{"consumer: secret key without access key", func() error {
			_, err := rocketmq.NewConsumer(ns, "g", "t", pool, store, h, rocketmq.WithCredentials("", "secret"))
			return err
		}, rocketmq.ErrInvalidOption},
		{"consumer: max message size below 1 KiB", func() error {
			_, err := rocketmq.NewConsumer(ns, "g", "t", pool, store, h, rocketmq.MaxMessageSizeForTest(1023))
			return err
		}, rocketmq.ErrInvalidOption},
		{"consumer: empty group", func() error { _, err := rocketmq.NewConsumer(ns, "", "t", pool, store, h); return err }, rocketmq.ErrInvalidOption},
		{"consumer: bad topic", func() error { _, err := rocketmq.NewConsumer(ns, "g", "a/b", pool, store, h); return err }, rocketmq.ErrInvalidOption},
		{"consumer: nil pool", func() error { _, err := rocketmq.NewConsumer(ns, "g", "t", nil, store, h); return err }, rocketmq.ErrInvalidOption},
		{"consumer: nil store", func() error { _, err := rocketmq.NewConsumer(ns, "g", "t", pool, nil, h); return err }, rocketmq.ErrInvalidOption},
		{"consumer: nil handler", func() error { _, err := rocketmq.NewConsumer(ns, "g", "t", pool, store, nil); return err }, rocketmq.ErrInvalidOption},
		{"consumer: tag expression with an empty tag", func() error {
			_, err := rocketmq.NewConsumer(ns, "g", "t", pool, store, h, rocketmq.WithTagExpression("a || "))
			return err
		}, rocketmq.ErrInvalidOption},
		{"consumer: delay level 19", func() error {
			_, err := rocketmq.NewConsumer(ns, "g", "t", pool, store, h, rocketmq.WithRedelivery(16, 19))
			return err
		}, rocketmq.ErrInvalidOption},
		{"consumer: no goroutines", func() error {
			_, err := rocketmq.NewConsumer(ns, "g", "t", pool, store, h, rocketmq.WithConsumeGoroutines(0))
			return err
		}, rocketmq.ErrInvalidOption},
		{"consumer: negative reconsume", func() error {
			_, err := rocketmq.NewConsumer(ns, "g", "t", pool, store, h, rocketmq.WithRedelivery(-1, 0))
			return err
		}, rocketmq.ErrInvalidOption},
		{"consumer: orderly retry 1ms", func() error {
			_, err := rocketmq.NewConsumer(ns, "g", "t", pool, store, h, rocketmq.WithOrderly(time.Millisecond))
			return err
		}, rocketmq.ErrInvalidOption},
		{"consumer: zero handler timeout", func() error {
			_, err := rocketmq.NewConsumer(ns, "g", "t", pool, store, h, rocketmq.HandlerTimeoutForTest(0))
			return err
		}, rocketmq.ErrInvalidOption},
		{"tx: nil pool", func() error { _, err := rocketmq.NewTxProducer(ctx, ns, "g", nil); return err }, rocketmq.ErrInvalidOption},
		{"tx: bad group", func() error { _, err := rocketmq.NewTxProducer(ctx, ns, "g!", pool); return err }, rocketmq.ErrInvalidOption},
		{"tx: negative retries", func() error {
			_, err := rocketmq.NewTxProducer(ctx, ns, "g", pool, rocketmq.WithRetries(-1, time.Second))
			return err
		}, rocketmq.ErrInvalidOption},
		{"tx: zero grace", func() error {
			_, err := rocketmq.NewTxProducer(ctx, ns, "g", pool, rocketmq.CheckGraceForTest(0))
			return err
		}, rocketmq.ErrInvalidOption},
		{"tx: empty table", func() error {
			_, err := rocketmq.NewTxProducer(ctx, ns, "g", pool, rocketmq.TableForTest(""))
			return err
		}, rocketmq.ErrInvalidOption},
		{"tx: long table", func() error {
			_, err := rocketmq.NewTxProducer(ctx, ns, "g", pool, rocketmq.TableForTest(strings.Repeat("t", 60)))
			return err
		}, rocketmq.ErrInvalidOption},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.new(); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want an error wrapping %v", err, tc.want)
			}
		})
	}

	c, err := rocketmq.NewConsumer(ns, "g", "t", pool, store, h, rocketmq.WithOrderly(time.Second), rocketmq.WithRedelivery(0, 18),
		rocketmq.WithLogger(nil))
	if err != nil || c == nil {
		t.Fatalf("valid consumer: %v", err)
	}
	if s := c.Stats(); s != (rocketmq.Stats{}) {
		t.Fatalf("new consumer's stats %+v, want zero", s)
	}
}

// Each option fits the constructors its doc names and no other: passing it to another one does
// not compile, which this test states through the interfaces each option's value implements.
func TestOptionsFit(t *testing.T) {
	tests := []struct {
		name                string
		opt                 any
		pub, con, txp, send bool
	}{
		{"WithLogger", rocketmq.WithLogger(nil), true, true, true, true},
		{"WithCredentials", rocketmq.WithCredentials("a", "s"), true, true, true, true},
		{"WithRetries", rocketmq.WithRetries(1, time.Second), true, false, true, true},
		{"GroupForTest", rocketmq.GroupForTest("g"), true, false, false, false},
		{"WithOrderly", rocketmq.WithOrderly(time.Second), false, true, false, false},
		{"MaxMessageSizeForTest", rocketmq.MaxMessageSizeForTest(1 << 20), false, true, false, false},
		{"WithTagExpression", rocketmq.WithTagExpression("a"), false, true, false, false},
		{"CheckGraceForTest", rocketmq.CheckGraceForTest(time.Second), false, false, true, false},
		{"TableForTest", rocketmq.TableForTest("t"), false, false, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, pub := tc.opt.(rocketmq.PublisherOption)
			_, con := tc.opt.(rocketmq.ConsumerOption)
			_, txp := tc.opt.(rocketmq.TxProducerOption)
			_, send := tc.opt.(rocketmq.SendOption)
			if pub != tc.pub || con != tc.con || txp != tc.txp || send != tc.send {
				t.Fatalf("fits publisher %v, consumer %v, tx producer %v, send %v; want %v %v %v %v",
					pub, con, txp, send, tc.pub, tc.con, tc.txp, tc.send)
			}
		})
	}
}

func TestEncodeRefuses(t *testing.T) {
	id := uuid.New()
	ok := outbox.Message{ID: id, Topic: "t"}
	with := func(f func(*outbox.Message)) outbox.Message { m := ok; f(&m); return m }
	tests := []struct {
		name string
		msg  outbox.Message
	}{
		{"zero id", with(func(m *outbox.Message) { m.ID = uuid.Nil })},
		{"empty topic", with(func(m *outbox.Message) { m.Topic = "" })},
		{"topic with a dot", with(func(m *outbox.Message) { m.Topic = "user.registered" })},
		{"long topic", with(func(m *outbox.Message) { m.Topic = strings.Repeat("t", 128) })},
		{"key with a separator", with(func(m *outbox.Message) { m.Key = "a\x01b" })},
		{"empty header name", with(func(m *outbox.Message) { m.Headers = map[string]string{"": "v"} })},
		{"reserved header", with(func(m *outbox.Message) { m.Headers = map[string]string{"KEYS": "v"} })},
		{"reserved tx header", with(func(m *outbox.Message) { m.Headers = map[string]string{"__transactionId__": "v"} })},
		{"txkit header", with(func(m *outbox.Message) { m.Headers = map[string]string{"txkit_id": "v"} })},
		{"header name with a space", with(func(m *outbox.Message) { m.Headers = map[string]string{"a b": "v"} })},
		{"header value with a separator", with(func(m *outbox.Message) { m.Headers = map[string]string{"h": "a\x02"} })},
		{"headers too long", with(func(m *outbox.Message) { m.Headers = map[string]string{"h": strings.Repeat("v", 32000)} })},
		{"tag with ||", with(func(m *outbox.Message) { m.Tags = "a||b" })},
		{"tag with a separator", with(func(m *outbox.Message) { m.Tags = "a\x01" })},
		{"tag with a leading space", with(func(m *outbox.Message) { m.Tags = " a" })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := rocketmq.Encode(tc.msg); !errors.Is(err, outbox.ErrInvalidMessage) {
				t.Fatalf("Encode: %v, want ErrInvalidMessage", err)
			}
		})
	}
	if _, err := rocketmq.Encode(ok); err != nil {
		t.Fatalf("Encode of a good message: %v", err)
	}
}

// received turns a sent message into what a consumer decodes (properties as the broker keeps
// them, plus some the client and broker add).
func received(m *primitive.Message, extra map[string]string) *primitive.MessageExt {
	ext := &primitive.MessageExt{}
	ext.Topic = m.Topic
	ext.Body = m.Body
	props := m.GetProperties()
	maps.Copy(props, extra)
	ext.WithProperties(props)
	return ext
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	system := map[string]string{"UNIQ_KEY": "C0A8", "MIN_OFFSET": "0", "MAX_OFFSET": "9", "CONSUME_START_TIME": "1"}
	tests := []struct {
		name string
		msg  outbox.Message
	}{
		{"bare", outbox.Message{ID: uuid.New(), Topic: "t"}},
		{"full", outbox.Message{ID: uuid.New(), Topic: "t-1", Key: "user-42", Tags: "created", Body: []byte{0, 1, 2, 0xff},
			Headers: map[string]string{"Content-Type": "application/json", "trace": "abc", "empty": "", "ünïcode": "✓"}}},
		{"empty headers map", outbox.Message{ID: uuid.New(), Topic: "t", Headers: map[string]string{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := rocketmq.Encode(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			if m.GetKeys() != tc.msg.ID.String() || m.GetProperty(rocketmq.PropertyID) != tc.msg.ID.String() {
				t.Fatalf("keys %q, id property %q, want the ID", m.GetKeys(), m.GetProperty(rocketmq.PropertyID))
			}
			got, err := rocketmq.Decode(received(m, system))
			if err != nil {
				t.Fatal(err)
			}
			want := tc.msg
			if len(want.Headers) == 0 {
				want.Headers = nil
			}
			if m.GetTags() != tc.msg.Tags {
				t.Fatalf("TAGS %q, want %q", m.GetTags(), tc.msg.Tags)
			}
			if got.ID != want.ID || got.Topic != want.Topic || got.Key != want.Key || got.Tags != want.Tags || !bytes.Equal(got.Body, want.Body) ||
				!maps.Equal(got.Headers, want.Headers) || (got.Headers == nil) != (want.Headers == nil) {
				t.Fatalf("decoded %+v, want %+v", got, want)
			}
		})
	}
}

func TestDecodeForeignMessages(t *testing.T) {
	id := uuid.New()
	tests := []struct {
		name    string
		keys    string
		props   map[string]string
		wantID  uuid.UUID
		headers map[string]string
		err     bool
	}{
		{"id from keys", "order-17 " + id.String(), map[string]string{"app": "x", "TAGS": "a", "UNIQ_KEY": "u"}, id,
			map[string]string{"app": "x"}, false},
		{"no id", "order-17", nil, uuid.Nil, nil, true},
		{"bad id property", "", map[string]string{rocketmq.PropertyID: "nope"}, uuid.Nil, nil, true},
		{"bad header list", "", map[string]string{rocketmq.PropertyID: id.String(), rocketmq.PropertyHeaders: "{"}, uuid.Nil, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ext := &primitive.MessageExt{}
			ext.Topic = "t"
			ext.WithProperties(map[string]string{})
			for k, v := range tc.props {
				ext.WithProperty(k, v)
			}
			if tc.keys != "" {
				ext.WithProperty(primitive.PropertyKeys, tc.keys)
			}
			got, err := rocketmq.Decode(ext)
			if tc.err {
				if err == nil {
					t.Fatalf("Decode: %+v, want an error", got)
				}
				return
			}
			if err != nil || got.ID != tc.wantID || !maps.Equal(got.Headers, tc.headers) {
				t.Fatalf("Decode: %+v, %v; want ID %s, headers %v", got, err, tc.wantID, tc.headers)
			}
		})
	}
}

func TestKeySelector(t *testing.T) {
	queues := func(order ...int) []*primitive.MessageQueue {
		var mqs []*primitive.MessageQueue
		for _, i := range order {
			mqs = append(mqs, &primitive.MessageQueue{Topic: "t", BrokerName: []string{"a", "b"}[i/4], QueueId: i % 4})
		}
		return mqs
	}
	sorted, shuffled := queues(0, 1, 2, 3, 4, 5, 6, 7), queues(5, 2, 7, 0, 4, 1, 6, 3)
	before := slices.Clone(shuffled)
	s := rocketmq.NewKeySelector()
	msg := func(key string) *primitive.Message {
		m := primitive.NewMessage("t", nil)
		m.WithProperty(rocketmq.PropertyKey, key)
		return m
	}
	hit := map[string]bool{}
	for i := range 200 {
		key := "user-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		q1, q2 := s.Select(msg(key), sorted, ""), s.Select(msg(key), shuffled, "")
		if *q1 != *q2 {
			t.Fatalf("key %s: queue %v from the sorted list, %v from the shuffled one", key, q1, q2)
		}
		if again := s.Select(msg(key), sorted, ""); *again != *q1 {
			t.Fatalf("key %s: queue %v, then %v", key, q1, again)
		}
		hit[q1.BrokerName+string(rune('0'+q1.QueueId))] = true
	}
	if len(hit) != 8 {
		t.Errorf("200 keys reached %d of 8 queues", len(hit))
	}
	if !slices.Equal(shuffled, before) {
		t.Errorf("Select reordered the client's queue list")
	}
	seen := map[primitive.MessageQueue]int{}
	for range 16 {
		seen[*s.Select(primitive.NewMessage("t", nil), sorted, "")]++
	}
	for _, q := range sorted {
		if seen[*q] != 2 {
			t.Errorf("round robin: queue %v chosen %d times of 16, want 2", q, seen[*q])
		}
	}
	probe := msg("k")
	probe.WithProperty(rocketmq.ProbeProperty, "1")
	if q := s.Select(probe, sorted, ""); q != nil {
		t.Errorf("probe placed on %v", q)
	}
	if q := s.Select(msg("k"), nil, ""); q != nil {
		t.Errorf("no queues: %v", q)
	}

	// Broker b leaves the route (a master died): no key moves. Keys of broker a keep their queue;
	// keys of broker b keep theirs, so their sends fail until b is back.
	onlyA, back := queues(3, 0, 2, 1), 0
	for i := range 200 {
		key := "user-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		q, gone := *s.Select(msg(key), sorted, ""), *s.Select(msg(key), onlyA, "")
		if q != gone {
			t.Fatalf("key %s: queue %v with both brokers, %v with broker b gone", key, q, gone)
		}
		if q.BrokerName == "b" {
			back++
		}
	}
	if back == 0 {
		t.Errorf("no key of 200 on broker b")
	}
	// A selector that has seen only broker a's queues spreads keys over those.
	fresh := rocketmq.NewKeySelector()
	for i := range 50 {
		if q := fresh.Select(msg("user-"+string(rune('a'+i))), onlyA, ""); q.BrokerName != "a" {
			t.Fatalf("a fresh selector placed a key on %v, not in the route", q)
		}
	}
}

func TestRlogAdapter(t *testing.T) {
	var buf bytes.Buffer
	l := rocketmq.NewRlogAdapter(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}})), slog.LevelWarn)
	l.Info("offset updated", map[string]any{"queue": 1})
	l.Warning("route missing", map[string]any{"topic": "t", "broker": "b"})
	l.Error("", nil)
	l.Fatal("cannot create dir", nil)
	l.Level("debug")
	l.Debug("now visible", nil)
	if err := l.OutputPath("/nonexistent/x.log"); err != nil {
		t.Errorf("OutputPath: %v", err)
	}
	want := `level=WARN msg="route missing" broker=b topic=t
level=ERROR msg="cannot create dir" fatal=true
level=DEBUG msg="now visible"
`
	if buf.String() != want {
		t.Errorf("adapter wrote\n%s\nwant\n%s", buf.String(), want)
	}
}
