package saga_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/saga"
)

// With WithDeferredFinish, Submit returns once the compensations succeeded and Flush waits for
// the finish; a finish that is lost (its connection killed while it waited) leaves the saga
// compensating, and the leader finishes it after the lease, sending the compensations again
// (participants are idempotent), so that it ends compensated. A saga's success is its decision:
// Submit returns only once it is written.
func TestIntegrationDeferredFinish(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, e.Schema.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	c := e.coordinatorOn(pool, coordinator.WithDeferredFinish(true), coordinator.WithLease(200*time.Millisecond))

	// The finish's write blocks on the saga's row, locked by the last compensation (s1's), until
	// killed. s3's action is refused.
	var lock pgx.Tx
	var locking atomic.Bool
	h := register(t, c, "p", participant.ParticipantFunc(func(ctx context.Context, req participant.Request) error {
		switch {
		case req.Op == participant.OpAction && req.Branch == "s3":
			return participant.ErrRefused
		case req.Op == participant.OpCompensate && req.Branch == "s1" && locking.Load() && lock == nil:
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

	// A saga that succeeds: written before Submit returns.
	gid, err := submit(t, c, sequential(h, 2))
	if err != nil {
		t.Fatal(err)
	}
	var st string
	if err := e.Schema.Pool.QueryRow(ctx, `select status from txkit_saga_global where gid = $1`, gid).Scan(&st); err != nil {
		t.Fatal(err)
	}
	if st != saga.StatusSucceeded.String() {
		t.Fatalf("a succeeded saga's row right after Submit: %s, want succeeded", st)
	}
	// A compensated saga whose finish lands: Flush waits for it.
	gid, err = submit(t, c, sequential(h, 3))
	if !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Submit = %v, want ErrRefused", err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := status(t, c, gid); st != saga.StatusCompensated {
		t.Fatalf("after Flush: %s, want compensated", st)
	}

	// A compensated saga whose finish is lost.
	t.Cleanup(func() { // a failure below must not leave the row locked: the pools' Close would wait for ever
		if lock != nil {
			_ = lock.Rollback(context.Background())
		}
	})
	locking.Store(true)
	lost, err := submit(t, c, sequential(h, 3))
	if !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Submit = %v, want ErrRefused", err)
	}
	if lock == nil {
		t.Fatal("the last compensation did not lock the saga's row")
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
	if st := status(t, c, lost); st != saga.StatusCompensating {
		t.Fatalf("after a lost finish: %s, want compensating", st)
	}
	leader := e.coordinator(coordinator.WithElector(e.Elector("leader")))
	p := newParty(func(participant.Request) error { return nil })
	register(t, leader, "p", p)
	run(t, leader)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		return status(t, leader, lost) == saga.StatusCompensated
	}, "the leader finishes the saga")
	if got := p.Log(); len(got) == 0 || !slices.ContainsFunc(got, func(s string) bool { return s == "compensate/s1" }) {
		t.Fatalf("the leader's calls: %v, want the compensations again", got)
	}
	for _, call := range p.Log() {
		if strings.HasPrefix(call, "action/") {
			t.Fatalf("the leader's calls: %v: an action of a compensating saga", p.Log())
		}
	}
}
