package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/outbox"
)

func TestServeUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"all interfaces", []string{"serve", "-listen", ":8089"}, "not a loopback address"},
		{"public address", []string{"serve", "-listen", "0.0.0.0:8089"}, "add -listen-public"},
		{"bad listen", []string{"serve", "-listen", "nope"}, `-listen "nope"`},
		{"bad election", []string{"serve", "-election", "tcc"}, "want name=/zk/path"},
		{"election without zk", []string{"serve", "-election", "tcc=/txkit/tcc"}, "give -zk or set TXKIT_ZK"},
		{"election without zk credentials", []string{"serve", "-zk", "127.0.0.1:1", "-lock", "l=/txkit/l"}, "set TXKIT_ZK_AUTH"},
		{"arguments", []string{"serve", "extra"}, "unexpected arguments"},
		{"public without tokens", []string{"serve", "-listen", "0.0.0.0:8089", "-listen-public"}, "-listen-public needs -token-file"},
		{"cert without key", []string{"serve", "-tls-cert", "cert.pem"}, "-tls-cert and -tls-key go together"},
		{"bad host", []string{"serve", "-host", "a b"}, "want a host name or address"},
		{"no url", []string{"serve"}, "TXKIT_PG_URL"},
		{"no request timeout", []string{"serve", "-request-timeout", "0s"}, "-request-timeout 0s: must be positive"},
		{"no requests", []string{"serve", "-max-requests", "0"}, "-max-requests 0"},
		{"no connections", []string{"serve", "-max-conns", "0"}, "-max-conns 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := txkit(t, nil, tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr, exitUsage, tc.want)
			}
		})
	}
	dir := t.TempDir()
	loose := filepath.Join(dir, "tokens")
	if err := os.WriteFile(loose, []byte("oncall serve-token-0123456789\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fakePG := map[string]string{"TXKIT_PG_URL": "postgres://x@127.0.0.1:1/x"}
	code, _, stderr := txkit(t, fakePG, "serve", "-token-file", loose)
	if code != exitFail || !strings.Contains(stderr, "readable by others") {
		t.Fatalf("a token file readable by others: exit %d, %q", code, stderr)
	}
	// A token-file actor may not pass for the txkit command's actors ("cli:$USER").
	cli := filepath.Join(dir, "cli-tokens")
	if err := os.WriteFile(cli, []byte("cli:alice serve-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = txkit(t, fakePG, "serve", "-token-file", cli)
	if code != exitUsage || !strings.Contains(stderr, `token of "cli:alice": the prefix "cli:" is the txkit command's`) {
		t.Fatalf("a token-file actor named cli:alice: exit %d, %q", code, stderr)
	}
	code, _, stderr = txkit(t, fakePG, "serve", "-audit-retention", "1m")
	if code != exitUsage || !strings.Contains(stderr, "audit retention 1m0s: must be longer than the HMAC window") {
		t.Fatalf("-audit-retention 1m: exit %d, %q", code, stderr)
	}
}

// txkit serve, built and started as a process, answers the API (and the console) on loopback with
// the leader of a real ZooKeeper election, refuses a POST without its token, and stops on SIGTERM.
func TestIntegrationServe(t *testing.T) {
	s := testenv.PG(t)
	ctx := t.Context()
	ob, err := outbox.New(s.Pool, outbox.WithTable(s.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Enqueue(ctx, s.Pool, outbox.Message{Topic: "orders", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	path := testenv.ZKRoot(t) + "/leader"
	lead, err := zkenv.Elector(t, path, "coordinator-1").Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lead.Resign(context.WithoutCancel(ctx)) })

	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	const token, readToken = "serve-token-0123456789", "serve-read-token-0123456789"
	if err := os.WriteFile(tokens, []byte("# who may requeue\noncall "+token+"\ndashboard "+readToken+" read\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, dir, []string{"TXKIT_PG_URL=" + s.URL}, "serve", "-listen", "127.0.0.1:0", "-schema", s.Name, "-token-file", tokens,
		"-zk", strings.Join(testenv.ZK(t), ","), "-election", "tcc recovery="+path)
	base := p.base
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("listening on %s, not loopback", base)
	}

	get := func(method, p string, headers ...string) (int, string, []byte) {
		t.Helper()
		return call(t, http.DefaultClient, method, base+p, headers...)
	}
	code, _, body := get("GET", "/api/overview", "Authorization", "Bearer "+readToken)
	var ov admin.Overview
	if err := json.Unmarshal(body, &ov); code != 200 || err != nil {
		t.Fatalf("GET /api/overview: %d %s (%v)", code, body, err)
	}
	if len(ov.Leaders) != 1 || ov.Leaders[0].ID != "coordinator-1" || ov.Leaders[0].Token != lead.Token() ||
		ov.Outbox == nil || ov.Outbox.Pending != 1 {
		t.Fatalf("overview: %s", body)
	}
	// Reads need a token; a foreign Host is refused whatever it carries.
	for _, path := range []string{"/api/overview", "/api/outbox/dead", "/api/transactions/some-gid", "/"} {
		if code, _, body := get("GET", path); code != 401 {
			t.Fatalf("GET %s without a token: %d %.200s", path, code, body)
		}
		if code, _, body := get("GET", path, "Host", "rebind.attacker.example", "Authorization", "Bearer "+token); code != 421 {
			t.Fatalf("GET %s with a foreign Host: %d %.200s", path, code, body)
		}
	}
	requeue := "/api/outbox/dead/" + uuid.NewString() + "/requeue"
	if code, _, body := get("POST", requeue); code != 401 {
		t.Fatalf("POST without the token: %d %s", code, body)
	}
	if code, _, body := get("POST", requeue, "Authorization", "Bearer "+readToken); code != 401 {
		t.Fatalf("POST with the read token: %d %s", code, body)
	}
	if code, _, body := get("POST", requeue, "Authorization", "Bearer "+token); code != 404 {
		t.Fatalf("POST with the token, unknown message: %d %s", code, body)
	}
	if code, ct, body := get("GET", "/", "Authorization", "Bearer "+readToken); code != 200 || !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("GET / (the console): %d %s %.200s", code, ct, body)
	}
	p.stop(t)
}

// -listen-public refuses to start without a read credential; with -tls-cert and -tls-key (a
// self-signed certificate made here) serve answers HTTPS only; without -token-file on loopback it
// prints a read token of the run, which reads but cannot act.
func TestIntegrationServeTLS(t *testing.T) {
	s := testenv.PG(t)
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	env := map[string]string{"TXKIT_PG_URL": s.URL}
	code, _, stderr := txkit(t, env, "serve", "-listen", "127.0.0.1:0", "-listen-public", "-tls-cert", certFile, "-tls-key", keyFile)
	if code != exitUsage || !strings.Contains(stderr, "-listen-public needs -token-file") {
		t.Fatalf("-listen-public without -token-file: exit %d, %q", code, stderr)
	}

	p := startServe(t, dir, []string{"TXKIT_PG_URL=" + s.URL}, "serve", "-listen", "127.0.0.1:0", "-schema", s.Name,
		"-tls-cert", certFile, "-tls-key", keyFile)
	if !strings.HasPrefix(p.base, "https://127.0.0.1:") {
		t.Fatalf("listening on %s, want https", p.base)
	}
	var token string
	select {
	case line := <-p.lines:
		var ok bool
		if token, ok = strings.CutPrefix(line, "txkit serve: read token (this run only; no -token-file): "); !ok || len(token) < 16 {
			t.Fatalf("second line %q, want the read token", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("txkit serve does not print its read token")
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	if code, _, body := call(t, client, "GET", p.base+"/api/leaders", "Authorization", "Bearer "+token); code != 200 || string(body) != "[]\n" {
		t.Fatalf("GET /api/leaders over TLS with the printed token: %d %s", code, body)
	}
	if code, _, _ := call(t, client, "GET", p.base+"/api/leaders"); code != 401 {
		t.Fatalf("GET /api/leaders over TLS without a token: %d", code)
	}
	if code, _, _ := call(t, client, "POST", p.base+"/api/outbox/dead/"+uuid.NewString()+"/requeue", "Authorization", "Bearer "+token); code != 401 {
		t.Fatalf("POST with the read token: %d", code)
	}
	plain := strings.Replace(p.base, "https://", "http://", 1) + "/api/leaders"
	if code, _, _ := call(t, http.DefaultClient, "GET", plain); code != http.StatusBadRequest { // Go's answer to HTTP on a TLS port
		t.Fatalf("plain HTTP to the TLS port: %d", code)
	}
	p.stop(t)
}

// served is a txkit serve process.
type served struct {
	base    string
	lines   <-chan string // stdout after the "listening on" line
	exited  chan error
	cmd     *exec.Cmd
	stopped bool
}

// startServe builds txkit into dir, runs it with args and env, and waits for its "listening on"
// line. The process is killed at the end of the test unless stop ended it.
func startServe(t *testing.T, dir string, env []string, args ...string) *served {
	t.Helper()
	bin := filepath.Join(dir, "txkit")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = testenv.LogWriter(t, "txkit serve: ")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &served{exited: make(chan error, 1), cmd: cmd}
	lines := make(chan string, 16)
	p.lines = lines
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if !p.stopped {
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	select {
	case line := <-lines:
		var ok bool
		if p.base, ok = strings.CutPrefix(line, "txkit serve: listening on "); !ok {
			t.Fatalf("first line %q", line)
		}
	case err := <-p.exited:
		p.stopped = true
		t.Fatalf("txkit serve exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("txkit serve does not say where it listens")
	}
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *served) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.stopped = true
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("txkit serve after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Fatal("txkit serve does not stop on SIGTERM")
	}
}

// call sends method url with the headers given as name, value pairs ("Host" sets the request's
// Host) and returns the status, the Content-Type and the body.
func call(t *testing.T, client *http.Client, method, url string, headers ...string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key into dir, and returns
// their files and a pool that trusts the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "txkit serve test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// -metrics-url reads another process's /metrics page.
func TestURLGatherer(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "txkit_relay_published_total", Help: "h"})
	reg.MustRegister(c)
	c.Add(5)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	g := &urlGatherer{url: srv.URL, client: srv.Client()}
	fams, err := g.Gather()
	if err != nil || len(fams) != 1 || fams[0].GetName() != "txkit_relay_published_total" || fams[0].GetMetric()[0].GetCounter().GetValue() != 5 {
		t.Fatalf("Gather = %v, %v", fams, err)
	}
	g.url = srv.URL + "/nothing"
	srv.Config.Handler = http.NotFoundHandler()
	if _, err := g.Gather(); err == nil || !strings.Contains(err.Error(), "HTTP 404") {
		t.Fatalf("Gather of a 404 = %v", err)
	}
}

// -metrics-url given once per instance: the overview's figures are the sum of the pages, each
// series labelled with its page's instance; the same URL twice is refused.
func TestIntegrationServeMetricsURLs(t *testing.T) {
	page := func(v float64) string {
		reg := prometheus.NewRegistry()
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "txkit_relay_published_total", Help: "h"}, []string{"topic"})
		reg.MustRegister(c)
		c.WithLabelValues("orders").Add(v)
		srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		t.Cleanup(srv.Close)
		return srv.URL + "/metrics"
	}
	a, b := page(5), page(7)
	e := &env{getenv: func(string) string { return "" }}
	fs := newFlagSet("serve")
	serveFlagSet(fs, e)
	if err := fs.Parse([]string{"-metrics-url", a, "-metrics-url", b}); err != nil {
		t.Fatal(err)
	}
	g := e.serve.figures(prometheus.NewRegistry())
	fams, err := g.Gather()
	if err != nil || len(fams) != 1 || len(fams[0].GetMetric()) != 2 {
		t.Fatalf("Gather = %v, %v", fams, err)
	}
	for _, m := range fams[0].GetMetric() {
		if l := m.GetLabel(); len(l) != 2 || l[0].GetName() != "instance" || !strings.Contains(a+b, "//"+l[0].GetValue()+"/") {
			t.Fatalf("labels %v", l)
		}
	}
	s := testenv.PG(t)
	adm, err := admin.New(s.Pool, admin.WithSchema(s.Name), admin.WithMetrics(nil, g))
	if err != nil {
		t.Fatal(err)
	}
	ov, err := adm.Overview(t.Context())
	if err != nil || ov.Figures["txkit_relay_published_total"] != 12 {
		t.Fatalf("Overview figures = %v, %v; want txkit_relay_published_total 12", ov.Figures, err)
	}
	code, _, stderr := txkit(t, nil, "serve", "-metrics-url", a, "-metrics-url", a)
	if code != exitUsage || !strings.Contains(stderr, "given twice") {
		t.Fatalf("the same -metrics-url twice: exit %d, %q", code, stderr)
	}
	code, _, stderr = txkit(t, nil, "serve", "-metrics-url", "localhost:9090")
	if code != exitUsage || !strings.Contains(stderr, "want an http:// or https:// URL") {
		t.Fatalf("-metrics-url without a scheme: exit %d, %q", code, stderr)
	}
}
