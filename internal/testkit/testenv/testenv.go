// Package testenv gives integration tests their servers: the PostgreSQL, ZooKeeper, Redis and
// RocketMQ started by `make up` (deploy/local/up), found through the environment variables that `make test`
// sets. Each test gets a place of its own — a PostgreSQL schema, a ZooKeeper path, a RocketMQ topic,
// each with a random suffix — so tests run in parallel and leave nothing behind.
//
// A test that needs a server skips only under -short. Otherwise a variable that is unset, or a
// server that does not answer, fails the test with a message naming the variable and `make up`:
// a skip must never hide a missing server in CI.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	neturl "net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txkit/txkit/internal/pgutil"
)

// The environment variables `make test` sets (deploy/local/env prints them).
const (
	EnvPG      = "TXKIT_PG_URL"
	EnvPGHA    = "TXKIT_PG_HA_URL"      // the HA PostgreSQL (deploy/local/pg-ha): pgx's multi-host URL
	EnvBouncer = "TXKIT_PG_BOUNCER_URL" // PgBouncer (transaction pooling) in front of the HA PostgreSQL
	EnvZK      = "TXKIT_ZK"
	EnvZKAuth  = "TXKIT_ZK_AUTH" // "user:password" of the ensemble's digest user (deploy/local/zk)
	EnvNamesrv = "TXKIT_ROCKETMQ_NAMESRV"
	EnvBroker  = "TXKIT_ROCKETMQ_BROKER" // optional; default 127.0.0.1:20911

	EnvRedis        = "TXKIT_REDIS"         // the single Redis server (the single-node lock)
	EnvRedlock      = "TXKIT_REDLOCK"       // three independent Redis servers for Redlock, comma-separated
	EnvRedisPrimary = "TXKIT_REDIS_PRIMARY" // a Redis primary...
	EnvRedisReplica = "TXKIT_REDIS_REPLICA" // ...and its replica, for failover tests
)

const dialTimeout = 5 * time.Second

// Lookup returns the value of the environment variable name. Under -short it skips the test (a
// test that needs a server is an integration test); otherwise an unset variable fails the test.
func Lookup(t testing.TB, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: this test needs the servers from `make up` (%s)", name)
	}
	v := strings.TrimSpace(os.Getenv(name))
	if v != "" {
		return v
	}
	t.Fatalf("%s is not set: start the servers with `make up` and run the tests with `make test`", name)
	return ""
}

// Name returns a name unique to this test run, built from the test's name: lower case letters,
// digits and dashes, at most 40 characters before an 8-character random suffix.
func Name(t testing.TB) string {
	base := strings.ToLower(nonName.ReplaceAllString(t.Name(), "-"))
	base = strings.Trim(base, "-")
	if len(base) > 40 {
		base = base[:40]
	}
	return base + "-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
}

var nonName = regexp.MustCompile(`[^A-Za-z0-9]+`)

// PGURL returns the PostgreSQL URL after checking that the server answers.
func PGURL(t testing.TB) string {
	t.Helper()
	return urlOf(t, EnvPG)
}

// PGHAURL returns the HA PostgreSQL's URL (TXKIT_PG_HA_URL: every node, target_session_attrs=
// read-write) after checking that its primary answers.
func PGHAURL(t testing.TB) string {
	t.Helper()
	return urlOf(t, EnvPGHA)
}

func urlOf(t testing.TB, env string) string {
	t.Helper()
	url := Lookup(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("PostgreSQL at %s=%s does not answer (is `make up` running?): %v", env, url, err)
	}
	_ = conn.Close(ctx)
	return url
}

// Schema is a PostgreSQL schema of the test's own, dropped when the test ends.
type Schema struct {
	Name string        // the schema's name
	URL  string        // a connection URL whose search_path is the schema
	Pool *pgxpool.Pool // a pool on URL, closed when the test ends
}

// PG creates a schema for the test and a pool whose connections use it as their search_path.
//
// When TXKIT_PG_URL leads to a pooler (PgBouncer: the test suites' pass through it), a search_path
// in the URL would not reach the server sessions; the schema then comes with a role of the same
// name whose search_path it is (ALTER ROLE ... SET), and the URL logs in as that role: the pooler
// keeps a pool per role, whose sessions all start with that search_path.
func PG(t testing.TB) *Schema {
	t.Helper()
	return schemaOn(t, EnvPG, PGURL(t))
}

// PGBouncer is [PG] through PgBouncer (TXKIT_PG_BOUNCER_URL: transaction pooling).
func PGBouncer(t testing.TB) *Schema {
	t.Helper()
	return schemaOn(t, EnvBouncer, urlOf(t, EnvBouncer))
}

// PGHA is [PG] on the HA PostgreSQL (TXKIT_PG_HA_URL).
func PGHA(t testing.TB) *Schema {
	t.Helper()
	return schemaOn(t, EnvPGHA, PGHAURL(t))
}

