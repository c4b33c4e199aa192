package threepc_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/threepc/agent"
)

// wallet is an HTTP participant behind an agent.Agent, in a schema of its own: PreCommit
// freezes the amount, DoCommit spends it, abort unfreezes it.
type wallet struct {
	agent  *agent.Agent
	http   participant.HTTP
	schema *testenv.Schema
}

// signing returns a new secret and the client that signs with it, for the coordinators'
// coordinator.WithHTTPClient and the wallet.
func signing(t *testing.T) (string, *http.Client) {
	secret := rand.Text()
	client, err := participant.NewSigningClient(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	return secret, client
}

func (w *world) wallet(c *threepc.Coordinator, mode agent.Termination, secret string, client *http.Client, opts ...barrier.Option) *wallet {
	t := w.T
	s := testenv.PG(t)
	if _, err := s.Pool.Exec(t.Context(), `create table wallet (id text primary key, balance int not null, frozen int not null);
		insert into wallet values ('carol', 100, 0)`); err != nil {
		t.Fatal(err)
	}
	bar, err := barrier.New(s.Pool, append([]barrier.Option{barrier.WithSecrets(secret)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	fn := func(ctx context.Context, tx pgx.Tx, req participant.Request) error {
		var p struct{ Amount int }
		if err := json.Unmarshal(req.Payload, &p); err != nil {
			return fmt.Errorf("payload: %w", participant.ErrBadRequest)
		}
		sql := map[participant.Op]string{
			participant.OpCanCommit: `select 1 from wallet where id = 'carol' and balance - frozen >= $1 and $1 > 0`,
			participant.OpPreCommit: `update wallet set frozen = frozen + $1 where id = 'carol' and balance - frozen >= $1`,
			participant.OpDoCommit:  `update wallet set balance = balance - $1, frozen = frozen - $1 where id = 'carol'`,
			participant.OpAbort:     `update wallet set frozen = frozen - $1 where id = 'carol'`,
		}[req.Op]
		tag, err := tx.Exec(ctx, sql, p.Amount)
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("carol cannot pay %d: %w", p.Amount, participant.ErrRefused)
		}
		return err
	}
	a, err := agent.New(bar, c, fn, agent.WithTermination(mode, 0),
		agent.WithTimeout(participantTimeout, 100*time.Millisecond),
		agent.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	testenv.Run(t, a.Run)
	return &wallet{agent: a, http: participant.HTTP{URL: srv.URL, Client: client}, schema: s}
}

func (wl *wallet) balances(t *testing.T) (balance, frozen int) {
	t.Helper()
	if err := wl.schema.Pool.QueryRow(t.Context(), `select balance, frozen from wallet where id = 'carol'`).Scan(&balance, &frozen); err != nil {
		t.Fatal(err)
	}
	return balance, frozen
}

// pay enlists carol paying n through the wallet's HTTP agent and the east/west transfer of n.
func (wl *wallet) pay(g *threepc.Global, n int) error {
	if err := move(g, n); err != nil {
		return err
	}
	return g.EnlistParticipant(threepc.Branch{Name: "wallet", Participant: wl.http, Payload: []byte(fmt.Sprintf(`{"amount":%d}`, n))})
}

// An HTTP participant behind agent.Agent takes part in the three phases with two databases:
// committed everywhere; refused at CanCommit with nothing frozen; a docommit for a branch that was
// never pre-committed there gets a clear 400.
func TestIntegrationHTTPAgentCommit(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t)
	secret, client := signing(t)
	c := w.coordinator(coordinator.WithHTTPClient(client))
	wl := w.wallet(c, agent.TerminationConsultLog, secret, client)
	g, _ := c.Begin(ctx)
	if err := wl.pay(g, 30); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	w.WantBalances(startBalance-30, startBalance+30)
	if b, f := wl.balances(t); b != 70 || f != 0 {
		t.Fatalf("wallet balance %d frozen %d, want 70 and 0", b, f)
	}

	g, _ = c.Begin(ctx)
	if err := wl.pay(g, 500); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(ctx); !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Commit beyond carol's balance = %v, want a refusal at CanCommit", err)
	}
	if b, f := wl.balances(t); b != 70 || f != 0 {
		t.Fatalf("wallet balance %d frozen %d after the refusal", b, f)
	}

	err := wl.http.Do(ctx, participant.Request{GID: "never-seen", Branch: "wallet", Op: participant.OpDoCommit, Payload: []byte(`{"amount":1}`)})
	if err == nil || !strings.Contains(err.Error(), "HTTP 400") || !strings.Contains(err.Error(), "never pre-committed") {
		t.Fatalf("docommit of an unknown gid = %v, want a 400 saying it was never pre-committed", err)
	}
	w.NoPrepared()
}

// The starter stops after PreCommit (its hook never returns, as if it had died): the wallet's
// consult-log agent and the databases' agents all ask the log, the first records the abort, and
// everything is rolled back — nothing frozen, no money moved.
func TestIntegrationHTTPAgentStarterGoneConsultLog(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t)
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	secret, client := signing(t)
	starter := w.coordinator(coordinator.WithHTTPClient(client), core.WithPhaseHook(func(ctx context.Context, _ string, p core.Phase) error {
		if p == core.PhasePreCommitted {
			select {
			case <-stuck:
			case <-ctx.Done():
			}
		}
		return nil
	}))
	c := w.coordinator(coordinator.WithHTTPClient(client))
	wl := w.wallet(c, agent.TerminationConsultLog, secret, client)
	w.agents(c)
	g, _ := starter.Begin(ctx)
	if err := wl.pay(g, 25); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Commit(cctx) }()
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool { _, f := wl.balances(t); return f == 25 }, "the wallet did not pre-commit")
	testenv.Eventually(t, 15*time.Second, 50*time.Millisecond, func() bool {
		_, f := wl.balances(t)
		return f == 0 && len(w.Prepared(ctx)) == 0
	}, "the agents did not end the branches")
	w.WantBalances(startBalance, startBalance)
	if b, _ := wl.balances(t); b != 100 {
		t.Fatalf("wallet balance %d, want 100 (rolled back)", b)
	}
	if s := wl.agent.Stats(); s.Aborted != 1 || s.Fallbacks != 0 {
		t.Fatalf("wallet agent %+v, want one abort by the log", s)
	}
	cancel() // the starter wakes: its decision loses to the recorded abort
	if err := <-done; !errors.Is(err, threepc.ErrAborted) {
		t.Fatalf("the starter's Commit = %v, want ErrAborted", err)
	}
	w.NoPrepared()
}
