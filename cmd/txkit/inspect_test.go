package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock/pglock"
	"github.com/txkit/txkit/lock/redislock"
)

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    target
		wantErr string
	}{
		{in: "/txkit/tcc", want: target{path: "/txkit/tcc", backend: backendZK}},
		{in: "pg:/txkit/tcc", want: target{path: "txkit/tcc", backend: backendPG}},
		{in: "pg:shop/txkit/tcc", want: target{path: "txkit/tcc", backend: backendPG, where: "shop"}},
		{in: "redis:127.0.0.1:6379/txkit/relay", want: target{path: "txkit/relay", backend: backendRedis, where: "127.0.0.1:6379"}},
		{in: "redlock:a:1,b:2,c:3/jobs", want: target{path: "jobs", backend: backendRedlock, where: "a:1,b:2,c:3"}},
		{in: "tcc", wantErr: "want name=/zk/path"},
		{in: "etcd:x/y", wantErr: "want name=/zk/path"},
		{in: "pg:shop", wantErr: "no lock name"},
		{in: "pg:shop/", wantErr: "no lock name"},
		{in: "redis:/x", wantErr: "no address"},
		{in: "redis:a:1,b:2/x", wantErr: "redlock:"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseTarget(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseTarget(%q) = %+v, %v; want an error with %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseTarget(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			if got.spec() != tc.in {
				t.Fatalf("spec() = %q, want %q", got.spec(), tc.in)
			}
		})
	}
}

// lineWriter passes the lines run writes to stdout to the test (dropping those nobody waits for).
type lineWriter struct{ lines chan string }

func (w lineWriter) Write(p []byte) (int, error) {
	for l := range strings.SplitSeq(strings.TrimRight(string(p), "\n"), "\n") {
		select {
		case w.lines <- l:
		default:
		}
	}
	return len(p), nil
}

// txkit serve shows the leaders of a PostgreSQL lease election (pglock) and of a Redis election
// (redislock), and the holder of a pglock lock, named with -election pg:... and redis:....
func TestIntegrationServePGAndRedisElections(t *testing.T) {
	s := testenv.PG(t)
	ctx := t.Context()
	pc, err := pglock.New(s.Pool, pglock.WithSchema(s.Name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	if err := pc.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	el, err := pc.NewElector("txkit/tcc/"+s.Name, "coordinator-pg")
	if err != nil {
		t.Fatal(err)
	}
	lead, err := el.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lead.Resign(context.WithoutCancel(ctx)) })
	m, err := pc.NewMutex("jobs/"+s.Name, pglock.WithData("worker-7"))
	if err != nil {
		t.Fatal(err)
	}
	held, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Unlock(context.WithoutCancel(ctx)) })

	addr := testenv.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	rc, err := redislock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.Close() })
	rname := "txkit/relay/" + uuid.NewString()
	rel, err := rc.NewElector(rname, "relay-redis")
	if err != nil {
		t.Fatal(err)
	}
	rlead, err := rel.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rlead.Resign(context.WithoutCancel(ctx)) })

	sctx, stop := context.WithCancel(ctx)
	out := lineWriter{lines: make(chan string, 16)}
	exited := make(chan int, 1)
	go func() {
		exited <- run(sctx, []string{"serve", "-listen", "127.0.0.1:0", "-schema", s.Name,
			"-election", "tcc=pg:/txkit/tcc/" + s.Name, "-election", "relay=redis:" + addr + "/" + rname,
			"-lock", "jobs=pg:" + s.Name + "/jobs/" + s.Name},
			func(k string) string { return map[string]string{"TXKIT_PG_URL": s.URL}[k] }, out, testenv.LogWriter(t, "serve: "))
	}()
	t.Cleanup(func() {
		stop()
		if code := <-exited; code != exitOK {
			t.Errorf("serve exited %d", code)
		}
	})
	var base, token string
	for base == "" || token == "" {
		select {
		case l := <-out.lines:
			if v, ok := strings.CutPrefix(l, "txkit serve: listening on "); ok {
				base = v
			}
			if v, ok := strings.CutPrefix(l, "txkit serve: read token (this run only; no -token-file): "); ok {
				token = v
			}
		case code := <-exited:
			exited <- code
			t.Fatalf("serve exited %d", code)
		case <-time.After(30 * time.Second):
			t.Fatal("serve does not say where it listens")
		}
	}
	get := func(path string, v any) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || json.Unmarshal(body, v) != nil {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
	}
	var leaders []admin.Leader
	get("/api/leaders", &leaders)
	if len(leaders) != 2 || leaders[0].Election != "tcc" || leaders[0].ID != "coordinator-pg" || leaders[0].Token != lead.Token() ||
		leaders[0].Path != "pg:/txkit/tcc/"+s.Name || leaders[1].Election != "relay" || leaders[1].ID != "relay-redis" ||
		leaders[1].Token != rlead.Token() || leaders[1].Error != "" {
		t.Fatalf("leaders: %+v", leaders)
	}
	var locks []admin.LockState
	get("/api/locks", &locks)
	if len(locks) != 1 || locks[0].Holder == nil || locks[0].Holder.ID != "worker-7" || locks[0].Holder.Token != held.Token() {
		t.Fatalf("locks: %+v", locks)
	}
}