func schemaOn(t testing.TB, env, base string) *Schema {
	t.Helper()
	name := "t_" + strings.ReplaceAll(Name(t), "-", "_")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect %s: %v", env, err)
	}
	defer conn.Close(ctx)
	pooled, err := pgutil.BehindPooler(ctx, conn)
	if err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "create schema "+ident); err != nil {
		t.Fatalf("create schema %s: %v", name, err)
	}
	url := withSearchPath(base, name)
	if pooled {
		for _, q := range []string{"create role " + ident + " login superuser", "alter role " + ident + " set search_path = " + ident} {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		url = withUser(t, base, name)
		t.Cleanup(func() {
			c, err := pgx.Connect(context.Background(), base)
			if err != nil {
				t.Logf("cleanup: connect: %v", err)
				return
			}
			defer c.Close(context.Background())
			// After the schema is dropped (registered later, so run earlier). The pooler may still
			// hold server sessions of the role: they are ended first.
			_, _ = c.Exec(context.Background(), "select pg_terminate_backend(pid) from pg_stat_activity where usename = $1", name)
			if _, err := c.Exec(context.Background(), "drop role if exists "+ident); err != nil {
				t.Logf("cleanup: drop role %s: %v", name, err)
			}
		})
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pool on %s: %v", url, err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("cleanup: connect: %v", err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "drop schema "+pgx.Identifier{name}.Sanitize()+" cascade"); err != nil {
			t.Errorf("cleanup: drop schema %s: %v", name, err)
		}
	})
	return &Schema{Name: name, URL: url, Pool: pool}
}

// withUser returns base with its user replaced by user.
func withUser(t testing.TB, base, user string) string {
	u, err := neturl.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", base, err)
	}
	u.User = neturl.User(user)
	return u.String()
}

func withSearchPath(url, schema string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "search_path=" + schema
}

// ZK returns the ZooKeeper servers after checking that at least one answers `ruok`.
func ZK(t testing.TB) []string {
	t.Helper()
	v := Lookup(t, EnvZK)
	servers := strings.Split(v, ",")
	var errs []error
	for _, s := range servers {
		if err := ruok(s); err != nil {
			errs = append(errs, err)
			continue
		}
		return servers
	}
	t.Fatalf("no ZooKeeper server in %s=%s answers (is `make up` running?): %v", EnvZK, v, errors.Join(errs...))
	return nil
}

func ruok(addr string) error {
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(dialTimeout))
	if _, err := c.Write([]byte("ruok")); err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	buf := make([]byte, 4)
	if _, err := c.Read(buf); err != nil || string(buf) != "imok" {
		return fmt.Errorf("%s: answered %q to ruok (%v)", addr, buf, err)
	}
	return nil
}

// zkTestParent holds the tests' roots. It is open to all (each test's root below it has the ACL
// its test gives it), so that a test's stranger or its own digest user can create its root there.
const zkTestParent = "/txkit-test"

// ZKRoot returns a ZooKeeper path of the test's own, /txkit-test/<name>, and deletes everything
// below it when the test ends, as the digest user of TXKIT_ZK_AUTH. The path itself is not
// created.
func ZKRoot(t testing.TB) string {
	t.Helper()
	servers := ZK(t)
	cred := []byte(Lookup(t, EnvZKAuth))
	root := zkTestParent + "/" + Name(t)
	conn, err := zkConnAuth(servers, cred)
	if err != nil {
		t.Fatalf("zk connect: %v", err)
	}
	defer conn.Close()
	if _, err := conn.Create(zkTestParent, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatalf("create %s: %v", zkTestParent, err)
	}
	t.Cleanup(func() {
		conn, err := zkConnAuth(servers, cred)
		if err != nil {
			t.Errorf("cleanup: zk connect: %v", err)
			return
		}
		defer conn.Close()
		if err := DeleteTree(conn, root); err != nil {
			t.Errorf("cleanup: delete %s: %v", root, err)
		}
	})
	return root
}

// zkConnAuth connects to servers and authenticates with the digest credentials cred.
func zkConnAuth(servers []string, cred []byte) (*zk.Conn, error) {
	conn, _, err := zk.Connect(servers, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		return nil, err
	}
	if err := conn.AddAuth("digest", cred); err != nil {
		conn.Close()
		return nil, fmt.Errorf("zk auth: %w", err)
	}
	return conn, nil
}

// DeleteTree deletes p and everything below it. A missing node is not an error.
func DeleteTree(conn *zk.Conn, p string) error {
	children, _, err := conn.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, c := range children {
		if err := DeleteTree(conn, p+"/"+c); err != nil {
			return err
		}
	}
	if err := conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	return nil
}

// Namesrv returns the RocketMQ name server addresses after checking that one accepts connections.
func Namesrv(t testing.TB) []string {
	t.Helper()
	v := Lookup(t, EnvNamesrv)
	addrs := strings.Split(v, ",")
	for _, a := range addrs {
		if c, err := net.DialTimeout("tcp", a, dialTimeout); err == nil {
			_ = c.Close()
			return addrs
		}
	}
	t.Fatalf("no RocketMQ name server in %s=%s accepts connections (is `make up` running?)", EnvNamesrv, v)
	return nil
}

