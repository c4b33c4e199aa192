package rocketmq_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/obs/obstest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

// The adapter never passes on a message's body or properties, in any of the shapes the client
// logs them (rocketmq-client-go v2.1.2: the pulled batch in "consumeMessageCurrently error" and
// the orderly lines, a consumed message in the broadcasting line, the half message in the
// transactional producer's line), nor a response or bytes; and it writes a line the client
// repeats once per interval, the last one held back with the count of the others once the
// interval has ended.
func TestRlogAdapterFiltersMessagesAndRepeats(t *testing.T) {
	secret := "alice-" + uuid.NewString()
	ext := func(id string) *primitive.MessageExt {
		m := &primitive.MessageExt{Message: primitive.Message{Topic: "t", Body: []byte(`{"user":"` + secret + `"}`)}, MsgId: id}
		m.WithProperty("x-user-name", secret)
		return m
	}
	batch := []*primitive.MessageExt{ext("ID1"), ext("ID2"), ext("ID3")}
	half := primitive.NewMessage("t", []byte(secret))
	mq := &primitive.MessageQueue{Topic: "t", BrokerName: "broker-a", QueueId: 2}
	type response struct{ Body []byte }
	for _, tc := range []struct {
		name   string
		msg    string
		fields map[string]any
		want   map[string]string // attributes the line must carry
	}{
		{"pulled batch", "consumeMessageCurrently error", map[string]any{
			rlog.LogKeyUnderlayError: errors.New("rocketmq: consumer g: message 1: handler: boom"), rlog.LogKeyMessages: batch,
			rlog.LogKeyMessageQueue: mq, rlog.LogKeyConsumerGroup: "g"},
			map[string]string{"messages.count": "3", "messages.msg_ids": "ID1,ID2,ID3", "MessageQueue": mq.String(),
				"consumerGroup": "g", "underlayError": "rocketmq: consumer g: message 1: handler: boom"}},
		{"one consumed message", "BROADCASTING, the message consume failed, drop it", map[string]any{"message": batch[0]},
			map[string]string{"message.count": "1", "message.msg_ids": "ID1"}},
		{"a message by value", "orderly", map[string]any{"messages": primitive.MessageExt{MsgId: "ID2", Message: primitive.Message{Body: []byte(secret)}}},
			map[string]string{"messages.msg_ids": "ID2"}},
		{"half message", "executeLocalTransaction but state unexpected", map[string]any{"localState": primitive.UnknowState, "message": half},
			map[string]string{"message.count": "1"}},
		{"messages to send", "send", map[string]any{"msgs": []*primitive.Message{half, half}}, map[string]string{"msgs.count": "2"}},
		{"a response", "lock MessageQueue to broker invoke error", map[string]any{"response": &response{Body: []byte(secret)}},
			map[string]string{"response": "(*rocketmq_test.response, not logged)"}},
		{"bytes and maps", "raw", map[string]any{"body": []byte(secret), "props": map[string]string{"k": secret}, "cidAll": []string{"a", "b"}},
			map[string]string{"body": "(" + strconv.Itoa(len(secret)) + " bytes, not logged)", "props": "(map[string]string, not logged)", "cidAll": "[a b]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, logs := obstest.NewLogs()
			a := rocketmq.NewRlogAdapter(log, slog.LevelInfo)
			a.Warning(tc.msg, tc.fields)
			lines := logs.Lines(tc.msg)
			if len(lines) != 1 {
				t.Fatalf("%d lines, want 1", len(lines))
			}
			if strings.Contains(lines[0].Text, secret) {
				t.Fatalf("the line carries a message's body or property: %s", lines[0].Text)
			}
			for k, v := range tc.want {
				if got := lines[0].Attrs[k]; got != v {
					t.Errorf("%s = %q, want %q (line: %s)", k, got, v, lines[0].Text)
				}
			}
		})
	}

	t.Run("repeats", func(t *testing.T) {
		log, logs := obstest.NewLogs()
		clock := obstest.NewClock(time.Unix(1000, 0))
		a := rocketmq.NewRlogAdapterAt(log, slog.LevelWarn, clock.Now)
		const n = 100
		for range n {
			a.Warning("consumeMessageCurrently error", map[string]any{rlog.LogKeyMessages: batch})
			a.Warning("send heart beat to broker error", nil)
		}
		a.Error("consumeMessageCurrently error", nil) // another level: another line
		if got := len(logs.Lines("")); got != 3 {
			t.Fatalf("%d lines for %d repeats of two lines and one other, want 3", got, n)
		}
		clock.Add(obs.LogInterval)
		a.Debug("rebalance", nil) // any line of the client's, below the level too, writes the repeats held back
		for msg, want := range map[string]int{"consumeMessageCurrently error": 3, "send heart beat to broker error": 2} {
			lines := logs.Lines(msg)
			if len(lines) != want || lines[want-1].Level != slog.LevelWarn || lines[want-1].Attrs["suppressed"] != strconv.Itoa(n-2) {
				t.Fatalf("%q: %d lines, the last %v with suppressed=%q; want %d, the last the warning held back, with suppressed=%d",
					msg, len(lines), lines[len(lines)-1].Level, lines[len(lines)-1].Attrs["suppressed"], want, n-2)
			}
		}
	})
}

