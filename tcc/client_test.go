package tcc_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/tcc"
)

// signedServer starts a participant whose barrier verifies signatures with secret, and returns
// its URL and the ops its business code ran ("op/branch").
func signedServer(t *testing.T, e *env, secret string) (string, func() []string) {
	t.Helper()
	bar, err := barrier.New(e.Schema.Pool, barrier.WithTable(e.Schema.Name, ""), barrier.WithLogger(testenv.Logger(t)),
		barrier.WithSecrets(secret))
	if err != nil {
		t.Fatal(err)
	}
	if err := bar.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ran []string
	srv := httptest.NewServer(bar.Handler(func(_ context.Context, _ pgx.Tx, req participant.Request) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, req.Op.String()+"/"+req.Branch)
		return nil
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), ran...)
	}
}

// The signing client is set once, on the coordinator: a participant.HTTP without a Client uses
// it, so the try is signed as well as the confirm, and a barrier with secrets accepts both.
// Before, the try went unsigned (a nil Client signs nothing) and the barrier refused it.
func TestIntegrationSigningClientSetOnce(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	const secret = "tcc-test-secret-0123456789abcdef"
	url, ran := signedServer(t, e, secret)
	client, err := participant.NewSigningClient(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := e.coordinator(coordinator.WithHTTPClient(client))
	g, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Try(ctx, tcc.Branch{Name: "stock", Participant: participant.HTTP{URL: url}}); err != nil {
		t.Fatalf("Try: %v", err)
	}
	if err := g.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if got := ran(); len(got) != 2 || got[0] != "try/stock" || got[1] != "confirm/stock" {
		t.Fatalf("the business code ran %v, want [try/stock confirm/stock]", got)
	}
}

// A branch whose participant.HTTP has a Client other than the coordinator's is refused at Try,
// before anything is recorded or called: its try would be signed (or not) differently from its
// confirm or cancel, which the coordinator's client makes.
func TestIntegrationBranchClientDiffers(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	const secret = "tcc-test-secret-0123456789abcdef"
	url, ran := signedServer(t, e, secret)
	signed, err := participant.NewSigningClient(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := participant.NewSigningClient(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		opts  []coordinator.Option
		party participant.HTTP
	}{
		{"coordinator unsigned", nil, participant.HTTP{URL: url, Client: signed}},
		{"another client", []coordinator.Option{coordinator.WithHTTPClient(signed)}, participant.HTTP{URL: url, Client: other}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.coordinator(tc.opts...)
			g, err := c.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Try(ctx, tcc.Branch{Name: "stock", Participant: tc.party}); !errors.Is(err, coordinator.ErrInvalidBranch) {
				t.Fatalf("Try = %v, want ErrInvalidBranch", err)
			}
			if _, err := c.Status(ctx, g.GID()); !errors.Is(err, coordinator.ErrNotFound) {
				t.Fatalf("Status = %v, want ErrNotFound: nothing recorded", err)
			}
		})
	}
	// The same client on both is fine.
	c := e.coordinator(coordinator.WithHTTPClient(signed))
	g, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Try(ctx, tcc.Branch{Name: "stock", Participant: &participant.HTTP{URL: url, Client: signed}}); err != nil {
		t.Fatalf("Try with the coordinator's client: %v", err)
	}
	if err := g.Rollback(ctx); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	if got := ran(); len(got) != 2 || got[0] != "try/stock" || got[1] != "cancel/stock" {
		t.Fatalf("the business code ran %v, want [try/stock cancel/stock]", got)
	}
}
