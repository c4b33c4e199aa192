package notify_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/obs/obstest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/notify"
)

// TestIntegrationNotifierDatabaseOutageLogsBounded: a leading notifier whose connections to
// PostgreSQL are cut for 12 s (through a proxy; the shared server goes on) fails to take due
// notifications at every tick and loses its listening connection, and logs each of these
// failures once per interval with a count, not once per tick or per reconnect; then it delivers
// again.
func TestIntegrationNotifierDatabaseOutageLogsBounded(t *testing.T) {
	w := newWorld(t)
	pool, proxy := testenv.PoolViaProxy(t, w.sender)
	log, logs := obstest.NewLogs()
	n, err := notify.New(pool, w.receivers(), notify.WithTable(w.sender.Name, ""), notify.WithPlainHTTP(), notify.WithLogger(log),
		notify.WithTick("@every 200ms", 100), notify.WithElector(zkenv.Elector(t, w.path, "n1")))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, n.Run)
	w.waitStatus(n, w.enqueue(n, "shop", "before", 1), notify.StatusDelivered, 30*time.Second)

	proxy.Down()
	proxy.Cut()
	start := time.Now()
	select { // the outage
	case <-t.Context().Done():
		return
	case <-time.After(12 * time.Second):
	}
	proxy.Up()
	w.waitStatus(n, w.enqueue(n, "shop", "after", 1), notify.StatusDelivered, 30*time.Second)
	elapsed := time.Since(start)

	warnings := map[string][]obstest.Line{}
	for _, l := range logs.Lines("") {
		if l.Level >= slog.LevelWarn {
			warnings[l.Msg] = append(warnings[l.Msg], l)
		}
	}
	if len(warnings["notify: taking due notifications failed; retrying at the next tick"]) == 0 {
		t.Fatalf("taking due notifications never failed during the outage:\n%s", obstest.Texts(logs.Lines("")))
	}
	bound := int(elapsed/obs.LogInterval) + 2 // one per interval, plus the first
	for msg, lines := range warnings {
		if len(lines) > bound {
			t.Errorf("%d lines %q in %v, want at most %d:\n%s", len(lines), msg, elapsed.Round(time.Second), bound, obstest.Texts(lines))
		}
		t.Logf("%d lines %q in %v", len(lines), msg, elapsed.Round(time.Second))
	}
}
