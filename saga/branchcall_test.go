package saga_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
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
	var (
		mu      sync.Mutex
		tenants []string
	)
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // so that the server notices the client hanging up
		mu.Lock()
		tenants = append(tenants, r.Header.Get("X-Tenant"))
		first := len(tenants) == 1
		mu.Unlock()
		if first {
			select {
			case <-r.Context().Done():
			case <-stop:
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // runs first
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
	mu.Lock()
	defer mu.Unlock()
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
