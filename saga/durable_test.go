package saga_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/saga"
)

// A saga's success is its decision, so it is durable before Submit returns: a starter that dies
// right after Submit said nil — before any write of its could ride on another — leaves a saga
// the leader, claiming it past its timeout, does not compensate. Were the success deferred like a
// finish (riding on the log's next write), it would die with the starter, and the leader would
// find the saga running past its timeout and compensate what the caller was told succeeded: the
// 2 commits of a saga at one client (its record before the first action, its success before the
// answer) are each needed (docs/coordinators.md, "Sagas: order, failures, timeout").
func TestIntegrationSuccessDurableBeforeSubmitReturns(t *testing.T) {
	e := newEnv(t)
	pool, err := pgxpool.New(t.Context(), e.Schema.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	starter := e.coordinatorOn(pool, coordinator.WithLease(200*time.Millisecond))
	gid, err := submit(t, starter, sequential(register(t, starter, "p", newParty(nil)), 3), coordinator.WithTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	pool.Close() // the starter dies: whatever it had not written is lost
	// The leader comes once the timeout has passed (by PostgreSQL's clock, which the claim uses).
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		var past bool
		if err := e.Schema.Pool.QueryRow(t.Context(), `select now() > timeout_at from txkit_saga_global where gid = $1`, gid).Scan(&past); err != nil {
			t.Fatal(err)
		}
		return past
	}, "the saga's timeout passes")

	leader := e.coordinator(coordinator.WithElector(e.Elector("leader")))
	p := newParty(nil)
	register(t, leader, "p", p)
	run(t, leader)
	var st coordinator.Status
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		st = status(t, leader, gid)
		return st.Final()
	}, "the saga ends")
	if st != saga.StatusSucceeded || len(p.Only(participant.OpCompensate)) != 0 {
		t.Fatalf("Submit returned nil, the saga ended %s (leader's calls %v), want succeeded", st, p.Log())
	}
}
