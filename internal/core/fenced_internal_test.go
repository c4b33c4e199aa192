package core

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

// noDriver drives nothing: the test calls the recoverer's claim itself.
type noDriver struct{}

func (noDriver) Drive(context.Context, lock.Token, *Transaction) error { return nil }

// TestIntegrationFencedWritesRoundTrips: a leader's fenced writes go out with their fence check
// in one round trip each — a partial Record, a Park, a finishing Record (begin, check, statements
// and commit in one batch) — and the recovery claim in two (begin, check and claim; the branches
// and the commit). Refused by the fence, a Record and a claim commit nothing and return the
// fence's refusal with the recorded token.
func TestIntegrationFencedWritesRoundTrips(t *testing.T) {
	s := testenv.PG(t)
	pool, rt := testenv.CountingPool(t, s)
	ctx := t.Context()
	l, err := New(pool, WithSchema(s.Name))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := NewRecoverer(l, &lock.Election{}, map[Kind]Driver{KindTCC: noDriver{}})
	if err != nil {
		t.Fatal(err)
	}
	tok, newer := lock.Token{Epoch: 1, Seq: 1}, lock.Token{Epoch: 1, Seq: 2}
	global := pgx.Identifier{s.Name, "txkit_global"}.Sanitize()
	cancelling := func(gid string) {
		t.Helper()
		if err := l.Create(ctx, gid, KindTCC, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
		b := Branch{Name: "a", Target: Target{Kind: TargetHTTP, Ref: "http://127.0.0.1:1/a"}}
		if err := l.AddBranch(ctx, gid, StatusTrying, b); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Decide(ctx, gid, StatusTrying, StatusCancelling); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `update `+global+` set next_retry_at = now() - interval '1 s' where gid = $1`, gid); err != nil {
			t.Fatal(err)
		}
	}
	sent := func(what string, want int64, fn func() error) {
		t.Helper()
		var err error
		q, b := rt.During(func() { err = fn() })
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if q+b != want || (want == 1 && b != 1) {
			t.Fatalf("%s sent %d statements and %d batches; want %d round trips", what, q, b, want)
		}
	}
	cancelling("g1")
	var claimed []*Transaction
	sent("claim", 2, func() (err error) { claimed, err = r.claim(ctx, tok, 0); return err })
	if len(claimed) != 1 || claimed[0].GID != "g1" || len(claimed[0].Branches) != 1 {
		t.Fatalf("claimed %+v; want g1 with its branch", claimed)
	}
	sent("partial record", 1, func() error {
		return l.Record(ctx, tok, Progress{GID: "g1", From: StatusCancelling, Failed: []BranchFailure{{Branch: "a", Err: errors.New("down")}}})
	})
	sent("park", 1, func() error { return l.Park(ctx, tok, "g1", StatusCancelling, StatusCancelling, 0, "later") })
	sent("finish", 1, func() error {
		return l.Record(ctx, tok, Progress{GID: "g1", From: StatusCancelling, Done: []string{"a"}, Next: StatusCancelled})
	})

	// A newer leader writes; the old one's record and claim are refused and commit nothing.
	cancelling("g2")
	if err := l.Record(ctx, newer, Progress{GID: "g2", From: StatusCancelling, Renew: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `update `+global+` set next_retry_at = now() - interval '1 s' where gid = 'g2'`); err != nil {
		t.Fatal(err)
	}
	before, err := l.Get(ctx, "g2")
	if err != nil {
		t.Fatal(err)
	}
	refused := func(what string, err error) {
		t.Helper()
		var fe *fence.FencedError
		if !errors.Is(err, lock.ErrFenced) || !errors.As(err, &fe) || fe.Current != newer || fe.Token != tok {
			t.Fatalf("%s by the deposed leader: %v; want a FencedError with %s below %s", what, err, tok, newer)
		}
	}
	refused("record", l.Record(ctx, tok, Progress{GID: "g2", From: StatusCancelling, Done: []string{"a"}, Next: StatusCancelled}))
	refused("park", l.Park(ctx, tok, "g2", StatusCancelling, StatusCancelling, time.Hour, "later"))
	claimed, err = r.claim(ctx, tok, 0)
	refused("claim", err)
	after, err := l.Get(ctx, "g2")
	if err != nil {
		t.Fatal(err)
	}
	if after.Status != StatusCancelling || after.Attempts != before.Attempts || !after.NextRetryAt.Equal(before.NextRetryAt) ||
		!after.UpdatedAt.Equal(before.UpdatedAt) || after.Branches[0].Status != BranchPending || claimed != nil {
		t.Fatalf("the refused writes changed the log: before %+v, after %+v (claimed %v)", before, after, claimed)
	}
}