// Broker returns the RocketMQ broker's address (TXKIT_ROCKETMQ_BROKER, default 127.0.0.1:20911).
func Broker(t testing.TB) string {
	t.Helper()
	if v := strings.TrimSpace(os.Getenv(EnvBroker)); v != "" {
		return v
	}
	return "127.0.0.1:20911"
}

// Topic creates a RocketMQ topic of the test's own (4 queues), returns once the name server
// knows its route, and deletes it when the test ends.
func Topic(t testing.TB) string {
	t.Helper()
	ns := Namesrv(t)
	broker := Broker(t)
	topic := "txkit-test-" + Name(t)
	if len(topic) > 120 {
		topic = topic[:120]
	}
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(ns)))
	if err != nil {
		t.Fatalf("rocketmq admin: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := adm.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(broker),
		admin.WithReadQueueNums(4), admin.WithWriteQueueNums(4)); err != nil {
		_ = adm.Close()
		t.Fatalf("create topic %s on broker %s (is `make up` running?): %v", topic, broker, err)
	}
	t.Cleanup(func() {
		defer adm.Close() //nolint:errcheck // test cleanup
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := adm.DeleteTopic(ctx, admin.WithTopicDelete(topic), admin.WithBrokerAddrDelete(broker),
			admin.WithNameSrvAddr(ns)); err != nil {
			t.Logf("cleanup: delete topic %s: %v", topic, err)
		}
	})
	// The broker registers a new topic with the name server in the background: until it has, a
	// producer's first send fails with "route info not found". Return once the name server
	// answers with the topic's queues.
	Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		qs, err := adm.FetchPublishMessageQueues(ctx, topic)
		return err == nil && len(qs) > 0
	}, "the name server to know topic %s", topic)
	return topic
}

// Eventually polls cond every interval until it returns true or timeout passes, then fails the test
// with msg. Tests wait for conditions this way instead of sleeping.
func Eventually(t testing.TB, timeout, interval time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(interval)
	}
}

// Logger returns a logger that writes warnings and errors to the test's output.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// Run runs run (a Run(ctx) method) until the test ends, then cancels its ctx, waits for it and
// reports its error.
func Run(t testing.TB, run func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// Parallel starts an integration test that works in one schema: it runs in parallel with the
// others, and gets a schema of its own (see [PG]) and a ctx that ends with the test or after
// timeout.
func Parallel(t *testing.T, timeout time.Duration) (*Schema, context.Context) {
	t.Helper()
	t.Parallel()
	s := PG(t)
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	return s, ctx
}

// ExampleDB is the set-up of an Example function, which has no *testing.T: a pool on the server
// named by TXKIT_PG_URL and, for each prefix, a schema name made of it and the same 8 random hex
// digits (the schemas are not created). done drops those schemas, then closes the pool. When
// TXKIT_PG_URL is unset or the pool cannot be made it prints why (so the example's output does
// not match) and returns ok false.
func ExampleDB(ctx context.Context, prefixes ...string) (pool *pgxpool.Pool, schemas []string, done func(), ok bool) {
	url := os.Getenv(EnvPG) // set by `make test`
	if url == "" {
		fmt.Println(EnvPG + " is not set: start the servers with `make up`")
		return nil, nil, nil, false
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Println(err)
		return nil, nil, nil, false
	}
	id := strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
	for _, p := range prefixes {
		schemas = append(schemas, p+id)
	}
	return pool, schemas, func() {
		for _, s := range schemas {
			_, _ = pool.Exec(context.WithoutCancel(ctx), "drop schema if exists "+pgx.Identifier{s}.Sanitize()+" cascade")
		}
		pool.Close()
	}, true
}

// LogWriter returns a writer that sends each write, trimmed of its trailing newlines and after
// prefix, to the test's log: for the output of a process the test starts. It is safe for
// concurrent use.
func LogWriter(tb testing.TB, prefix string) io.Writer { return &logWriter{tb: tb, prefix: prefix} }

type logWriter struct {
	tb     testing.TB
	prefix string
	mu     sync.Mutex
}

func (w *logWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tb.Logf("%s%s", w.prefix, strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// AppPool returns a pool of at most maxConns connections on s whose sessions carry
// application_name app, so that pg_stat_activity tells them apart from every other test's. When
// the test ends it is closed — unless connections are still checked out (a leak the test
// reports): Close would wait for them for ever, so their sessions are terminated instead.
func AppPool(t testing.TB, s *Schema, app string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if pool.Stat().AcquiredConns() == 0 {
			pool.Close()
			return
		}
		_, _ = s.Pool.Exec(context.Background(), `select pg_terminate_backend(pid) from pg_stat_activity where application_name = $1`, app)
	})
	return pool
}
