package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/tcc"
)

// Why a transaction rolled back: a branch refused by its participant carries the refusal and the
// transaction the cause "refused"; one cancelled by the leader at its timeout (its starter gone)
// the cause "timeout" and no refusal; one rolled back by its starter after a failure no cause. The
// overview counts them apart; a finished transaction has no next retry; a revealed JSON payload
// comes back as JSON as well as base64.
func TestIntegrationAPIAbortCauses(t *testing.T) {
	s := testenv.PG(t)
	ctx := t.Context()
	c, err := tcc.New(s.Pool, coordinator.WithSchema(s.Name),
		coordinator.WithElector(zkenv.Elector(t, testenv.ZKRoot(t)+"/tcc", "leader-1")),
		coordinator.WithRecovery("@every 100ms", 16, 4), coordinator.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	wallet, err := c.Register("wallet", participant.ParticipantFunc(func(_ context.Context, r participant.Request) error {
		if r.Op == participant.OpTry && strings.Contains(string(r.Payload), "alice") {
			return fmt.Errorf("wallet: insufficient funds: balance 3.00 EUR, needs 90.00 EUR: %w", participant.ErrRefused)
		}
		if r.Op == participant.OpTry && strings.Contains(string(r.Payload), "bob") {
			return errors.New("wallet: database unavailable")
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	begin := func(timeout time.Duration, who string) (*tcc.Global, error) {
		g, err := c.Begin(ctx, coordinator.WithTimeout(timeout))
		if err != nil {
			t.Fatal(err)
		}
		return g, g.Try(ctx, tcc.Branch{Name: "wallet", Participant: wallet, Payload: json.RawMessage(`{"account":"` + who + `","amount":90}`)})
	}
	refused, err := begin(time.Hour, "alice")
	if !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("alice's try: %v, want a refusal", err)
	}
	if err := refused.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	failed, err := begin(time.Hour, "bob")
	if err == nil || errors.Is(err, participant.ErrRefused) {
		t.Fatalf("bob's try: %v, want a failure", err)
	}
	if err := failed.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	abandoned, err := begin(time.Second, "carol") // its starter goes away: the leader cancels it at its timeout
	if err != nil {
		t.Fatal(err)
	}

	a, err := admin.New(s.Pool, admin.WithSchema(s.Name), admin.WithTokens(map[string]string{"oncall": oncallToken}, nil),
		admin.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	runUntil(t, c.Run, func() bool {
		tx, err := a.Transaction(ctx, abandoned.GID())
		return err == nil && tx.Status == "cancelled"
	}, "the leader does not cancel the abandoned transaction at its timeout")

	cl := serve(t, a).with(bearer...)
	get := func(gid string) (admin.Transaction, map[string]any) {
		t.Helper()
		r := cl.do("GET", "/api/transactions/"+gid)
		cl.want(r, 200)
		var tx admin.Transaction
		r.decode(t, &tx)
		var raw map[string]any
		r.decode(t, &raw)
		return tx, raw
	}
	for _, tc := range []struct {
		name, gid, cause, refusal string
	}{
		{"refused", refused.GID(), admin.CauseRefused, "insufficient funds: balance 3.00 EUR"},
		{"timed out", abandoned.GID(), admin.CauseTimeout, ""},
		{"failed", failed.GID(), "", ""},
	} {
		tx, raw := get(tc.gid)
		if tx.Status != "cancelled" || tx.AbortCause != tc.cause || len(tx.Branches) != 1 {
			t.Errorf("%s: status %s, cause %q, %d branches; want cancelled, %q, 1", tc.name, tx.Status, tx.AbortCause, len(tx.Branches), tc.cause)
			continue
		}
		if b := tx.Branches[0]; (tc.refusal == "") != (b.Refusal == "") || !strings.Contains(b.Refusal, tc.refusal) {
			t.Errorf("%s: branch refusal %q, want %q", tc.name, b.Refusal, tc.refusal)
		}
		if _, ok := raw["next_retry_at"]; ok {
			t.Errorf("%s: a finished transaction has a next retry: %v", tc.name, raw["next_retry_at"])
		}
	}
	var ov admin.Overview
	r := cl.do("GET", "/api/overview")
	cl.want(r, 200)
	r.decode(t, &ov)
	if h := ov.LastHour; h.Aborted != 3 || h.Refused != 1 || h.TimedOut != 1 {
		t.Fatalf("overview last hour %+v, want 3 aborted: 1 refused, 1 timed out", h)
	}

	// Payloads stay redacted; a reveal (by an actor who may act) returns a JSON payload as JSON.
	tx, _ := get(refused.GID())
	if p := tx.Branches[0].Payload; p == nil || p.Value != nil || p.JSON != nil {
		t.Fatalf("branch payload before reveal: %+v", p)
	}
	r = cl.do("POST", "/api/transactions/"+refused.GID()+"/reveal")
	cl.want(r, 200)
	var shown struct {
		Branches []struct {
			Payload struct {
				Value string         `json:"value"`
				JSON  map[string]any `json:"json"`
			} `json:"payload"`
		} `json:"branches"`
	}
	r.decode(t, &shown)
	if len(shown.Branches) != 1 || shown.Branches[0].Payload.JSON["account"] != "alice" || shown.Branches[0].Payload.Value == "" {
		t.Fatalf("revealed payload %+v, want the JSON object (and its base64 value)", shown.Branches)
	}
}
