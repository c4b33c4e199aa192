package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/txkit/txkit/drills/internal/drillkit"
	"github.com/txkit/txkit/drills/internal/drilltest"
	"github.com/txkit/txkit/examples/recharge/app"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// TestIntegrationRechargeDemo: 12 top-ups through the two services; order-005's deliveries are
// all lost, the first two deliveries time out and the account service answers 500 to the next
// three. Every top-up ends credited exactly once: 11 by notification (the retried ones too), the
// lost one by reconciliation through the query API, and reconciling every order again credits
// nothing.
func TestIntegrationRechargeDemo(t *testing.T) {
	cfg := Config{Recharges: 12, Lost: []string{"order-005"}, FailFirst: 3, SlowFirst: 2, Slow: 1500 * time.Millisecond,
		CallTimeout: time.Second, Schedule: []time.Duration{time.Second, time.Second, 2 * time.Second},
		PG: testenv.PGURL(t), ZK: strings.Join(testenv.ZK(t), ","), Dir: t.TempDir(), Log: t.Output()}
	rep := drilltest.Run(t, 2*time.Minute, Run, cfg)
	if rep.ByNotification != 11 || rep.ByReconcile != 1 || rep.Reconcile.Credited != 1 {
		t.Fatalf("%d credited by notification, %d by reconcile (reconcile said %d); want 11, 1, 1",
			rep.ByNotification, rep.ByReconcile, rep.Reconcile.Credited)
	}
	if len(rep.Retried) == 0 {
		t.Fatal("no notification was delivered after a failed attempt")
	}
}

// A service started without the shared secret exits at once, saying how to set it: there is no
// default secret.
func TestIntegrationServiceWithoutSecretExits(t *testing.T) {
	dir := t.TempDir()
	if err := build(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	schema := "rc_nosecret_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
	t.Cleanup(func() {
		_ = drillkit.DropSchema(context.Background(), testenv.PGURL(t), schema, app.AccountDB, app.RechargeDB)
	})
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, app.SecretEnv+"=") {
			env = append(env, kv)
		}
	}
	for svc, args := range map[string][]string{
		"recharge": {"-pg", testenv.PGURL(t), "-zk", strings.Join(testenv.ZK(t), ","), "-schema", schema, "-account", "http://127.0.0.1:1/notify"},
		"account":  {"-pg", testenv.PGURL(t), "-schema", schema, "-recharge", "http://127.0.0.1:1"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		cmd := exec.CommandContext(ctx, filepath.Join(dir, svc), args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() <= 0 || !strings.Contains(string(out), app.SecretEnv) {
			t.Errorf("%s without a secret: %v, output %q; want it to exit at once naming %s", svc, err, out, app.SecretEnv)
		}
	}
}

// An error answer of the example carries no internal detail: the account service, unable to
// reach the recharge service, answers 502 with a short message and a request id, not the dial
// error naming the address.
func TestIntegrationAnswersCarryNoInternalText(t *testing.T) {
	dir := t.TempDir()
	if err := build(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	t.Setenv(app.SecretEnv, "test-secret-0123456789")
	schema := "rc_answers_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
	t.Cleanup(func() { _ = drillkit.DropSchema(context.Background(), testenv.PGURL(t), schema, app.AccountDB) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String() // nothing listens there once closed
	ln.Close()
	p, err := drillkit.Start(t.Context(), "account", filepath.Join(dir, "account"),
		[]string{"-pg", testenv.PGURL(t), "-schema", schema, "-recharge", "http://" + closed}, filepath.Join(dir, "account.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drillkit.Stop(p) })
	resp, err := http.Post("http://"+p.Addr+"/topups", "application/json", strings.NewReader(`{"order":"o-1","account":"a","amount":1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "request_id") {
		t.Errorf("top-up with the recharge service down: %d %s, want 502 with a request id", resp.StatusCode, body)
	}
	for _, leak := range []string{closed, "dial", "connection refused"} {
		if strings.Contains(string(body), leak) {
			t.Errorf("answer %s carries %q", body, leak)
		}
	}
}
