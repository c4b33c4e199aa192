package tcc_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
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
	type call struct {
		op, tenant string
		hung       time.Duration // how long a hanging call lasted until the caller gave up
	}
	var (
		mu    sync.Mutex
		calls []call
	)
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req participant.Request
		_ = json.NewDecoder(r.Body).Decode(&req)
		_, _ = io.Copy(io.Discard, r.Body) // so that the server notices the client hanging up
		c := call{op: req.Op.String(), tenant: r.Header.Get("X-Tenant")}
		mu.Lock()
		confirms := 0
		for _, c := range calls {
			if c.op == "confirm" {
				confirms++
			}
		}
		mu.Unlock()
		if req.Op == participant.OpConfirm && confirms < 2 { // the starter's confirm and the leader's first hang
			start := time.Now()
			select {
			case <-r.Context().Done():
			case <-stop:
			}
			c.hung = time.Since(start)
		}
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // runs first
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
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 4 {
		t.Fatalf("calls %+v, want try, two hanging confirms, confirm", calls)
	}
	for _, c := range calls {
		if c.tenant != "shop-1" {
			t.Fatalf("%s sent X-Tenant %q, want shop-1 (calls %+v)", c.op, c.tenant, calls)
		}
		if c.hung > 5*time.Second {
			t.Fatalf("a %s hung %v, want about 300ms (calls %+v)", c.op, c.hung, calls)
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
