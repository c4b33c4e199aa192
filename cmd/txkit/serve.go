package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	dto "github.com/prometheus/client_model/go"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/admin/console"
	"github.com/txkit/txkit/lock/zklock"
)

// serveCmd runs `txkit serve`: the admin JSON API under /api/ and the web console at / on one
// listener, until ctx ends (SIGINT, SIGTERM).
func serveCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var (
		pg                pgFlags
		schema, zkAddrs   string
		listen, tokenFile string
		certFile, keyFile string
		metricsURL        string
		public            bool
		hosts             hostNames
		elections, locks  namedPaths
		outboxT, notifyT  string
		refresh           time.Duration
		retention         time.Duration
		lim               serveLimits
	)
	fs := newFlagSet("serve")
	pg.register(fs)
	fs.StringVar(&schema, "schema", "", "schema of txkit's tables (default: the URL's search_path)")
	fs.StringVar(&listen, "listen", "127.0.0.1:8089", "address to listen on (loopback unless -listen-public)")
	fs.BoolVar(&public, "listen-public", false, "allow a -listen address that is not loopback (needs -token-file)")
	fs.Var(&hosts, "host", "a name (or address) clients reach the server by, besides loopback ones (repeatable)")
	fs.StringVar(&certFile, "tls-cert", "", "serve HTTPS with this certificate (PEM; with -tls-key)")
	fs.StringVar(&keyFile, "tls-key", "", "the private key of -tls-cert (PEM)")
	fs.StringVar(&zkAddrs, "zk", "", "ZooKeeper servers for -election and -lock (default $TXKIT_ZK)")
	fs.Var(&elections, "election", "name=path of an election whose leader to show (repeatable)")
	fs.Var(&locks, "lock", "name=path of a lock whose holder and waiters to show (repeatable)")
	fs.StringVar(&tokenFile, "token-file", "", "file of bearer tokens: \"actor token\" lines, \"actor token read\" for one that only reads")
	fs.StringVar(&metricsURL, "metrics-url", "", "a Prometheus /metrics page whose txkit_ figures the overview shows")
	fs.StringVar(&outboxT, "outbox-table", "", "outbox table (default txkit_outbox)")
	fs.StringVar(&notifyT, "notify-table", "", "notifications table (default txkit_notify)")
	fs.DurationVar(&refresh, "refresh", 5*time.Second, "how often the console's pages refresh")
	fs.DurationVar(&lim.timeout, "request-timeout", 30*time.Second, "answer 503 to a request not done by then")
	fs.IntVar(&lim.requests, "max-requests", 64, "requests served at once; more are answered 503")
	fs.IntVar(&lim.conns, "max-conns", 256, "open connections; more are closed at once")
	fs.DurationVar(&retention, "audit-retention", admin.DefaultAuditRetention, "purge audit rows older than this, hourly")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("serve: unexpected arguments %q", fs.Args())
	}
	if err := lim.check(); err != nil {
		return err
	}
	if err := checkListen(listen, public); err != nil {
		return err
	}
	if (certFile == "") != (keyFile == "") {
		return usageErr("serve: -tls-cert and -tls-key go together")
	}
	if public && tokenFile == "" {
		return usageErr("serve: -listen-public needs -token-file: every read needs a credential on a public address")
	}
	if zkAddrs == "" {
		zkAddrs = getenv("TXKIT_ZK")
	}
	if (len(elections) > 0 || len(locks) > 0) && zkAddrs == "" {
		return usageErr("serve: -election and -lock need ZooKeeper: give -zk or set TXKIT_ZK")
	}
	zkCred, zkCredSet := zkAuth(getenv)
	if (len(elections) > 0 || len(locks) > 0) && !zkCredSet {
		return usageErr("serve: -election and -lock need the applications' ZooKeeper digest user: set TXKIT_ZK_AUTH=user:password")
	}
	var tokens, readers map[string]string
	generated := ""
	if tokenFile != "" {
		var err error
		if tokens, readers, err = readTokens(tokenFile); err != nil {
			return err
		}
	} else { // on loopback: a read token for this run, printed once it listens
		generated = rand.Text()
		readers = map[string]string{"local": generated}
	}
	pgURL, err := pg.resolve(getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	// The admin's own metric (refused POSTs) shows among the overview's figures.
	reg := prometheus.NewRegistry()
	var figures prometheus.Gatherer = reg
	if metricsURL != "" {
		figures = prometheus.Gatherers{reg, &urlGatherer{url: metricsURL, client: &http.Client{Timeout: 3 * time.Second}}}
	}
	opts := []admin.Option{admin.WithLogger(log), admin.WithRegisterer(reg), admin.WithGatherer(figures), admin.WithAuditRetention(retention, "@every 1h")}
	if schema != "" {
		opts = append(opts, admin.WithSchema(schema))
	}
	if outboxT != "" {
		opts = append(opts, admin.WithOutboxTable(outboxT))
	}
	if notifyT != "" {
		opts = append(opts, admin.WithNotifyTable(notifyT))
	}
	if len(tokens) > 0 {
		opts = append(opts, admin.WithTokens(tokens))
	}
	if len(readers) > 0 {
		opts = append(opts, admin.WithReadTokens(readers))
	}
	if h, _, _ := net.SplitHostPort(listen); h != "" && !net.ParseIP(h).IsUnspecified() {
		hosts = append(hosts, h) // the name or address it listens on
	}
	opts = append(opts, admin.WithAllowedHosts(hosts...))
	if len(elections) > 0 || len(locks) > 0 {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		sess, err := zklock.NewSession(sctx, strings.Split(zkAddrs, ","), zklock.WithLogger(log), zkCred)
		cancel()
		if err != nil {
			return fmt.Errorf("connect to ZooKeeper: %w", err)
		}
		defer sess.Close()
		insp := sess.Inspector()
		for _, e := range elections {
			opts = append(opts, admin.WithElections(admin.Election{Name: e.name, Path: e.path, Inspector: insp}))
		}
		for _, l := range locks {
			opts = append(opts, admin.WithLocks(admin.Lock{Name: l.name, Path: l.path, Inspector: insp}))
		}
	}
	a, pool, err := openAdmin(ctx, pgURL, serveConns, opts...)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := connect(ctx, pool); err != nil {
		return err
	}
	if a.ReadOnly() {
		log.Warn("txkit serve: read-only: no token may act (an \"actor token\" line of -token-file), so requeue, redeliver and reveal are refused (401)")
	} else if err := a.Migrate(ctx); err != nil { // the audit table
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("/api/", a.Handler())
	ui, err := console.Handler(a, console.WithRefresh(refresh), console.WithLogger(log)) // the web console (package admin/console)
	if err != nil {
		return usageErr("%v", err)
	}
	mux.Handle("/", ui)

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	ln = limitListener(ln, lim.conns)
	srv := &http.Server{Handler: limitHandler(mux, lim), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: lim.timeout + 30*time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn), TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
	scheme := "http"
	if certFile != "" {
		// Load the pair now, so that a bad one is an error at start rather than at each handshake.
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			ln.Close()
			return fmt.Errorf("-tls-cert, -tls-key: %w", err)
		}
		srv.TLSConfig.Certificates = []tls.Certificate{cert}
		scheme = "https"
	} else if public {
		log.Warn("txkit serve: -listen-public without -tls-cert: tokens and data cross the network in clear text")
	}
	if !a.ReadOnly() { // the audit table's retention (read-only, serve made no table)
		pctx, stopPurge := context.WithCancel(ctx)
		purged := make(chan error, 1)
		go func() { purged <- a.Run(pctx) }()
		defer func() { stopPurge(); <-purged }()
	}
	fmt.Fprintf(stdout, "txkit serve: listening on %s://%s\n", scheme, ln.Addr())
	if generated != "" {
		fmt.Fprintf(stdout, "txkit serve: read token (this run only; no -token-file): %s\n", generated)
	}
	done := make(chan error, 1)
	go func() {
		if certFile != "" {
			done <- srv.ServeTLS(ln, "", "")
			return
		}
		done <- srv.Serve(ln)
	}()
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("serve: shut down: %w", err)
	}
	return nil
}