// TestIntegrationClientLogsFiltered: a real consumer whose handler fails every message, against
// the real broker: the client's own "consumeMessageCurrently error" lines, which carry the whole
// pulled batch, reach the logger given to SetClientLogger without any body or property and at
// most once per interval; the consumer's own "message failed" lines are limited the same way, and
// their counts add up to every failed attempt. (Not parallel: it sets the client's process-wide
// logger, restored after.)
func TestIntegrationClientLogsFiltered(t *testing.T) {
	clientLog, clientLogs := obstest.NewLogs()
	t.Cleanup(func() {
		rlog.SetLogger(rocketmq.NewRlogAdapter(slog.New(slog.NewTextHandler(os.Stderr, nil)), slog.LevelError))
	})
	rocketmq.SetClientLogger(clientLog, slog.LevelWarn)

	e := newEnv(t)
	log, logs := obstest.NewLogs()
	c := newConsumer(t, e, group(t, "logs"), func(context.Context, pgx.Tx, outbox.Message) error { return errBoom },
		rocketmq.WithLogger(log), rocketmq.WithRedelivery(16, 1))
	start := time.Now()
	stop := run(t, c)
	pub := newPublisher(t, e)
	secret := "alice-" + uuid.NewString()
	const msgs = 30
	for i := range msgs {
		if err := pub.Publish(t.Context(), outbox.Message{ID: uuid.New(), Topic: e.topic, Key: "user-" + strconv.Itoa(i),
			Body: []byte(`{"user":"` + secret + `"}`), Headers: map[string]string{"x-user-name": secret + "-header"}}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, waitFor, 50*time.Millisecond, func() bool { return c.Stats().Failed >= 3*msgs },
		"every message to fail three times (stats %+v)", c.Stats())
	stop()
	elapsed := time.Since(start)
	failed := c.Stats().Failed
	bound := int(elapsed/obs.LogInterval) + 2

	client := clientLogs.Lines("consumeMessageCurrently error")
	if len(client) == 0 || len(client) > bound {
		t.Fatalf("%d client lines for %d failed attempts in %v, want 1 to %d:\n%s", len(client), failed, elapsed.Round(time.Second), bound, obstest.Texts(client))
	}
	if client[0].Attrs["messages.count"] == "" {
		t.Fatalf("the client's line does not count its messages: %s", client[0].Text)
	}
	for _, l := range append(clientLogs.Lines(""), logs.Lines("")...) {
		if strings.Contains(l.Text, secret) {
			t.Fatalf("a log line carries a message's body or property: %s", l.Text)
		}
	}
	own := logs.Lines("rocketmq: message failed, redelivering later")
	if len(own) > bound {
		t.Fatalf("%d consumer lines for %d failed attempts in %v, want at most %d:\n%s", len(own), failed, elapsed.Round(time.Second), bound, obstest.Texts(own))
	}
	var accounted int64
	for _, l := range own {
		s, _ := strconv.ParseInt(l.Attrs["txkit.suppressed"], 10, 64)
		accounted += 1 + s
	}
	if accounted != failed {
		t.Fatalf("the consumer's lines and their counts add up to %d, want the %d failed attempts:\n%s", accounted, failed, obstest.Texts(own))
	}
	t.Logf("%d failed attempts in %v: %d client lines, %d consumer lines", failed, elapsed.Round(time.Second), len(client), len(own))
}

// The client's pull goroutines failing while Shutdown stops it ("fetch offset of mq from broker
// error … service close is not running", ERROR in v2.1.2) are a clean exit: logged at Debug, so
// a service's shutdown pages nobody; the same line with another error stays an ERROR.
func TestRlogAdapterShutdownIsNotAnError(t *testing.T) {
	var buf strings.Builder
	a := rocketmq.NewRlogAdapter(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), slog.LevelInfo)
	a.Error("fetch offset of mq from broker error", map[string]any{"underlayError": errors.New("service close is not running, please check"), "MessageQueue": "q1"})
	if buf.Len() != 0 {
		t.Fatalf("shutdown line logged at Info or above: %s", buf.String())
	}
	a.Error("fetch offset of mq from broker error", map[string]any{"underlayError": errors.New("connection refused"), "MessageQueue": "q2"})
	if !strings.Contains(buf.String(), "level=ERROR") {
		t.Fatalf("a real fetch failure is not an ERROR: %q", buf.String())
	}
}
