// Package grafana holds txkit's Grafana dashboard (txkit.json), Prometheus alerting rules
// (alerts.yml) and their tests: the JSON parses as a Grafana 10+ dashboard on a Prometheus
// datasource variable, and every metric its panels query, or a rule's expr names, is one that
// txkit's components register.
package grafana

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/idempotency"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/notify"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/rocketmq"
	"github.com/txkit/txkit/saga"
	"github.com/txkit/txkit/tcc"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/twopc"
)

func TestMain(m *testing.M) {
	rocketmq.SetClientLogger(slog.New(slog.NewTextHandler(os.Stderr, nil)), slog.LevelError) // the client's info lines are noise here
	testenv.VerifyNoLeaks(m)
}

// dashboard is the part of Grafana's dashboard model the tests read.
type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Type  string `json:"type"`
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource *datasource              `json:"datasource"`
	GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
	Targets    []struct {
		Datasource *datasource `json:"datasource"`
		Expr       string      `json:"expr"`
		RefID      string      `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// load reads and parses txkit.json.
func load(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("txkit.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("txkit.json does not parse: %v", err)
	}
	return d
}

// panels returns the dashboard's panels, those of collapsed rows included, rows left out.
func (d dashboard) panels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

// metricName matches a txkit metric name in a PromQL expression (label names and values of
// txkit's series never start with txkit_).
var metricName = regexp.MustCompile(`\btxkit_[a-z0-9_]+`)

// metrics returns every txkit metric name the panels' expressions use, sorted, each with the
// titles of the panels using it.
func (d dashboard) metrics() map[string][]string {
	out := map[string][]string{}
	for _, p := range d.panels() {
		for _, tg := range p.Targets {
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				if !slices.Contains(out[m], p.Title) {
					out[m] = append(out[m], p.Title)
				}
			}
		}
	}
	return out
}

// The dashboard parses, is a Grafana 10+ dashboard whose panels all query the Prometheus
// datasource chosen by its variable, and covers what an on-call engineer needs.
func TestDashboardParses(t *testing.T) {
	d := load(t)
	if d.Title == "" || d.UID == "" {
		t.Fatalf("title %q, uid %q: want both", d.Title, d.UID)
	}
	if d.SchemaVersion < 38 { // Grafana 10.0 writes 38
		t.Fatalf("schemaVersion %d: want a Grafana 10+ dashboard (38 or more)", d.SchemaVersion)
	}
	var dsVar string
	for _, v := range d.Templating.List {
		if v.Type == "datasource" && v.Query == "prometheus" {
			dsVar = v.Name
		}
	}
	if dsVar == "" {
		t.Fatal("no Prometheus datasource variable")
	}
	ids := map[int]string{}
	var all []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			all = append(all, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, p := range all {
		if prev, ok := ids[p.ID]; ok || p.ID == 0 {
			t.Errorf("panel %q: id %d (also %q)", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v", p.Title, p.GridPos)
		}
	}
	want := &datasource{Type: "prometheus", UID: "${" + dsVar + "}"}
	for _, p := range d.panels() {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		if p.Datasource == nil || *p.Datasource != *want {
			t.Errorf("panel %q: datasource %+v, want %+v", p.Title, p.Datasource, want)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" || tg.Datasource == nil || *tg.Datasource != *want {
				t.Errorf("panel %q: query %+v", p.Title, tg)
			}
			if strings.Count(tg.Expr, "(") != strings.Count(tg.Expr, ")") || strings.Count(tg.Expr, "{") != strings.Count(tg.Expr, "}") {
				t.Errorf("panel %q: unbalanced expression %s", p.Title, tg.Expr)
			}
		}
	}
	used := d.metrics()
	for _, m := range []string{
		// outbox: backlog, lag, failures
		"txkit_outbox_backlog", "txkit_outbox_oldest_pending_seconds", "txkit_outbox_commit_to_publish_seconds_bucket",
		"txkit_outbox_publish_failures_total", "txkit_outbox_dead_total",
		// coordinators and their recovery
		"txkit_coordinator_transactions_begun_total", "txkit_coordinator_transactions_finished_total",
		"txkit_coordinator_branch_calls_total", "txkit_coordinator_phase_seconds_bucket",
		"txkit_recovery_backlog", "txkit_recovery_oldest_unfinished_seconds",
		// notify
		"txkit_notify_due", "txkit_notify_given_up_total", "txkit_notify_attempts_total", "txkit_notify_circuit_open",
		// leaders, and the partitions of sharded jobs that nobody leads
		"txkit_lock_is_leader", "txkit_lock_leadership_changes_total", "txkit_leader_partitions_unled",
		// consumers
		"txkit_rocketmq_consumed_total",
	} {
		if used[m] == nil {
			t.Errorf("no panel queries %s", m)
		}
	}
}

// recorder is a Registerer that passes registrations on to a registry and records the names of
// the metrics registered (vectors without series are not gathered, so the names come from the
// collectors' descriptions).
type recorder struct {
	reg   *prometheus.Registry
	mu    sync.Mutex
	names map[string]bool
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.reg.Register(c); err != nil {
		return err
	}
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recorder) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

// TestIntegrationDashboardNamesRegisteredMetrics builds every txkit component with its
// registerer option on one registry, against the real servers, and fails naming each metric a
// dashboard panel queries that no component registered.
func TestIntegrationDashboardNamesRegisteredMetrics(t *testing.T) {
	s := testenv.PG(t)
	zk := testenv.ZK(t)
	ns := testenv.Namesrv(t)
	topic := testenv.Topic(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rec := &recorder{reg: prometheus.NewRegistry(), names: map[string]bool{}}
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// The coordinators: every protocol registers the same collectors (labelled by protocol).
	copts := []coordinator.Option{coordinator.WithSchema(s.Name), coordinator.WithTelemetry(rec, nil)}
	_, err := tcc.New(s.Pool, copts...)
	check("tcc.New", err)
	_, err = saga.New(s.Pool, copts...)
	check("saga.New", err)
	tp, err := twopc.New(s.Pool, copts...)
	check("twopc.New", err)
	t.Cleanup(func() { _ = tp.Close() })
	three, err := threepc.New(s.Pool, copts...)
	check("threepc.New", err)
	t.Cleanup(func() { _ = three.Close() })

	// The outbox relay on a RocketMQ publisher, a consumer and a transactional producer.
	ob, err := outbox.New(s.Pool)
	check("outbox.New", err)
	pub, err := rocketmq.NewPublisher(ctx, ns, rocketmq.WithTelemetry(rec, nil))
	check("rocketmq.NewPublisher", err)
	t.Cleanup(func() { _ = pub.Close() })
	_, err = outbox.NewRelay(ob, pub, outbox.WithTelemetry(rec, nil))
	check("outbox.NewRelay", err)
	store, err := idempotency.New(s.Pool, idempotency.WithRegisterer(rec))
	check("idempotency.New", err)
	check("idempotency Migrate", store.Migrate(ctx))
	_, err = rocketmq.NewConsumer(ns, "txkit-test-grafana", topic, s.Pool, store,
		func(context.Context, pgx.Tx, outbox.Message) error { return nil }, rocketmq.WithTelemetry(rec, nil))
	check("rocketmq.NewConsumer", err)
	txp, err := rocketmq.NewTxProducer(ctx, ns, "txkit-test-grafana-tx", s.Pool, rocketmq.WithTelemetry(rec, nil))
	check("rocketmq.NewTxProducer", err)
	t.Cleanup(func() { _ = txp.Close() })

	// Notify, the participant barrier.
	_, err = notify.New(s.Pool, []notify.Receiver{{Name: "shop", URL: "https://shop.example/notify",
		Secrets: []string{"0123456789abcdef0123"}}}, notify.WithTable(s.Name, ""), notify.WithTelemetry(rec, nil))
	check("notify.New", err)
	_, err = barrier.New(s.Pool, barrier.WithTelemetry(rec, nil))
	check("barrier.New", err)

	// An election and an instrumented lock on ZooKeeper.
	sess, err := zklock.NewSession(ctx, zk, zklock.WithSessionTimeout(3*time.Second), zkenv.Auth(t))
	check("zklock.NewSession", err)
	t.Cleanup(func() { _ = sess.Close() })
	root := testenv.ZKRoot(t)
	_, err = zklock.NewElector(sess, root+"/election", "grafana-test", lock.WithElectionRegisterer(rec))
	check("zklock.NewElector", err)
	// A partitioned relay: its partitions' leader job reports the unled partitions.
	obParts, err := outbox.New(s.Pool, outbox.WithTable("", "grafana_parts"), outbox.WithPartitions(2))
	check("outbox.New with partitions", err)
	_, err = outbox.NewRelay(obParts, pub, outbox.WithTelemetry(rec, nil), outbox.WithElectors(func(p int) (lock.Elector, error) {
		return zklock.NewElector(sess, fmt.Sprintf("%s/relay/p%d", root, p), "grafana-test")
	}, nil))
	check("outbox.NewRelay with partitions", err)
	mu, err := zklock.NewMutex(sess, root+"/lock")
	check("zklock.NewMutex", err)
	_, err = lock.Instrument(mu, "zookeeper", rec)
	check("lock.Instrument", err)

	registered := func(name string) bool {
		if rec.names[name] {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} { // a histogram's series
			if base, ok := strings.CutSuffix(name, suffix); ok && rec.names[base] {
				return true
			}
		}
		return false
	}
	used := load(t).metrics()
	var names []string
	for m := range used {
		names = append(names, m)
	}
	slices.Sort(names)
	for _, m := range names {
		if !registered(m) {
			t.Errorf("the dashboard queries %s (panels %q), which no component registers", m, used[m])
		}
	}
	// The alerting rules name registered metrics too.
	rules, err := os.ReadFile("alerts.yml")
	check("read alerts.yml", err)
	var exprs int
	for _, line := range strings.Split(string(rules), "\n") {
		expr, ok := strings.CutPrefix(strings.TrimSpace(line), "expr:")
		if !ok {
			continue
		}
		exprs++
		ms := metricName.FindAllString(expr, -1)
		if len(ms) == 0 {
			t.Errorf("alerts.yml: expr %q names no txkit metric", expr)
		}
		for _, m := range ms {
			if !registered(m) {
				t.Errorf("alerts.yml: expr %q names %s, which no component registers", expr, m)
			}
		}
	}
	if exprs == 0 {
		t.Errorf("alerts.yml has no expr")
	}
	var unused []string
	for m := range rec.names {
		if used[m] == nil && used[m+"_bucket"] == nil {
			unused = append(unused, m)
		}
	}
	slices.Sort(unused)
	t.Logf("%d metrics on the dashboard, all registered; registered but not on it: %v", len(names), unused)
}
