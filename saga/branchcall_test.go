package saga_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/saga"
)

// A step's own Timeout bounds each call of its action (here the first hangs and is given up at
// 200ms, not the coordinator's 30s, and the second attempt succeeds), and its participant.HTTP's
// Header is sent with every call; a negative Timeout is refused by Add.
func TestIntegrationStepTimeoutAndHeader(t *testing.T) {
	e := newEnv(t)
	// The first call hangs.
	srv := coretest.NewReceiver(t, func(_ participant.Op, n int) bool { return n == 0 })
	c := e.coordinator(coretest.CallTimeout(30*time.Second), saga.WithAttempts(2))
	start := time.Now()
	_, err := submit(t, c, []saga.Step{{Name: "pay", Timeout: 200 * time.Millisecond,
		Participant: participant.HTTP{URL: srv.URL, Header: http.Header{"X-Tenant": {"shop-1"}}}}})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Submit took %v: the hanging action was not bounded by the step's 200ms", d)
	}
	var tenants []string
	for _, call := range srv.Calls() {
		tenants = append(tenants, call.Header.Get("X-Tenant"))
	}
	if len(tenants) != 2 || tenants[0] != "shop-1" || tenants[1] != "shop-1" {
		t.Fatalf("X-Tenant of the calls %q, want shop-1 twice", tenants)
	}
	s, err := c.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add(saga.Step{Name: "pay", Participant: participant.HTTP{URL: srv.URL}, Timeout: -time.Second}); !errors.Is(err, coordinator.ErrInvalidBranch) {
		t.Fatalf("Add with a negative timeout = %v, want ErrInvalidBranch", err)
	}
}
