package outbox_test

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/obs/obstest"
	"github.com/txkit/txkit/internal/testkit/mqtest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

// TestIntegrationRelayOutageLogsBounded: a relay whose RocketMQ publisher cannot reach the broker
// for 20 s (the broker behind a proxy that is cut and refuses connections; the shared broker goes
// on) writes a bounded number of failure lines — one per topic per interval, each with the count
// of the failures not written — however many publishes fail, loses no count (the lines and their
// counts add up to every failed attempt), and no line carries a message's body or headers.
func TestIntegrationRelayOutageLogsBounded(t *testing.T) {
	e := newRelayEnv(t)
	ns, broker := mqtest.BrokerBehindProxy(t)
	pub, err := rocketmq.NewPublisher(t.Context(), ns, rocketmq.WithRetries(0, 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	log, logs := obstest.NewLogs()
	r := e.relay(t, "relay-1", pub, outbox.WithLogger(log), outbox.WithRetry(1_000_000, 10*time.Millisecond, 100*time.Millisecond),
		outbox.WithSchedule("@every 200ms", 128))
	run(t, r)

	// The publisher learns the route (through the name server's proxy: the broker's address is
	// the broker proxy's) and publishes through the proxy.
	e.enqueue(t, "warm", "warm-up")
	e.waitEmpty(t, 30*time.Second)

	broker.Down()
	broker.Cut()
	secret := "alice-" + uuid.NewString() // a user's name, in every body and header
	const keys = 40
	for i := range keys {
		if _, err := e.ob.Enqueue(t.Context(), e.pool, outbox.Message{Topic: e.topic, Key: "user-" + strconv.Itoa(i),
			Body: []byte(`{"user":"` + secret + `"}`), Headers: map[string]string{"x-user-name": secret + "-header"}}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	select { // the outage
	case <-t.Context().Done():
		return
	case <-time.After(20 * time.Second):
	}
	broker.Up()
	e.waitEmpty(t, 60*time.Second)
	failed := r.Stats().Failed
	if failed < 2*keys {
		t.Fatalf("only %d publishes failed during the outage: the outage was not one", failed)
	}

	// The last failure line held back is written once its interval has ended: then the lines and
	// their counts account for every failed attempt.
	const msg = "outbox: publish failed"
	accounted := func() int64 {
		var n int64
		for _, l := range logs.Lines(msg) {
			s, _ := strconv.ParseInt(l.Attrs["txkit.suppressed"], 10, 64)
			n += 1 + s
		}
		return n
	}
	testenv.Eventually(t, 3*obs.LogInterval, 50*time.Millisecond, func() bool { return accounted() == failed },
		"the failure lines and their counts to add up to the %d failed publishes (now %d)", failed, accounted())
	elapsed := time.Since(start)

	lines := logs.Lines(msg)
	// One line per interval, plus the first one.
	if bound := int(elapsed/obs.LogInterval) + 2; len(lines) > bound {
		t.Fatalf("%d failure lines for %d failed publishes in %v, want at most %d:\n%s", len(lines), failed, elapsed.Round(time.Second), bound, obstest.Texts(lines))
	}
	for _, l := range logs.Lines("") {
		if l.Level >= slog.LevelWarn && l.Msg != msg {
			t.Fatalf("a warning other than the publish failures: %s", l.Text)
		}
	}
	counted := false
	for _, l := range lines {
		counted = counted || l.Attrs["txkit.suppressed"] != ""
	}
	if !counted {
		t.Fatalf("no failure line carries a count of those held back:\n%s", obstest.Texts(lines))
	}
	for _, l := range logs.Lines("") {
		if strings.Contains(l.Text, secret) {
			t.Fatalf("a log line carries a message's body or header: %s", l.Text)
		}
	}
	t.Logf("%d failed publishes in %v: %d failure lines, %d lines in all", failed, elapsed.Round(time.Second), len(lines), len(logs.Lines("")))
}

// TestIntegrationRelayDatabaseOutageLogsBounded: a relay whose connections to PostgreSQL are cut
// for 12 s (through a proxy; the shared server goes on) fails every drain and loses its listening
// connection, and logs each of these failures once per interval with a count, not once per drain
// or per reconnect.
func TestIntegrationRelayDatabaseOutageLogsBounded(t *testing.T) {
	e := newRelayEnv(t)
	schema := strings.Split(e.ob.Table(), ".")[0]
	pool, proxy := testenv.PoolViaProxy(t, &testenv.Schema{Name: schema, URL: e.pool.Config().ConnString()})
	ob, err := outbox.New(pool, outbox.WithTable(schema, ""))
	if err != nil {
		t.Fatal(err)
	}
	log, logs := obstest.NewLogs()
	e.ob = ob
	r := e.relay(t, "relay-1", &recorder{next: mqtest.Publisher(t)}, outbox.WithLogger(log), outbox.WithSchedule("@every 200ms", 128))
	run(t, r)
	e.enqueue(t, "warm", "warm-up")
	e.waitEmpty(t, 30*time.Second)

	proxy.Down()
	proxy.Cut()
	start := time.Now()
	select { // the outage
	case <-t.Context().Done():
		return
	case <-time.After(12 * time.Second):
	}
	proxy.Up()
	e.enqueue(t, "after", "after")
	e.waitEmpty(t, 30*time.Second)
	elapsed := time.Since(start)

	// Each warning — a drain failed, the listening connection failed — once per interval, plus
	// the first one.
	warnings := map[string][]obstest.Line{}
	for _, l := range logs.Lines("") {
		if l.Level >= slog.LevelWarn {
			warnings[l.Msg] = append(warnings[l.Msg], l)
		}
	}
	if len(warnings["outbox: drain failed; retrying at the next wake-up"]) == 0 {
		t.Fatalf("no drain failed during the outage:\n%s", obstest.Texts(logs.Lines("")))
	}
	bound := int(elapsed/obs.LogInterval) + 2
	for msg, lines := range warnings {
		if len(lines) > bound {
			t.Errorf("%d lines %q in %v, want at most %d:\n%s", len(lines), msg, elapsed.Round(time.Second), bound, obstest.Texts(lines))
		}
		t.Logf("%d lines %q in %v", len(lines), msg, elapsed.Round(time.Second))
	}
}
