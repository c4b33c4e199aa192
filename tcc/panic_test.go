package tcc_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/tcc"
)

// A panicking in-process participant crashes nothing. The starter's Try and Commit return an
// error naming the panic (an unknown outcome, not a refusal). The leader, running in this test
// process, calls the panicking confirm again and again: it keeps leading, the branch's last error
// records the panic, the attempts are backed off (the delay before the next one grows), and the
// transaction is confirmed once the participant stops panicking. (Before the recover, the test
// binary crashed.)
func TestIntegrationPanickingParticipant(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	el := e.Elector("leader")
	c := e.coordinator(coordinator.WithElector(el), coordinator.WithRetry(10*time.Second, 100*time.Millisecond, 10*time.Second),
		coordinator.WithRecovery("@every 20ms", 100, 16))
	var panics atomic.Bool
	panics.Store(true)
	p := newParty(func(req participant.Request) error {
		if panics.Load() && (req.Op == participant.OpConfirm || req.Op == participant.OpTry && req.Branch == "try-panics") {
			panic("boom in " + req.Op.String())
		}
		return nil
	})
	h := register(t, c, "p", p)
	run(t, c)

	// The starter's path: a try that panics.
	g1, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = g1.Try(ctx, tcc.Branch{Name: "try-panics", Participant: h})
	var be *coordinator.BranchError
	if !errors.As(err, &be) || be.Op != participant.OpTry || !strings.Contains(err.Error(), "panic: boom in try") ||
		errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Try = %v, want a *BranchError naming the panic, not a refusal", err)
	}
	if err := g1.Rollback(ctx); err != nil {
		t.Fatalf("Rollback after the panicking try: %v", err)
	}
	if st := status(t, c, g1.GID()); st != tcc.StatusCancelled {
		t.Fatalf("status %s, want cancelled", st)
	}

	// The starter's path: a confirm that panics.
	g, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Try(ctx, tcc.Branch{Name: "b", Participant: h}); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(ctx); !errors.Is(err, coordinator.ErrIncomplete) || !strings.Contains(err.Error(), "panic: boom in confirm") {
		t.Fatalf("Commit = %v, want ErrIncomplete naming the panic", err)
	}

	// The leader's recovery.
	l, err := core.New(e.Schema.Pool, core.WithSchema(e.Schema.Name))
	if err != nil {
		t.Fatal(err)
	}
	get := func() *core.Transaction { return coretest.Get(t, l, g.GID()) }
	delays := coretest.WatchBackoff(t, l.Lease(), 4, get, func(tx *core.Transaction) bool {
		b := tx.Branches[0]
		return p.count("confirm") >= 4 && b.Attempts >= 4 && b.LastError == "panic: boom in confirm"
	})
	t.Logf("backoff delays by attempt: %v", delays)
	coretest.Leads(t, el, "leader")
	if tx := get(); tx.Status != tcc.StatusConfirming || !strings.Contains(tx.LastError, "panic: boom in confirm") {
		t.Fatalf("transaction %s, last error %q", tx.Status, tx.LastError)
	}
	panics.Store(false)
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		return status(t, c, g.GID()) == tcc.StatusConfirmed
	}, "the transaction is confirmed once the participant stops panicking")
}
