package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	dto "github.com/prometheus/client_model/go"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/admin/console"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
)

// serveFlags are the flags of `txkit serve`.
type serveFlags struct {
	zk                string
	listen, tokenFile string
	certFile, keyFile string
	metricsURLs       metricsURLs
	public            bool
	hosts             hostNames
	elections, locks  targets
	outboxT, notifyT  string
	refresh           time.Duration
	retention         time.Duration
	lim               serveLimits
}

func serveFlagSet(fs *flag.FlagSet, e *env) {
	f := &e.serve
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8089", "`address` to listen on: a non-loopback one needs -listen-public, which needs\n"+
		"-token-file")
	fs.BoolVar(&f.public, "listen-public", false, "allow a -listen address that is not loopback (needs -token-file)")
	fs.Var(&f.hosts, "host", "a `name` (or address) clients use besides localhost and the -listen address\n"+
		"(repeatable); other Host headers are refused (421)")
	fs.StringVar(&f.tokenFile, "token-file", "", "`file` of bearer tokens, mode 600: \"actor token\" lines (may act), \"actor\n"+
		"token read\" lines (may only read). Every read needs a token: without the\n"+
		"file, serve prints a read token for the run")
	fs.StringVar(&f.certFile, "tls-cert", "", "serve HTTPS with this PEM certificate `file` (with -tls-key)")
	fs.StringVar(&f.keyFile, "tls-key", "", "the private key `file` of -tls-cert (PEM)")
	fs.StringVar(&f.zk, "zk", "", "ZooKeeper `servers`, host:port,..., for -election and -lock on ZooKeeper (default\n"+
		"$TXKIT_ZK; credentials from $TXKIT_ZK_AUTH, user:password: the applications' digest user)")
	fs.Var(&f.elections, "election", "`name=where` of an election whose leader to show (repeatable); where is\n"+
		"  /zk/path                   a ZooKeeper election (zklock, needs -zk)\n"+
		"  pg:[schema]/name           a PostgreSQL lease election (pglock) in serve's database,\n"+
		"                             its table in schema (default: -schema)\n"+
		"  redis:host:port/name       a Redis election (redislock)\n"+
		"  redlock:host:port,.../name a Redlock election on those Redis servers\n"+
		"name being the one given to the backend's NewElector (it may hold slashes)")
	fs.Var(&f.locks, "lock", "`name=where` of a lock whose holder and waiters to show (repeatable); where as\n"+
		"for -election, name the one given to NewMutex")
	fs.Var(&f.metricsURLs, "metrics-url", "a Prometheus /metrics page (`URL`) whose txkit_ figures the overview shows\n"+
		"(repeatable, one per instance: the figures are summed, each series labelled\n"+
		"with its page's instance, host:port)")
	fs.StringVar(&f.outboxT, "outbox-table", "", "outbox `table` (default txkit_outbox)")
	fs.StringVar(&f.notifyT, "notify-table", "", "notifications `table` (default txkit_notify)")
	fs.DurationVar(&f.refresh, "refresh", 5*time.Second, "refresh the console's pages every `D`")
	fs.DurationVar(&f.lim.timeout, "request-timeout", 30*time.Second, "answer 503 to a request not done within `D`")
	fs.IntVar(&f.lim.requests, "max-requests", 64, "serve `N` requests at once; more are answered 503")
	fs.IntVar(&f.lim.conns, "max-conns", 256, "hold `N` connections open; more are closed at once")
	fs.DurationVar(&f.retention, "audit-retention", admin.DefaultAuditRetention, "purge audit rows older than `D`, hourly")
	e.registerPG(fs, "txkit's tables")
	registerShards(fs, e)
}

