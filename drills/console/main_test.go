package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// TestIntegrationConsoleDemo runs the example as `make console` does: it prints the console's URL
// and token, the console refuses a reader without the token and shows the dead message to one with
// it, the API behind it requeues that message with the token, and SIGINT stops it with status 0
// after dropping its schema.
func TestIntegrationConsoleDemo(t *testing.T) {
	pg := testenv.PGURL(t)
	testenv.ZK(t)
	testenv.Namesrv(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "demo")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "-listen", addr, "-orders", "10")
	cmd.Env = append(os.Environ(), "TXKIT_HOME="+dir)
	cmd.Stderr = t.Output()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for range lines { // drained, so the reader ends and Wait returns
		}
	})

	url, token, schema := waitServing(t, lines, exited)
	get := func(path string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, strings.TrimSuffix(url, "/")+path, nil)
		req.Header.Set("Authorization", "Bearer "+token) // what the console's sign-in turns into a session
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	if resp, err := http.Get(url); err != nil || resp.Body.Close() != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET / without the token: %v, %v; want 401 (the sign-in form)", resp, err)
	}
	if page := get("/"); !strings.Contains(page, `id="leaders"`) || !strings.Contains(page, "tcc recovery") {
		t.Fatalf("overview lacks the leaders:\n%s", page)
	}
	if page := get("/outbox"); strings.Count(page, `class="dead"`) != 1 {
		t.Fatalf("outbox page does not list one dead message:\n%s", page)
	}
	var dead []struct{ ID string }
	if err := json.Unmarshal([]byte(get("/api/outbox/dead")), &dead); err != nil || len(dead) != 1 {
		t.Fatalf("GET /api/outbox/dead: %v, %v", dead, err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, strings.TrimSuffix(url, "/")+"/api/outbox/dead/"+dead[0].ID+"/requeue", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("requeue with the printed token: %d", resp.StatusCode)
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for range lines {
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("after SIGINT the demo exited with %v, want status 0", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the demo did not exit within 60s of SIGINT")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := exapp.Connect(ctx, pg, dbOrder, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, `select count(*) from pg_namespace where nspname = $1`, schema).Scan(&n); err != nil || n != 0 {
		t.Fatalf("schema %s still there after SIGINT (%d, %v)", schema, n, err)
	}
}

// waitServing reads the demo's lines until txkit serve listens, and returns the console's URL,
// the token and the run's schema it printed.
func waitServing(t *testing.T, lines <-chan string, exited <-chan error) (url, token, schema string) {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the demo exited before serving: %v", <-exited)
			}
			t.Log(l)
			if s, ok := strings.CutPrefix(l, "console: "); ok {
				url = s
			}
			if s, ok := strings.CutPrefix(l, "token: "); ok {
				token = strings.Fields(s)[0]
			}
			if _, s, ok := strings.Cut(l, "services up in schema "); ok {
				schema = strings.Fields(s)[0]
			}
			if strings.HasPrefix(l, "txkit serve: listening on") && url != "" && token != "" && schema != "" {
				return url, token, schema
			}
		case <-deadline:
			t.Fatal("the demo did not serve the console within 3 minutes")
		}
	}
}
