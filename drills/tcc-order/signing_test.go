package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/txkit/txkit/drills/internal/drillkit"
	"github.com/txkit/txkit/examples/tcc-order/app"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
)

// envSecret is app.EnvSecret, spelled out so that this test also runs against the code before it.
const envSecret = "TXKIT_TCC_ORDER_SECRET"

// TestIntegrationServicesRequireSigning: the services do not start without the shared secret
// (the error names the variable), and a running participant refuses unsigned calls (401), serves
// signed ones, and takes on each route only that protocol's ops.
func TestIntegrationServicesRequireSigning(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	pg := testenv.PGURL(t)
	dir := t.TempDir()
	if err := (&harness{cfg: Config{Dir: dir}}).build(ctx); err != nil {
		t.Fatal(err)
	}
	schema := "tcco_sign_" + strings.ToLower(rand.Text()[:8])
	t.Cleanup(func() { _ = drillkit.DropSchema(context.Background(), pg, schema, dbStock) })

	t.Setenv(envSecret, "")
	for svc, args := range map[string][]string{
		"stock": {"-pg", pg, "-db", dbStock, "-schema", schema},
		"order": {"-pg", pg, "-db", dbStock, "-schema", schema, "-zk", strings.Join(testenv.ZK(t), ",")},
	} {
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		out, err := exec.CommandContext(rctx, filepath.Join(dir, svc), args...).CombinedOutput()
		rcancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), envSecret) {
			t.Errorf("%s without %s: %v, output %q; want exit status 1 naming the variable", svc, envSecret, err, out)
		}
	}

	secret := rand.Text()
	t.Setenv(envSecret, secret)
	stock, err := drillkit.Start(ctx, "stock", filepath.Join(dir, "stock"),
		[]string{"-pg", pg, "-db", dbStock, "-schema", schema, "-seed", "sku-1=5"}, filepath.Join(dir, "stock.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drillkit.Stop(stock) })
	base := "http://" + stock.Addr
	try := participant.Request{GID: "g1", Branch: "stock", Op: participant.OpTry, Payload: app.Stock().Payload("sku-1", 2)}

	if err := (participant.HTTP{URL: base + "/tcc"}).Do(ctx, try); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("an unsigned try: %v; want HTTP 401", err)
	}
	client, err := participant.NewSigningClient(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := (participant.HTTP{URL: base + "/saga", Client: client}).Do(ctx, try); err == nil || !strings.Contains(err.Error(), "HTTP 400") {
		t.Errorf("a signed try posted to /saga: %v; want HTTP 400", err)
	}
	var st struct{ Available, Reserved int64 }
	if err := drillkit.GetJSON(ctx, http.DefaultClient, base+"/stats", &st); err != nil || st.Reserved != 0 {
		t.Fatalf("stats %+v, %v; want nothing reserved by the refused calls", st, err)
	}
	if err := (participant.HTTP{URL: base + "/tcc", Client: client}).Do(ctx, try); err != nil {
		t.Fatalf("a signed try: %v", err)
	}
	if err := drillkit.GetJSON(ctx, http.DefaultClient, base+"/stats", &st); err != nil || st.Reserved != 2 {
		t.Fatalf("stats %+v, %v; want 2 reserved by the signed try", st, err)
	}
	fmt.Fprintln(t.Output(), "stock refused the unsigned call and served the signed one")

	// An order whose participants cannot be reached is cancelled; the answer says why in a word
	// and gives a request id, but not the error, which names the services' addresses.
	order, err := drillkit.Start(ctx, "order", filepath.Join(dir, "order"), []string{"-pg", pg, "-db", dbStock, "-schema", schema,
		"-zk", strings.Join(testenv.ZK(t), ","), "-election", "/txkit-demo/" + schema, "-stock", "http://127.0.0.1:1", "-account", "http://127.0.0.1:1",
		"-call-timeout", "500ms", "-timeout", "2s"}, filepath.Join(dir, "order.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drillkit.Stop(order) })
	for _, mode := range []string{"tcc", "saga"} {
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+order.Addr+"/orders",
			strings.NewReader(`{"sku":"sku-1","qty":1,"account":"alice","amount":5,"mode":"`+mode+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("%s order → %d %s", mode, resp.StatusCode, bytes.TrimSpace(body))
		if resp.StatusCode < 400 || strings.Contains(string(body), "127.0.0.1") || strings.Contains(string(body), "connection refused") ||
			!strings.Contains(string(body), `"request_id"`) {
			t.Errorf("%s order with unreachable participants → %d %s; want an error status with a request id and no internal error text",
				mode, resp.StatusCode, body)
		}
	}
}
