package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/twopc"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// TestIntegrationAnswersCarryNoInternalDetail: the bank's PostgreSQL refuses its connections (a
// role that does not exist: the driver's message names the role, the database, the host and the
// port). No answer carries any of that, nor twopc's or the driver's text: the failures (5xx) are a
// short message with a request id that names the log line holding the detail, and the refusal of
// a bad gid (4xx) describes the gid only.
func TestIntegrationAnswersCarryNoInternalDetail(t *testing.T) {
	for _, protocol := range []string{"2pc", "3pc"} {
		t.Run(protocol, func(t *testing.T) { answersCarryNoInternalDetail(t, protocol) })
	}
}

func answersCarryNoInternalDetail(t *testing.T, protocol string) {
	u, err := url.Parse(testenv.PGURL(t))
	if err != nil {
		t.Fatal(err)
	}
	const role = "txkit_no_such_role"
	u.User = url.User(role)
	pool := func() *pgxpool.Pool {
		p, err := pgxpool.New(t.Context(), u.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	logPool, east, west := pool(), pool(), pool()
	var logs coretest.LogBuffer
	s := &service{c: config{timeout: 6 * time.Second, callTimeout: 2 * time.Second, protocol: protocol}, log: logs.Logger(),
		east: east, west: west}
	var coord coordinatorRun
	if protocol == "3pc" {
		s.three, err = threepc.New(logPool, coordinator.WithSchema("bank_answers"), coordinator.WithDefaultTimeout(s.c.timeout),
			threepc.WithTimeouts(500*time.Millisecond, 2*time.Second, 3*time.Second))
		coord = s.three
	} else {
		s.tpc, err = twopc.New(logPool, coordinator.WithSchema("bank_answers"))
		coord = s.tpc
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = coord.Close() })
	for name, p := range map[string]*pgxpool.Pool{"east": east, "west": west} {
		if err := coord.RegisterDB(name, p); err != nil {
			t.Fatal(err)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /transfers", s.transfer)
	mux.HandleFunc("GET /transfers/{gid}", s.get)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	detail := []string{role, u.Hostname(), u.Port(), strings.TrimPrefix(u.Path, "/"), "SQLSTATE", "twopc:", "threepc:", "failed to connect", "bank_answers"}
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
	}{
		{"transfer with the databases down", http.MethodPost, "/transfers", `{"from":"alice","to":"bob","amount":1}`, http.StatusServiceUnavailable},
		{"status with the log down", http.MethodGet, "/transfers/some-gid", "", http.StatusInternalServerError},
		{"gid with a backslash", http.MethodPost, "/transfers", `{"gid":"\\'; drop table accounts; --","from":"alice","to":"bob","amount":1}`, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d %s", resp.StatusCode, body)
			if resp.StatusCode != tc.code {
				t.Errorf("code %d, want %d", resp.StatusCode, tc.code)
			}
			for _, d := range detail {
				if d != "" && strings.Contains(string(body), d) {
					t.Errorf("the answer carries %q: %s", d, body)
				}
			}
			var a map[string]any
			if err := json.Unmarshal(body, &a); err != nil {
				t.Fatalf("answer %s: %v", body, err)
			}
			if tc.code < 500 {
				return
			}
			id, _ := a["request_id"].(string)
			if id == "" || a["error"] == "" {
				t.Fatalf("a %d answer without a message and a request id: %s", resp.StatusCode, body)
			}
			if line := logLine(logs.String(), id); !strings.Contains(line, role) {
				t.Errorf("the log line of request id %s does not hold the error: %q", id, line)
			}
		})
	}
}

// logLine returns the line of logs naming request id id.
func logLine(logs, id string) string {
	for line := range strings.Lines(logs) {
		if strings.Contains(line, "request_id="+id) {
			return line
		}
	}
	return ""
}
