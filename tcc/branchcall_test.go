package tcc_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/tcc"
)

// A branch's own call timeout and headers are recorded with it: the starter's calls and the
// leader's recovery both send the headers, and both give up a hanging call at the branch's
// timeout (300ms), not the coordinators' call timeout (30s).
func TestIntegrationBranchTimeoutAndHeader(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	// The starter's confirm and the leader's first one hang.
	srv := coretest.NewReceiver(t, func(op participant.Op, n int) bool { return op == participant.OpConfirm && n < 2 })
	opts := []coordinator.Option{coretest.CallTimeout(30 * time.Second), coordinator.WithLease(100 * time.Millisecond)}
	starter := e.coordinator(opts...)
	branch := tcc.Branch{Name: "stock", Timeout: 300 * time.Millisecond,
		Participant: participant.HTTP{URL: srv.URL, Header: http.Header{"X-Tenant": {"shop-1"}}}}

	g, err := starter.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Try(ctx, branch); err != nil {
		t.Fatalf("Try: %v", err)
	}
	start := time.Now()
	if err := g.Commit(ctx); !errors.Is(err, coordinator.ErrIncomplete) {
		t.Fatalf("Commit = %v, want ErrIncomplete (the confirm hangs)", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Commit took %v: the confirm was not bounded by the branch's 300ms", d)
	}
	leader := e.coordinator(append(opts, coordinator.WithElector(e.Elector("leader")))...)
	run(t, leader)
	testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() bool {
		s, err := leader.Status(ctx, g.GID())
		return err == nil && s == tcc.StatusConfirmed
	}, "the leader did not confirm within 20s: its hanging call was not bounded by the branch's timeout")
	var calls []coretest.Call
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		calls = srv.Calls()
		return !slices.ContainsFunc(calls, func(c coretest.Call) bool { return c.Hangs && c.Hung == 0 })
	}, "the hanging calls to end")
	if len(calls) != 4 {
		t.Fatalf("calls %+v, want try, two hanging confirms, confirm", calls)
	}
	for _, c := range calls {
		if tenant := c.Header.Get("X-Tenant"); tenant != "shop-1" {
			t.Fatalf("%s sent X-Tenant %q, want shop-1 (calls %+v)", c.Op, tenant, calls)
		}
		if c.Hung > 5*time.Second {
			t.Fatalf("a %s hung %v, want about 300ms (calls %+v)", c.Op, c.Hung, calls)
		}
	}
}

// Headers that may carry a credential are not recorded (the log stores them in clear), nor
// those the wire protocol sets, nor a negative timeout: Try refuses the branch before anything is
// recorded or called.
func TestIntegrationBranchRefusesSecretHeader(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	c := e.coordinator()
	for _, b := range []tcc.Branch{
		{Name: "auth", Participant: participant.HTTP{URL: "http://127.0.0.1:1/", Header: http.Header{"Authorization": {"Bearer x"}}}},
		{Name: "key", Participant: participant.HTTP{URL: "http://127.0.0.1:1/", Header: http.Header{"X-Api-Key": {"k"}}}},
		{Name: "cookie", Participant: participant.HTTP{URL: "http://127.0.0.1:1/", Header: http.Header{"Cookie": {"s=1"}}}},
		{Name: "token", Participant: participant.HTTP{URL: "http://127.0.0.1:1/", Header: http.Header{"X-User-Token": {"t"}}}},
		{Name: "signing", Participant: participant.HTTP{URL: "http://127.0.0.1:1/", Header: http.Header{participant.HeaderSignature: {"v1=0"}}}},
		{Name: "type", Participant: participant.HTTP{URL: "http://127.0.0.1:1/", Header: http.Header{"Content-Type": {"text/plain"}}}},
		{Name: "crlf", Participant: participant.HTTP{URL: "http://127.0.0.1:1/", Header: http.Header{"X-Tenant": {"a\r\nX-Forged: 1"}}}},
		{Name: "negative", Participant: participant.HTTP{URL: "http://127.0.0.1:1/"}, Timeout: -time.Second},
	} {
		g, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Try(ctx, b); !errors.Is(err, coordinator.ErrInvalidBranch) {
			t.Fatalf("Try(%s) = %v, want ErrInvalidBranch", b.Name, err)
		}
		if _, err := c.Status(ctx, g.GID()); !errors.Is(err, coordinator.ErrNotFound) {
			t.Fatalf("%s: Status = %v, want ErrNotFound: nothing recorded", b.Name, err)
		}
	}
}

// Attach waits for an outcome only as long as its ctx: on a transaction still trying it returns
// the status it read last, with ErrIncomplete and the ctx's error.
func TestIntegrationAttachBoundedByCtx(t *testing.T) {
	e := newEnv(t)
	c := e.coordinator()
	if _, err := c.Begin(t.Context(), coordinator.WithGID("order-open")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	st, err := c.Attach(ctx, "order-open")
	if st != tcc.StatusTrying || !errors.Is(err, coordinator.ErrIncomplete) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Attach = %v, %v; want trying, ErrIncomplete and DeadlineExceeded", st, err)
	}
}
