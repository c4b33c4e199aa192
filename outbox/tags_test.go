package outbox_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/testkit/mqtest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
)

// Enqueue refuses tags a RocketMQ subscription cannot match or PostgreSQL cannot store, before
// touching the database.
func TestEnqueueRefusesBadTags(t *testing.T) {
	ob, err := outbox.New(&pgxpool.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tags := range []string{"a||b", " a", "a\t", "a\x01", "a\x00", "\xff", strings.Repeat("t", outbox.MaxTagsLen+1)} {
		_, err := ob.Enqueue(t.Context(), refuseDB{t}, outbox.Message{Topic: "t", Tags: tags})
		if !errors.Is(err, outbox.ErrInvalidMessage) {
			t.Errorf("tags %q: %v, want ErrInvalidMessage", tags, err)
		}
	}
}

// Migrate adds the tags column to an outbox table created before it existed, and running it again
// changes nothing; Enqueue then stores a message's tags with its row.
func TestIntegrationMigrateAddsTagsColumn(t *testing.T) {
	pg := testenv.PG(t)
	table := pgx.Identifier{pg.Name, "txkit_outbox"}.Sanitize()
	// The table as Migrate created it before Message.Tags.
	if _, err := pg.Pool.Exec(t.Context(), `create table `+table+` (
		id bigserial primary key, msg_id uuid not null unique, topic text not null, key text,
		body bytea not null, headers jsonb, status text not null default 'pending',
		attempts integer not null default 0, next_attempt_at timestamptz not null default now(),
		last_error text, created_at timestamptz not null default now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Pool.Exec(t.Context(), `insert into `+table+` (msg_id, topic, body) values (gen_random_uuid(), 'old', '')`); err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(pg.Pool, outbox.WithTable(pg.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := ob.Migrate(t.Context()); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	id, err := ob.Enqueue(t.Context(), pg.Pool, outbox.Message{Topic: "new", Tags: "created"})
	if err != nil {
		t.Fatal(err)
	}
	var tags *string
	if err := pg.Pool.QueryRow(t.Context(), `select tags from `+table+` where msg_id = $1`, id).Scan(&tags); err != nil {
		t.Fatal(err)
	}
	if tags == nil || *tags != "created" {
		t.Fatalf("stored tags %v, want created", tags)
	}
	if err := pg.Pool.QueryRow(t.Context(), `select tags from `+table+` where topic = 'old'`).Scan(&tags); err != nil || tags != nil {
		t.Fatalf("old row's tags %v (%v), want null", tags, err)
	}
}

// The relay sends each message with the tags it was enqueued with.
func TestIntegrationRelayCarriesTags(t *testing.T) {
	e := newRelayEnv(t)
	rec := &recorder{next: mqtest.Publisher(t)}
	want := map[string]string{"created": "created", "plain": ""}
	for body, tags := range want {
		if _, err := e.ob.Enqueue(t.Context(), e.pool, outbox.Message{Topic: e.topic, Key: body, Tags: tags, Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	run(t, e.relay(t, "relay-1", rec))
	e.waitEmpty(t, 30*time.Second)
	calls := rec.snapshot()
	if len(calls) != len(want) {
		t.Fatalf("%d publishes, want %d", len(calls), len(want))
	}
	for _, c := range calls {
		if c.err != nil || c.msg.Tags != want[string(c.msg.Body)] {
			t.Fatalf("published %q with tags %q (err %v), want tags %q", c.msg.Body, c.msg.Tags, c.err, want[string(c.msg.Body)])
		}
	}
}
