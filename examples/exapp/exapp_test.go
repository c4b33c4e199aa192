package exapp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Every example server bounds how long a client may take to send a request, read the answer and
// keep an idle connection (only ReadHeaderTimeout was set before).
func TestNewServerSetsEveryTimeout(t *testing.T) {
	srv := NewServer(http.NotFoundHandler())
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 {
		t.Fatalf("timeouts: header %v, read %v, write %v, idle %v; want all set", srv.ReadHeaderTimeout,
			srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
	}
}

// Fail answers a short message and a request id, never the error's text.
func TestFailHidesTheError(t *testing.T) {
	w := httptest.NewRecorder()
	Fail(w, nil, http.StatusInternalServerError, "registration failed", errTest("user=app host=db.internal"))
	if w.Code != http.StatusInternalServerError || strings.Contains(w.Body.String(), "db.internal") ||
		!strings.Contains(w.Body.String(), `"request_id"`) {
		t.Fatalf("answer %d %s", w.Code, w.Body)
	}
}

type errTest string

func (e errTest) Error() string { return string(e) }

// Metrics serves the registry it returns on GET /metrics, with the Go and process collectors.
func TestMetricsServesTheRegistry(t *testing.T) {
	mux := http.NewServeMux()
	reg := Metrics(mux)
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "txkit_exapp_test_total", Help: "A test counter."}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"txkit_exapp_test_total 0", "go_goroutines", "process_cpu_seconds_total"} {
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), name) {
			t.Fatalf("GET /metrics: %s, body without %q:\n%s", resp.Status, name, body)
		}
	}
}
