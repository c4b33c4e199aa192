package outbox

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/testenv"
)

// TestIntegrationFailStatement runs the fail statement in PostgreSQL and checks it against
// backoffBounds: the delay after the n-th failure, the attempt count, the error, and the move to
// dead at the attempt limit.
func TestIntegrationFailStatement(t *testing.T) {
	pg := testenv.PG(t)
	ctx := t.Context()
	ob, err := New(WithSchema(pg.Name))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx, pg.Pool); err != nil {
		t.Fatal(err)
	}
	msgID, err := ob.Enqueue(ctx, pg.Pool, Message{Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := pg.Pool.QueryRow(ctx, "select id from "+ob.table+" where msg_id = $1", msgID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	const (
		base, cap = 250 * time.Millisecond, 90 * time.Second
		max       = 64
	)
	tests := []struct {
		name     string
		before   int // attempts before this failure
		wantDead bool
	}{
		{"first failure", 0, false},
		{"second failure", 1, false},
		{"eighth failure", 7, false},
		{"past the cap", 20, false},
		{"exponent clamped", 62, false},
		{"last allowed failure", max - 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lo, hi := backoffBounds(base, cap, tc.before+1)
			for range 20 { // the jitter is random: sample it
				err := pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "update "+ob.table+" set status = 'pending', attempts = $2 where id = $1", id, tc.before); err != nil {
						return err
					}
					var (
						gotID uuid.UUID
						dead  bool
					)
					if err := tx.QueryRow(ctx, ob.q.fail, []int64{id}, []string{"boom"}, max, base.Seconds(), cap.Seconds()).
						Scan(&gotID, &dead); err != nil {
						return err
					}
					var (
						delay    time.Duration
						attempts int
						lastErr  string
					)
					if err := tx.QueryRow(ctx, "select next_attempt_at - now(), attempts, last_error from "+ob.table+" where id = $1", id).
						Scan(&delay, &attempts, &lastErr); err != nil {
						return err
					}
					if gotID != msgID || dead != tc.wantDead || attempts != tc.before+1 || lastErr != "boom" {
						t.Errorf("returned %v dead=%v; row attempts %d error %q", gotID, dead, attempts, lastErr)
					}
					if delay < lo-time.Microsecond || delay > hi+time.Microsecond {
						t.Errorf("delay %v after failure %d, want within [%v, %v]", delay, tc.before+1, lo, hi)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestIntegrationDueStatement checks the per-key order condition of the due statement: a row
// waits while an earlier pending row of its key waits out a backoff; due earlier rows, dead rows
// and rows without a key hold nothing back; rows come in id order, at most the limit.
func TestIntegrationDueStatement(t *testing.T) {
	pg := testenv.PG(t)
	ctx := t.Context()
	ob, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx, pg.Pool); err != nil {
		t.Fatal(err)
	}
	enq := func(key, name string) uuid.UUID {
		id, err := ob.Enqueue(ctx, pg.Pool, Message{Topic: "t", Key: key, Body: []byte(name)})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	set := func(id uuid.UUID, assignment string) {
		if _, err := pg.Pool.Exec(ctx, "update "+ob.table+" set "+assignment+" where msg_id = $1", id); err != nil {
			t.Fatal(err)
		}
	}
	due := func(limit int) []string {
		rows, err := pg.Pool.Query(ctx, ob.q.due, limit)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		var prev int64
		for rows.Next() {
			var x row
			if err := rows.Scan(&x.id, &x.msg.ID, &x.msg.Topic, &x.msg.Key, &x.msg.Body, &x.msg.Headers, &x.attempts); err != nil {
				t.Fatal(err)
			}
			if x.id <= prev {
				t.Fatalf("row %d after %d: not in id order", x.id, prev)
			}
			prev = x.id
			names = append(names, string(x.msg.Body))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return names
	}
	k1a := enq("k1", "k1:1")
	enq("k1", "k1:2")
	enq("k2", "k2:1")
	enq("", "-:1")
	enq("k1", "k1:3")
	k3a := enq("k3", "k3:1")
	enq("k3", "k3:2")

	check := func(step string, limit int, want ...string) {
		t.Helper()
		if got := due(limit); !slices.Equal(got, want) {
			t.Fatalf("%s: due(%d) = %q, want %q", step, limit, got, want)
		}
	}
	check("all due", 100, "k1:1", "k1:2", "k2:1", "-:1", "k1:3", "k3:1", "k3:2")
	check("limit", 3, "k1:1", "k1:2", "k2:1")

	set(k1a, "attempts = 1, next_attempt_at = now() + interval '1 hour'")
	check("k1:1 backing off", 100, "k2:1", "-:1", "k3:1", "k3:2")

	set(k3a, "status = 'dead'")
	check("k3:1 dead", 100, "k2:1", "-:1", "k3:2")

	set(k1a, "next_attempt_at = now()")
	check("k1:1 due again", 100, "k1:1", "k1:2", "k2:1", "-:1", "k1:3", "k3:2")
}