// serve runs `txkit serve`: the admin JSON API under /api/ and the web console at / on one
// listener, until ctx ends (SIGINT, SIGTERM).
func serve(ctx context.Context, e *env) error {
	f := &e.serve
	zkCred, err := f.check(e)
	if err != nil {
		return err
	}
	tokens, readers, generated, err := f.tokens()
	if err != nil {
		return err
	}
	pgURL, err := e.pg.resolve(e.getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(e.stderr, nil))
	pool, err := newPoolOf(ctx, pgURL, serveConns)
	if err != nil {
		return err
	}
	defer pool.Close()
	opts, closeInspectors, err := f.adminOptions(ctx, pool, e.schema, log, tokens, readers, zkCred)
	if err != nil {
		return err
	}
	defer closeInspectors()
	if len(e.shards) > 0 {
		logs, closeShards, err := e.shardLogs(ctx, admin.StandardLogs(), serveConns)
		if err != nil {
			return err
		}
		defer closeShards()
		opts = append(opts, admin.WithTables(admin.Tables{Logs: logs}))
	}
	a, err := admin.New(pool, opts...)
	if err != nil {
		return usageErr("%v", err)
	}
	if err := connect(ctx, pool); err != nil {
		return err
	}
	if a.ReadOnly() {
		log.Warn("txkit serve: read-only: no token may act (an \"actor token\" line of -token-file), so requeue, redeliver and reveal are refused (401)")
	} else if err := a.Migrate(ctx); err != nil { // the audit table
		return err
	}
	srv, ln, scheme, err := f.server(a, log)
	if err != nil {
		return err
	}
	if !a.ReadOnly() { // the audit table's retention (read-only, serve made no table)
		pctx, stopPurge := context.WithCancel(ctx)
		purged := make(chan error, 1)
		go func() { purged <- a.Run(pctx) }()
		defer func() { stopPurge(); <-purged }()
	}
	fmt.Fprintf(e.stdout, "txkit serve: listening on %s://%s\n", scheme, ln.Addr())
	if generated != "" {
		fmt.Fprintf(e.stdout, "txkit serve: read token (this run only; no -token-file): %s\n", generated)
	}
	return f.serveUntil(ctx, srv, ln)
}

// check refuses flags that do not go together, and returns the ZooKeeper credentials of
// $TXKIT_ZK_AUTH; -zk defaults to $TXKIT_ZK.
func (f *serveFlags) check(e *env) (zklock.SessionOption, error) {
	if err := e.noArgs("serve"); err != nil {
		return nil, err
	}
	if err := f.lim.check(); err != nil {
		return nil, err
	}
	if err := checkListen(f.listen, f.public); err != nil {
		return nil, err
	}
	if (f.certFile == "") != (f.keyFile == "") {
		return nil, usageErr("serve: -tls-cert and -tls-key go together")
	}
	if f.public && f.tokenFile == "" {
		return nil, usageErr("serve: -listen-public needs -token-file: every read needs a credential on a public address")
	}
	if f.zk == "" {
		f.zk = e.getenv("TXKIT_ZK")
	}
	onZK := uses(backendZK, f.elections, f.locks)
	if onZK && f.zk == "" {
		return nil, usageErr("serve: -election and -lock need ZooKeeper: give -zk or set TXKIT_ZK")
	}
	zkCred, zkCredSet := zkAuth(e.getenv)
	if onZK && !zkCredSet {
		return nil, usageErr("serve: -election and -lock need the applications' ZooKeeper digest user: set TXKIT_ZK_AUTH=user:password")
	}
	return zkCred, nil
}

// tokens returns the tokens of -token-file; without it (on loopback), a read token for this run,
// generated, which serve prints once it listens.
func (f *serveFlags) tokens() (tokens, readers map[string]string, generated string, err error) {
	if f.tokenFile != "" {
		tokens, readers, err = readTokens(f.tokenFile)
		return tokens, readers, "", err
	}
	generated = rand.Text()
	return nil, map[string]string{"local": generated}, generated, nil
}

