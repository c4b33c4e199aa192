package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/rocketmq"
)

func TestMain(m *testing.M) {
	// What main does with the client's process-wide hooks, quieter: errors only.
	rocketmq.SetClientLogger(slog.New(slog.NewTextHandler(os.Stderr, nil)), slog.LevelError)
	testenv.VerifyNoLeaks(m)
}

// TestIntegrationEmbed runs the example's run end to end against the real servers, in a schema,
// ZooKeeper path and topic of its own: the registration's message goes through the outbox, the
// relay and RocketMQ to the consumer, one saga succeeds and the refused one is compensated.
func TestIntegrationEmbed(t *testing.T) {
	pg := testenv.PG(t)
	c := config{
		PG:       testenv.PGURL(t),
		ZK:       testenv.ZK(t),
		Namesrv:  testenv.Namesrv(t),
		Broker:   testenv.Broker(t),
		Schema:   pg.Name,
		Topic:    testenv.Topic(t),
		Election: testenv.ZKRoot(t),
	}
	c.ZKUser, c.ZKPass, _ = strings.Cut(testenv.Lookup(t, testenv.EnvZKAuth), ":")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := run(ctx, c, testenv.Logger(t))
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if res.Accepted != nil {
		t.Errorf("accepted saga: %v, want nil", res.Accepted)
	}
	if !errors.Is(res.Refused, participant.ErrRefused) {
		t.Errorf("refused saga: %v, want participant.ErrRefused", res.Refused)
	}
	if res.Credits != 1 || res.Compensated != 0 {
		t.Errorf("wallet: %d credits, %d compensations run by its code; want 1 and 0", res.Credits, res.Compensated)
	}

	// What run reported is what the tables hold: the message was applied once, both sagas ended.
	bg := context.Background()
	var welcomes, outboxLeft int
	if err := pg.Pool.QueryRow(bg, `select count(*) from welcomes where user_id = $1`, res.User).Scan(&welcomes); err != nil {
		t.Fatal(err)
	}
	if err := pg.Pool.QueryRow(bg, `select count(*) from txkit_outbox`).Scan(&outboxLeft); err != nil {
		t.Fatal(err)
	}
	if welcomes != 1 || outboxLeft != 0 {
		t.Errorf("welcomes for %s: %d, outbox rows left: %d; want 1 and 0", res.User, welcomes, outboxLeft)
	}
	rows, err := pg.Pool.Query(bg, `select status from txkit_saga_global order by created_at`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "succeeded" || got[1] != "compensated" {
		t.Errorf("sagas in the log: %v, want [succeeded compensated]", got)
	}
	// The refused step itself was compensated: the coordinator called its compensation, which the
	// barrier answered as an empty rollback (Compensated above is 0).
	var step string
	if err := pg.Pool.QueryRow(bg, `select b.status from txkit_saga_branch b join txkit_saga_global g using (gid)
		where g.status = 'compensated'`).Scan(&step); err != nil {
		t.Fatal(err)
	}
	if step != "compensated" {
		t.Errorf("the refused step is %s, want compensated", step)
	}
}
