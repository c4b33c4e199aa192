package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/notify"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/saga"
	"github.com/txkit/txkit/tcc"
)

// world is one test's data, made by the real components in a schema of its own: transactions of
// the tcc and saga coordinators (confirmed, cancelled, compensated, one left trying), outbox
// messages a relay whose publisher refuses made dead plus one pending, and a notification a
// refusing receiver made fail.
type world struct {
	s                            *testenv.Schema
	confirmed, cancelled, trying string // tcc gids
	compensated                  string // saga gid
	dead                         []uuid.UUID
	pending                      uuid.UUID
	failed                       uuid.UUID // notification
}

// refusingPublisher fails every publish, so that the relay makes each message dead.
type refusingPublisher struct{}

func (refusingPublisher) Publish(context.Context, outbox.Message) error {
	return errors.New("broker refused: topic not allowed")
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := t.Context()
	w := &world{s: testenv.PG(t)}
	root := testenv.ZKRoot(t)

	// TCC: one confirmed, one cancelled by its starter, one left trying.
	c, err := tcc.New(w.s.Pool, coordinator.WithSchema(w.s.Name))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	stock, err := c.Register("stock", participant.ParticipantFunc(func(context.Context, participant.Request) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	for _, end := range []string{"commit", "rollback", "none"} {
		g, err := c.Begin(ctx, coordinator.WithTimeout(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Try(ctx, tcc.Branch{Name: "stock", Participant: stock, Payload: json.RawMessage(`{"sku":"<b>x</b>"}`)}); err != nil {
			t.Fatal(err)
		}
		switch end {
		case "commit":
			err, w.confirmed = g.Commit(ctx), g.GID()
		case "rollback":
			err, w.cancelled = g.Rollback(ctx), g.GID()
		default:
			w.trying = g.GID()
		}
		if err != nil {
			t.Fatalf("%s: %v", end, err)
		}
	}

	// Saga: the account refuses, so the saga is compensated.
	sc, err := saga.New(w.s.Pool, coordinator.WithSchema(w.s.Name))
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	order, _ := sc.Register("order", participant.ParticipantFunc(func(context.Context, participant.Request) error { return nil }))
	account, _ := sc.Register("account", participant.ParticipantFunc(func(_ context.Context, r participant.Request) error {
		if r.Op == participant.OpAction {
			return participant.ErrRefused
		}
		return nil
	}))
	sg, err := sc.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []saga.Step{{Name: "order", Participant: order}, {Name: "account", Participant: account}} {
		if err := sg.Add(st); err != nil {
			t.Fatal(err)
		}
	}
	if err := sg.Submit(ctx); !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("saga Submit = %v, want a refusal", err)
	}
	w.compensated = sg.GID()

	// Outbox: a relay whose publisher refuses makes two messages dead; then, with the relay
	// stopped, a third stays pending.
	ob, err := outbox.New(w.s.Pool, outbox.WithTable(w.s.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		id, err := ob.Enqueue(ctx, w.s.Pool, outbox.Message{Topic: "orders", Key: "order-" + string(rune('a'+i)), Body: []byte(cardBody),
			Headers: map[string]string{"Authorization": authHeader}})
		if err != nil {
			t.Fatal(err)
		}
		w.dead = append(w.dead, id)
	}
	relay, err := outbox.NewRelay(ob, refusingPublisher{}, outbox.WithElector(zkenv.Elector(t, root+"/relay", "relay-1")),
		outbox.WithRetry(1, time.Second, 10*time.Minute), outbox.WithSchedule("@every 50ms", 128), outbox.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, relay.Run, func() bool {
		_, dead, err := ob.Backlog(ctx, w.s.Pool)
		return err == nil && dead == 2
	}, "the relay does not make both messages dead")
	if w.pending, err = ob.Enqueue(ctx, w.s.Pool, outbox.Message{Topic: "orders", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}

	// Notify: a receiver that answers 503 to everything; one attempt, then failed.
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}))
	t.Cleanup(refuse.Close)
	n, err := notify.New(w.s.Pool, []notify.Receiver{{Name: "shop", URL: refuse.URL, Secrets: []string{"admin-test-secret-0123456789"}}},
		notify.WithTable(w.s.Name, ""), notify.WithPlainHTTP(), notify.WithSchedule([]time.Duration{}, 0),
		notify.WithTick("@every 50ms", 100), notify.WithElector(zkenv.Elector(t, root+"/notify", "notifier-1")),
		notify.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, w.s.Pool, func(tx pgx.Tx) error {
		w.failed, err = n.Enqueue(ctx, tx, notify.Notification{Receiver: "shop", Key: "order-1", Payload: json.RawMessage(`{"paid":true}`)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, n.Run, func() bool {
		r, err := n.Get(ctx, w.failed)
		return err == nil && r.Status == notify.StatusFailed
	}, "the notification does not fail")
	return w
}

// runUntil runs run (a Run(ctx) method) until cond holds, then stops it and waits for it.
func runUntil(t *testing.T, run func(context.Context) error, cond func() bool, msg string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, cond, msg)
}

// newAdmin returns an Admin on w's schema, migrated, with the token "oncall-token-0123456789" of
// the actor "oncall".
func (w *world) newAdmin(t *testing.T, opts ...admin.Option) *admin.Admin {
	t.Helper()
	a, err := admin.New(w.s.Pool, append([]admin.Option{admin.WithSchema(w.s.Name),
		admin.WithTokens(map[string]string{"oncall": oncallToken}, nil), admin.WithLogger(testenv.Logger(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return a
}

const oncallToken = "oncall-token-0123456789"

// What the dead messages carry: a card number in the body, a credential in a header.
const (
	cardBody   = `{"card":"4111111111111111"}`
	authHeader = "Bearer shop-api-key-0123456789"
)
