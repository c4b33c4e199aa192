package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/internal/testenv"
	"github.com/txkit/txkit/outbox"
)

func TestServeUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"all interfaces", []string{"serve", "-listen", ":8089"}, "not a loopback address"},
		{"public address", []string{"serve", "-listen", "0.0.0.0:8089"}, "add -listen-public"},
		{"bad listen", []string{"serve", "-listen", "nope"}, `-listen "nope"`},
		{"bad election", []string{"serve", "-election", "tcc"}, "want name=/zookeeper/path"},
		{"election without zk", []string{"serve", "-election", "tcc=/txkit/tcc"}, "give -zk or set TXKIT_ZK"},
		{"election without zk credentials", []string{"serve", "-zk", "127.0.0.1:1", "-lock", "l=/txkit/l"}, "set TXKIT_ZK_AUTH"},
		{"arguments", []string{"serve", "extra"}, "unexpected arguments"},
		{"no url", []string{"serve"}, "TXKIT_PG_URL"},
		{"no request timeout", []string{"serve", "-request-timeout", "0s"}, "-request-timeout 0s: must be positive"},
		{"no requests", []string{"serve", "-max-requests", "0"}, "-max-requests 0"},
		{"no connections", []string{"serve", "-max-conns", "0"}, "-max-conns 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := txkit(t, nil, tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr, exitUsage, tc.want)
			}
		})
	}
	dir := t.TempDir()
	loose := filepath.Join(dir, "tokens")
	if err := os.WriteFile(loose, []byte("oncall serve-token-0123456789\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fakePG := map[string]string{"TXKIT_PG_URL": "postgres://x@127.0.0.1:1/x"}
	code, _, stderr := txkit(t, fakePG, "serve", "-token-file", loose)
	if code != exitFail || !strings.Contains(stderr, "readable by others") {
		t.Fatalf("a token file readable by others: exit %d, %q", code, stderr)
	}
	// A token-file actor may not pass for the txkit command's actors ("cli:$USER").
	cli := filepath.Join(dir, "cli-tokens")
	if err := os.WriteFile(cli, []byte("cli:alice serve-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = txkit(t, fakePG, "serve", "-token-file", cli)
	if code != exitUsage || !strings.Contains(stderr, `token of "cli:alice": the prefix "cli:" is the txkit command's`) {
		t.Fatalf("a token-file actor named cli:alice: exit %d, %q", code, stderr)
	}
	code, _, stderr = txkit(t, fakePG, "serve", "-audit-retention", "1m")
	if code != exitUsage || !strings.Contains(stderr, "audit retention 1m0s: must be longer than the HMAC window") {
		t.Fatalf("-audit-retention 1m: exit %d, %q", code, stderr)
	}
}

// txkit serve, built and started as a process, answers the API (and the console) on loopback with
// the leader of a real ZooKeeper election, refuses a POST without its token, and stops on SIGTERM.
func TestIntegrationServe(t *testing.T) {
	s := testenv.PG(t)
	ctx := t.Context()
	ob, err := outbox.New(s.Pool, outbox.WithSchema(s.Name))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Enqueue(ctx, s.Pool, outbox.Message{Topic: "orders", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	path := testenv.ZKRoot(t) + "/leader"
	lead, err := testenv.Elector(t, path, "coordinator-1").Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lead.Resign(context.WithoutCancel(ctx)) })

	dir := t.TempDir()
	bin := filepath.Join(dir, "txkit")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tokens := filepath.Join(dir, "tokens")
	const token = "serve-token-0123456789"
	if err := os.WriteFile(tokens, []byte("# who may requeue\noncall "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "-listen", "127.0.0.1:0", "-schema", s.Name, "-token-file", tokens,
		"-zk", strings.Join(testenv.ZK(t), ","), "-election", "tcc recovery="+path)
	cmd.Env = append(os.Environ(), "TXKIT_PG_URL="+s.URL)
	cmd.Stderr = testenv.LogWriter(t, "txkit serve: ")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		exited <- cmd.Wait()
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	var base string
	select {
	case line := <-lines:
		var ok bool
		if base, ok = strings.CutPrefix(line, "txkit serve: listening on "); !ok {
			t.Fatalf("first line %q", line)
		}
	case err := <-exited:
		t.Fatalf("txkit serve exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("txkit serve does not say where it listens")
	}
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("listening on %s, not loopback", base)
	}

	get := func(method, p string, headers ...string) (int, string, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, base+p, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header.Get("Content-Type"), b
	}
	code, _, body := get("GET", "/api/overview")
	var ov admin.Overview
	if err := json.Unmarshal(body, &ov); code != 200 || err != nil {
		t.Fatalf("GET /api/overview: %d %s (%v)", code, body, err)
	}
	if len(ov.Leaders) != 1 || ov.Leaders[0].ID != "coordinator-1" || ov.Leaders[0].Token != lead.Token() ||
		ov.Outbox == nil || ov.Outbox.Pending != 1 {
		t.Fatalf("overview: %s", body)
	}
	requeue := "/api/outbox/dead/" + uuid.NewString() + "/requeue"
	if code, _, body := get("POST", requeue); code != 401 {
		t.Fatalf("POST without the token: %d %s", code, body)
	}
	if code, _, body := get("POST", requeue, "Authorization", "Bearer "+token); code != 404 {
		t.Fatalf("POST with the token, unknown message: %d %s", code, body)
	}
	if code, ct, body := get("GET", "/"); code != 200 || !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("GET / (the console): %d %s %.200s", code, ct, body)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopped = true
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("txkit serve after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatal("txkit serve does not stop on SIGTERM")
	}
}

// -metrics-url reads another process's /metrics page.
func TestURLGatherer(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "txkit_relay_published_total", Help: "h"})
	reg.MustRegister(c)
	c.Add(5)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	g := &urlGatherer{url: srv.URL, client: srv.Client()}
	fams, err := g.Gather()
	if err != nil || len(fams) != 1 || fams[0].GetName() != "txkit_relay_published_total" || fams[0].GetMetric()[0].GetCounter().GetValue() != 5 {
		t.Fatalf("Gather = %v, %v", fams, err)
	}
	g.url = srv.URL + "/nothing"
	srv.Config.Handler = http.NotFoundHandler()
	if _, err := g.Gather(); err == nil || !strings.Contains(err.Error(), "HTTP 404") {
		t.Fatalf("Gather of a 404 = %v", err)
	}
}
