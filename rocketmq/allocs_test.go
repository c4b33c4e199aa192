package rocketmq_test

import (
	"context"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

// maxHandleAllocs bounds the allocations of one consumed message on the Consumer's side (decode,
// span, claim, the handler's one insert, commit, metrics): 71 measured, 76 when the span's
// attributes were built for a span that is not recorded and the id was formatted three times.
const maxHandleAllocs = 73

// The Consumer's own work per message stays within maxHandleAllocs allocations.
func TestIntegrationHandleAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	e := newEnv(t)
	c, err := rocketmq.NewConsumer(e.ns, "txkit-allocs", e.topic, e.pool, e.store,
		func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
			_, err := tx.Exec(ctx, `insert into applied (id) values ($1)`, msg.ID.String())
			return err
		}, rocketmq.WithLogger(e.log))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	newMsg := func() *primitive.MessageExt {
		m, err := rocketmq.Encode(outbox.Message{ID: uuid.New(), Topic: e.topic, Key: "k", Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		ext := &primitive.MessageExt{MsgId: "m"}
		ext.Topic, ext.Body = m.Topic, m.Body
		ext.WithProperties(m.GetProperties())
		return ext
	}
	handle := func() {
		if err := c.HandleForTest(ctx, newMsg()); err != nil {
			t.Fatal(err)
		}
	}
	handle() // connections and prepared statements
	makeAllocs := testing.AllocsPerRun(50, func() { newMsg() })
	n := testing.AllocsPerRun(50, handle) - makeAllocs // the Consumer's and the handler's own
	t.Logf("%.0f allocations per message", n)
	if n > maxHandleAllocs {
		t.Errorf("%.0f allocations per consumed message; want at most %d", n, maxHandleAllocs)
	}
	if got := c.Stats(); got.Applied != 52 {
		t.Errorf("stats %+v; want 52 applied", got)
	}
}
