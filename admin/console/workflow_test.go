package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/admin/console"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

// TestIntegrationConsoleWorkflow: a workflow's page shows its name, its steps' errors as the
// step's (not a participant's refusal), a durable sleep's end, and for a stopped one the resume
// button (no next retry); the list's kind filter offers workflow.
func TestIntegrationConsoleWorkflow(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	s := testenv.PG(t)
	ctx := t.Context()
	log, err := core.New(s.Pool, core.WithSchema(s.Name), core.WithTablePrefix("txkit_workflow_"))
	must(t, err, "core.New")
	must(t, log.Migrate(ctx), "Migrate")
	stopped, sleeping := "wf-stopped-"+hostileImg, "wf-sleeping"
	for _, gid := range []string{stopped, sleeping} {
		must(t, log.Create(ctx, gid, core.KindWorkflow, time.Hour, []byte(`{"name":"order`+strings.ReplaceAll(hostileScript, `"`, `\"`)+`","input":1}`)), "Create")
	}
	must(t, log.PutStep(ctx, lock.Token{}, stopped, core.StatusRunning, core.Branch{Name: "reserve", Seq: 0, Status: core.BranchSucceeded,
		Target: core.Target{Kind: core.TargetLocal, Ref: "step"}, Refusal: "out of stock"}), "PutStep")
	must(t, log.Park(ctx, lock.Token{}, stopped, core.StatusRunning, core.StatusStopped, -1, "the replay asks for step x"), "Park")
	until := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	must(t, log.PutStep(ctx, lock.Token{}, sleeping, core.StatusRunning, core.Branch{Name: "sleep", Seq: 0, Status: core.BranchPending,
		Target: core.Target{Kind: core.TargetLocal, Ref: "sleep"}, Payload: []byte(`{"until":` + strconv.FormatInt(until.UnixMilli(), 10) + `}`)}), "PutStep sleep")

	a, err := admin.New(s.Pool, admin.WithSchema(s.Name), admin.WithTokens(map[string]string{"oncall": "oncall-token-0123456789"}, nil))
	must(t, err, "admin.New")
	h, err := console.Handler(a)
	must(t, err, "console.Handler")
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
		must(t, err, "request")
		req.Header.Set("Authorization", "Bearer oncall-token-0123456789")
		resp, err := http.DefaultClient.Do(req)
		must(t, err, "GET %s", path)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		must(t, err, "read")
		if resp.StatusCode != 200 || strings.Contains(string(b), "<script>alert") || strings.Contains(string(b), "<img src=x") {
			t.Fatalf("GET %s: %d, or markup unescaped\n%s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	for path, want := range map[string][]string{
		"/transactions?kind=workflow": {`<option selected>workflow</option>`, "wf-sleeping"},
		"/transactions/" + url.PathEscape(stopped): {`id="tx-workflow">order&lt;script&gt;`, `id="tx-status">stopped`, "error of the step:",
			"out of stock", `data-action="resume"`, `data-url="/api/transactions/` + url.PathEscape(stopped) + `/resume"`},
		"/transactions/" + sleeping: {`id="tx-sleeping"`, until.UTC().Format("15:04:05")},
	} {
		body := get(path)
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s lacks %q\n%s", path, w, body)
			}
		}
		if strings.Contains(path, "stopped") && (strings.Contains(body, "next retry") || strings.Contains(body, "refused by the participant")) {
			t.Errorf("GET %s: a stopped workflow shows a next retry, or its step's error as a refusal", path)
		}
		if strings.Contains(path, sleeping) && strings.Contains(body, `data-action="resume"`) {
			t.Errorf("GET %s: a running workflow offers resume", path)
		}
	}
}