// adminOptions returns the options of serve's Admin. With -election or -lock it opens what reads
// them (a ZooKeeper session, pglock clients on pool, Redis clients); closeInspectors closes those.
func (f *serveFlags) adminOptions(ctx context.Context, pool *pgxpool.Pool, schema string, log *slog.Logger, tokens, readers map[string]string,
	zkCred zklock.SessionOption) (opts []admin.Option, closeInspectors func(), err error) {
	// The admin's own metric (refused POSTs) shows among the overview's figures.
	reg := prometheus.NewRegistry()
	opts = []admin.Option{admin.WithLogger(log), admin.WithMetrics(reg, f.figures(reg)), admin.WithAuditRetention(f.retention, "@every 1h")}
	if schema != "" {
		opts = append(opts, admin.WithSchema(schema))
	}
	opts = append(opts, admin.WithTables(admin.Tables{Outbox: f.outboxT, Notify: f.notifyT})) // "": the default
	opts = append(opts, admin.WithTokens(tokens, readers))                                    // nil maps add nothing
	hosts := f.hosts
	if h, _, _ := net.SplitHostPort(f.listen); h != "" && !net.ParseIP(h).IsUnspecified() {
		hosts = append(hosts, h) // the name or address it listens on
	}
	opts = append(opts, admin.WithAllowedHosts(hosts...))
	if len(f.elections) == 0 && len(f.locks) == 0 {
		return opts, func() {}, nil
	}
	in := &inspectors{ctx: ctx, log: log, pool: pool, schema: schema, byKey: map[string]lock.Inspector{},
		zk: func(ctx context.Context) (*zklock.Session, error) {
			return zklock.NewSession(ctx, strings.Split(f.zk, ","), zklock.WithLogger(log), zkCred)
		}}
	opt, err := in.inspected(f.elections, f.locks)
	if err != nil {
		in.closeAll()
		return nil, nil, err
	}
	return append(opts, opt), in.closeAll, nil
}

// figures gathers reg and the pages of -metrics-url, side by side (see [urlGatherer]).
func (f *serveFlags) figures(reg prometheus.Gatherer) prometheus.Gatherer {
	g := prometheus.Gatherers{reg}
	for _, u := range f.metricsURLs {
		g = append(g, &urlGatherer{url: u, client: &http.Client{Timeout: 3 * time.Second}})
	}
	return g
}

// server returns the HTTP server of a's API and console, the listener it is to serve (bounded by
// -max-conns) and its scheme ("https" with -tls-cert).
func (f *serveFlags) server(a *admin.Admin, log *slog.Logger) (*http.Server, net.Listener, string, error) {
	mux := http.NewServeMux()
	mux.Handle("/api/", a.Handler())
	ui, err := console.Handler(a, console.WithRefresh(f.refresh), console.WithLogger(log)) // the web console (package admin/console)
	if err != nil {
		return nil, nil, "", usageErr("%v", err)
	}
	mux.Handle("/", ui)

	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return nil, nil, "", fmt.Errorf("listen on %s: %w", f.listen, err)
	}
	ln = limitListener(ln, f.lim.conns)
	srv := &http.Server{Handler: limitHandler(mux, f.lim), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: f.lim.timeout + 30*time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn), TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
	scheme := "http"
	if f.certFile != "" {
		// Load the pair now, so that a bad one is an error at start rather than at each handshake.
		cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
		if err != nil {
			ln.Close()
			return nil, nil, "", fmt.Errorf("-tls-cert, -tls-key: %w", err)
		}
		srv.TLSConfig.Certificates = []tls.Certificate{cert}
		scheme = "https"
	} else if f.public {
		log.Warn("txkit serve: -listen-public without -tls-cert: tokens and data cross the network in clear text")
	}
	return srv, ln, scheme, nil
}

// serveUntil serves srv on ln until ctx ends, then shuts it down within 10 s.
func (f *serveFlags) serveUntil(ctx context.Context, srv *http.Server, ln net.Listener) error {
	done := make(chan error, 1)
	go func() {
		if f.certFile != "" {
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
	err := srv.Shutdown(sctx)
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

// metricsURLs is the repeatable -metrics-url flag: one /metrics page per instance.
type metricsURLs []string

func (m *metricsURLs) String() string { return strings.Join(*m, ",") }

func (m *metricsURLs) Set(v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want an http:// or https:// URL", v)
	}
	if slices.Contains(*m, v) {
		return fmt.Errorf("%q given twice", v)
	}
	*m = append(*m, v)
	return nil
}

// urlGatherer reads a Prometheus text /metrics page: the figures of another process (the
// coordinator's, the relay's) for the overview. Each series gets the label instance (the page's
// host:port) unless it has one, so that the pages of several instances of one program, which
// hold the same series, gather side by side (the overview sums them).
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
	instance := "instance"
	host := resp.Request.URL.Host
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]*dto.MetricFamily, 0, len(names))
	for _, n := range names {
		for _, m := range fams[n].GetMetric() {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == instance }) {
				m.Label = append(m.Label, &dto.LabelPair{Name: &instance, Value: &host})
				sort.Slice(m.Label, func(i, j int) bool { return m.Label[i].GetName() < m.Label[j].GetName() })
			}
		}
		out = append(out, fams[n])
	}
	return out, nil
}
