package leader_test

import (
	"context"
	"testing"
	"time"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

// TestIntegrationPassFenceRoundTrips: a term's first pass of the fence, before its work, is one
// round trip (the begin, the check and the commit in one batch).
func TestIntegrationPassFenceRoundTrips(t *testing.T) {
	db := testenv.PG(t)
	pool, rt := testenv.CountingPool(t, db)
	f, err := fence.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	type sent struct{ queries, batches int64 }
	started := make(chan sent, 1)
	var tok lock.Token
	job, err := leader.New(electorOn(t, "pg", "leader", "a", db), pool, f, "job", func(ctx context.Context, tm *leader.Term) error {
		q, b := rt.Sent()
		tok = tm.Token()
		started <- sent{q, b}
		<-ctx.Done()
		return nil
	}, leader.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	q0, b0 := rt.Sent()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- job.Run(ctx) }()
	var s sent
	select {
	case s = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not lead within 30 s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if q, b := s.queries-q0, s.batches-b0; q != 0 || b != 1 {
		t.Fatalf("the fence pass before the work sent %d statements and %d batches; want 0 and 1", q, b)
	}
	es, err := f.Entries(t.Context(), pool, "job")
	if err != nil || len(es) != 1 || es[0].Token != tok {
		t.Fatalf("fence entries %v (%v); want the term's token %s recorded", es, err, tok)
	}
}
