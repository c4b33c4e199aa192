package saga_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/saga"
)

// With WithDeferredFinish, Submit returns once the actions succeeded and Flush waits for the
// finish; a finish that is lost (its connection killed while it waited) leaves the saga running,
// and the leader finishes it after the lease, sending the actions again (participants are
// idempotent), so that it ends succeeded.
func TestIntegrationDeferredFinish(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, e.Schema.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	c := e.coordinatorOn(pool, coordinator.WithDeferredFinish(true), coordinator.WithLease(200*time.Millisecond))

	// The finish's write blocks on the saga's row, locked by the last action, until killed.
	var lock pgx.Tx
	h := register(t, c, "p", participant.ParticipantFunc(func(ctx context.Context, req participant.Request) error {
		if req.Op == participant.OpAction && string(req.Payload) == `"lock"` && lock == nil {
			tx, err := e.Schema.Pool.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `select 1 from txkit_saga_global where gid = $1 for update`, req.GID); err != nil {
				return err
			}
			lock = tx
		}
		return nil
	}))

	// A saga whose finish lands: Flush waits for it.
	gid, err := submit(t, c, sequential(h, 3))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := status(t, c, gid); st != saga.StatusSucceeded {
		t.Fatalf("after Flush: %s, want succeeded", st)
	}

	// A saga whose finish is lost.
	steps := sequential(h, 3)
	steps[2].Payload = []byte(`"lock"`)
	lost, err := submit(t, c, steps)
	if err != nil {
		t.Fatal(err)
	}
	if lock == nil {
		t.Fatal("the last action did not lock the saga's row")
	}
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		var n int
		err := e.Schema.Pool.QueryRow(ctx, `select count(*) from (select pg_terminate_backend(pid) from pg_stat_activity
			where datname = current_database() and wait_event_type = 'Lock' and query like '%txkit_saga_global%' and pid <> pg_backend_pid()) k`).Scan(&n)
		return err == nil && n > 0
	}, "the deferred finish waits on the row")
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if st := status(t, c, lost); st != saga.StatusRunning {
		t.Fatalf("after a lost finish: %s, want running", st)
	}
	leader := e.coordinator(coordinator.WithElector(e.Elector("leader")))
	p := newParty(func(participant.Request) error { return nil })
	register(t, leader, "p", p)
	run(t, leader)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		return status(t, leader, lost) == saga.StatusSucceeded
	}, "the leader finishes the saga")
	if got := p.log(); !slices.Equal(got, []string{"action/s1", "action/s2", "action/s3"}) {
		t.Fatalf("the leader's calls: %v, want the three actions again", got)
	}
}
