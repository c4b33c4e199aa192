package console_test

import (
	"bufio"
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/testkit/testenv"
)

// tccOrder is the tcc-order example running for a test: its three services built from
// examples/tcc-order and started as its drill (drills/tcc-order) starts them (a shared HMAC key in
// the environment, each service in a schema of the run in its own database, "LISTENING <addr>" on
// stdout), with the order service's recovery elections under the test's ZooKeeper path.
type tccOrder struct {
	Schema   string        // the run's schema, in each service's database
	Order    string        // the order service's base URL
	Root     string        // the test's ZooKeeper path (testenv.ZKRoot)
	Election string        // the ZooKeeper path the order service's elections are under
	Pool     *pgxpool.Pool // on the order service's database (txkit_order), search_path the run's schema
}

// The databases of the example's services.
const (
	dbOrder   = "txkit_order"
	dbStock   = "txkit_stock"
	dbAccount = "txkit_account"
)

// startTCCOrder builds and starts stock, account and one order instance; they are stopped and
// the run's schemas dropped when the test ends.
func startTCCOrder(t *testing.T) *tccOrder {
	t.Helper()
	base := testenv.PGURL(t)
	zk := strings.Join(testenv.ZK(t), ",")
	o := &tccOrder{Schema: "tcco_console_" + strings.ToLower(crand.Text()[:8]), Root: testenv.ZKRoot(t)}
	o.Election = o.Root + "/elect"
	bin := t.TempDir()
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin+"/",
		"./examples/tcc-order/order", "./examples/tcc-order/stock", "./examples/tcc-order/account")
	build.Dir = moduleRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the tcc-order services: %v\n%s", err, out)
	}
	t.Cleanup(func() { dropSchema(t, base, o.Schema, dbOrder, dbStock, dbAccount) })
	env := append(os.Environ(), "TXKIT_TCC_ORDER_SECRET="+crand.Text()) // the key the three share
	logs := filepath.Join(artifactsDir(t), "logs")                      // kept after the test, overwritten by the next run
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	stock := startService(t, env, logs, filepath.Join(bin, "stock"), "-pg", base, "-db", dbStock, "-schema", o.Schema,
		"-seed", "sku-1=100,sku-2=100")
	account := startService(t, env, logs, filepath.Join(bin, "account"), "-pg", base, "-db", dbAccount, "-schema", o.Schema,
		"-seed", "alice=1000,bob=1000")
	order := startService(t, env, logs, filepath.Join(bin, "order"), "-pg", base, "-db", dbOrder, "-schema", o.Schema,
		"-zk", zk, "-id", "order-1", "-election", o.Election, "-stock", "http://"+stock, "-account", "http://"+account)
	o.Order = "http://" + order
	cfg, err := pgxpool.ParseConfig(databaseURL(t, base, dbOrder))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = o.Schema
	if o.Pool, err = pgxpool.NewWithConfig(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Pool.Close)
	return o
}

// place posts an order and returns its gid and the status answered.
func (o *tccOrder) place(t *testing.T, order map[string]any) (gid, status string) {
	t.Helper()
	body, _ := json.Marshal(order)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, o.Order+"/orders", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /orders: %v", err)
	}
	defer resp.Body.Close()
	var out struct{ GID, Status string }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.GID == "" {
		t.Fatalf("POST /orders %s: answer %d, %v", body, resp.StatusCode, err)
	}
	return out.GID, out.Status
}

// startService runs bin with args and env, its stderr in logs/<name>.log, waits for the
// "LISTENING <addr>" line it prints and returns addr. The process gets SIGTERM when the test ends
// (SIGKILL after 15 s) and is waited for.
func startService(t *testing.T, env []string, logs, bin string, args ...string) string {
	t.Helper()
	name := filepath.Base(bin)
	logf, err := os.Create(filepath.Join(logs, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Stderr = env, logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	addr, done := make(chan string, 1), make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "LISTENING "); ok {
				select {
				case addr <- a:
				default:
				}
			}
		}
		_ = cmd.Wait()
		_ = logf.Close()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	select {
	case a := <-addr:
		return a
	case <-done:
		t.Fatalf("%s exited while starting; see %s", name, logf.Name())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not print LISTENING within 60s; see %s", name, logf.Name())
	}
	return ""
}

// moduleRoot is the directory of txkit's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "env", "GOMOD").Output()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "go.mod") {
		t.Fatalf("go env GOMOD: %q, %v", out, err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// databaseURL is base with its database replaced by db.
func databaseURL(t *testing.T, base, db string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", testenv.EnvPG, err)
	}
	u.Path = "/" + db
	return u.String()
}

// dropSchema drops schema in each of dbs of the server at base.
func dropSchema(t *testing.T, base, schema string, dbs ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, db := range dbs {
		c, err := pgx.Connect(ctx, databaseURL(t, base, db))
		if err != nil {
			t.Errorf("cleanup: connect %s: %v", db, err)
			continue
		}
		if _, err := c.Exec(ctx, "drop schema if exists "+pgx.Identifier{schema}.Sanitize()+" cascade"); err != nil {
			t.Errorf("cleanup: drop schema %s in %s: %v", schema, db, err)
		}
		_ = c.Close(ctx)
	}
}

// artifactsDir is where the browser test's screenshots go for people to look at:
// $TXKIT_HOME/artifacts/console (TXKIT_HOME as make sets it, else <module>/.txkit).
func artifactsDir(t *testing.T) string {
	t.Helper()
	home := os.Getenv("TXKIT_HOME")
	if home == "" {
		home = filepath.Join(moduleRoot(t), ".txkit")
	}
	dir := filepath.Join(home, "artifacts", "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// saveShot writes a screenshot under name in the artifacts directory and in the test's
// ArtifactDir, and returns the first path.
func saveShot(t *testing.T, name string, png []byte) string {
	t.Helper()
	p := filepath.Join(artifactsDir(t), name)
	for _, f := range []string{p, filepath.Join(t.ArtifactDir(), name)} {
		if err := os.WriteFile(f, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func must(t *testing.T, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}

// testPause waits d, or less when ctx ends (then it returns ctx's error).
func testPause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