// serveConns bounds serve's PostgreSQL connections: requests beyond it wait for one.
const serveConns = 8

// checkListen refuses an address that is not loopback (an empty host listens on every
// interface), unless public.
func checkListen(addr string, public bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usageErr("serve: -listen %q: %v", addr, err)
	}
	if public || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return usageErr("serve: -listen %q is not a loopback address: the console would be reachable from other machines; add -listen-public to mean it", addr)
}

// readTokens reads "actor token" lines, and "actor token read" lines of actors who only read
// (blank lines and # comments skipped), from file, which must not be readable by others.
func readTokens(file string) (tokens, readers map[string]string, err error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, fmt.Errorf("-token-file: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode().Perm()&0o077 != 0 {
		return nil, nil, fmt.Errorf("-token-file %s: mode %v: readable by others; chmod 600 it", file, st.Mode().Perm())
	}
	tokens, readers = map[string]string{}, map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(f, maxURLFile))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 && (len(fields) != 3 || fields[2] != "read") {
			return nil, nil, fmt.Errorf("-token-file %s: line %d: want \"actor token\" or \"actor token read\"", file, n)
		}
		_, dup := tokens[fields[0]]
		if _, dupR := readers[fields[0]]; dup || dupR {
			return nil, nil, fmt.Errorf("-token-file %s: line %d: actor %s given twice", file, n, fields[0])
		}
		if len(fields) == 3 {
			readers[fields[0]] = fields[1]
		} else {
			tokens[fields[0]] = fields[1]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("-token-file %s: %w", file, err)
	}
	if len(tokens)+len(readers) == 0 {
		return nil, nil, fmt.Errorf("-token-file %s: no token in it", file)
	}
	return tokens, readers, nil
}

// hostNames is the repeatable -host flag.
type hostNames []string

func (h *hostNames) String() string { return strings.Join(*h, ",") }

func (h *hostNames) Set(v string) error {
	if v == "" || strings.ContainsAny(v, "/ ") {
		return fmt.Errorf("%q: want a host name or address", v)
	}
	*h = append(*h, v)
	return nil
}

// namedPaths is a repeatable name=path flag.
type namedPaths []struct{ name, path string }

func (n *namedPaths) String() string {
	var s []string
	for _, x := range *n {
		s = append(s, x.name+"="+x.path)
	}
	return strings.Join(s, ",")
}

func (n *namedPaths) Set(v string) error {
	name, path, ok := strings.Cut(v, "=")
	if !ok || name == "" || !strings.HasPrefix(path, "/") {
		return fmt.Errorf("%q: want name=/zookeeper/path", v)
	}
	*n = append(*n, struct{ name, path string }{name, path})
	return nil
}

// urlGatherer reads a Prometheus text /metrics page: the figures of another process (the
// coordinator's, the relay's) for the overview.
type urlGatherer struct {
	url    string
	client *http.Client
}

func (g *urlGatherer) Gather() ([]*dto.MetricFamily, error) {
	resp, err := g.client.Get(g.url)
	if err != nil {
		return nil, fmt.Errorf("metrics %s: %w", g.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics %s: HTTP %d", g.url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("metrics %s: %w", g.url, err)
	}
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]*dto.MetricFamily, 0, len(names))
	for _, n := range names {
		out = append(out, fams[n])
	}
	return out, nil
}
