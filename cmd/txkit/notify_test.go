package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/notify"
)

func TestIntegrationNotifyCommands(t *testing.T) {
	s := testenv.PG(t)
	n, err := notify.New(s.Pool, []notify.Receiver{{Name: "shop", URL: "https://127.0.0.1:1/n", Secrets: []string{"cmd-txkit-test-secret-0123456789"}}}, notify.WithTable(s.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	var nt notify.Notification
	err = pgx.BeginFunc(t.Context(), s.Pool, func(tx pgx.Tx) error {
		nt.ID, err = n.Enqueue(t.Context(), tx, notify.Notification{Receiver: "shop", Key: "order-1", Payload: json.RawMessage(`{"a":1}`)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TXKIT_PG_URL": s.URL}
	if code, out, stderr := txkit(t, env, "notify", "failed", "-schema", s.Name); code != exitOK || !strings.Contains(out, "no failed") {
		t.Fatalf("notify failed: exit %d, %q, %q", code, out, stderr)
	}
	if _, err := s.Pool.Exec(t.Context(), `update txkit_notify set status = 'failed', next_attempt_at = 'infinity', attempts = 16, last_error = 'HTTP 503'`); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := txkit(t, env, "notify", "failed", "-schema", s.Name); code != exitOK || !strings.Contains(out, nt.ID.String()) || !strings.Contains(out, "HTTP 503") {
		t.Fatalf("notify failed: exit %d, %q, %q", code, out, stderr)
	}
	if code, out, stderr := txkit(t, env, "notify", "show", "-schema", s.Name, nt.ID.String()); code != exitOK || !strings.Contains(out, "order-1") ||
		!strings.Contains(out, "failed") || strings.Contains(out, `{"a":1}`) || !strings.Contains(out, "7 bytes, sha256 ") {
		t.Fatalf("notify show: exit %d, %q, %q; want the payload redacted", code, out, stderr)
	}
	if code, out, stderr := txkit(t, env, "notify", "show", "-reveal", "-schema", s.Name, nt.ID.String()); code != exitOK || !strings.Contains(out, `{"a":1}`) {
		t.Fatalf("notify show -reveal: exit %d, %q, %q", code, out, stderr)
	}
	if code, out, stderr := txkit(t, env, "notify", "redeliver", "-schema", s.Name, nt.ID.String()); code != exitOK || !strings.Contains(out, "back on the schedule") {
		t.Fatalf("notify redeliver: exit %d, %q, %q", code, out, stderr)
	}
	if r, err := n.Get(t.Context(), nt.ID); err != nil || r.Status != notify.StatusPending || r.Attempts != 0 {
		t.Fatalf("after redeliver: %+v, %v", r, err)
	}
	if code, _, stderr := txkit(t, env, "notify", "redeliver", "-schema", s.Name, nt.ID.String()); code != exitFail || !strings.Contains(stderr, "not failed") {
		t.Fatalf("redeliver of a pending one: exit %d, %q", code, stderr)
	}
	if code, _, stderr := txkit(t, env, "notify", "show"); code != exitUsage || !strings.Contains(stderr, "give notification ids") {
		t.Fatalf("notify show without id: exit %d, %q", code, stderr)
	}
}
