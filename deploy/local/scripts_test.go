// The tests of the deploy/local scripts, beside them: they run the real scripts against the
// servers `make up` started, and show that:
//
//   - a server start fails at once, naming the port and the process that holds it, when a port is
//     held by a process this checkout (TXKIT_HOME) did not start;
//   - deploy/local/status probes every server, says whether the process that answers is this
//     checkout's, and creates nothing;
//   - a daemon started by the scripts (start_daemon, without_fds in deploy/local/lib.sh) holds no
//     file descriptor of its caller beyond stdin, stdout and stderr;
//   - deploy/local/rocketmq topic -g GROUP also creates the consumer group's retry topic.
//
// Run them with
//
//	set -a; eval "$(deploy/local/env)"; set +a
//	go test -count=1 ./deploy/local/
package local_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txkit/txkit/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// aclBrokerPort is the ACL broker's port, fixed in deploy/local/lib.sh (no environment variable
// names it).
const aclBrokerPort = 21911

// pgShardPort is the first log shard's port, fixed in deploy/local/lib.sh (PG_SHARD_PORTS).
const pgShardPort = 55452

// The ports of deploy/local/redis-sentinel and deploy/local/rocketmq-cluster, fixed in lib.sh.
const (
	sentinelPrimaryPort  = 26390
	dledgerNamesrvPort   = 19886
	dledgerNode1Port     = 30921
	twoMasterNamesrvPort = 19896
)

// failFast is how soon a start must fail when a port is taken (the old scripts waited up to 60 s).
const failFast = 10 * time.Second

// upAllUp bounds `up` when every server already runs: it starts nothing, but each of its scripts
// asks its servers how they are (the RocketMQ clusters' roles through mqadmin, a JVM start; the
// Sentinels' view of the primary; Patroni's leader): 28 s were measured while
// the suite's other packages load both cores.
const upAllUp = 45 * time.Second

// TestIntegrationStartFailsFastOnTakenPort: every way of starting a server (up, and each script's
// start command) with a TXKIT_HOME of its own, while the servers of another TXKIT_HOME hold the
// ports, fails within seconds, naming the port, the pid that holds it and that pid's command line.
//
// The TXKIT_HOME given lies below a regular file, so it cannot be created: were a port ever free
// when the script looks (a server restarted by another test at that very moment), the script
// would fail creating its home instead of starting a server in the test's directory.
func TestIntegrationStartFailsFastOnTakenPort(t *testing.T) {
	ports := serverPorts(t)
	cases := []struct {
		name string
		args []string
		port int
	}{
		{"up", []string{"up"}, ports.pg},
		{"postgres start", []string{"postgres", "start"}, ports.pg},
		{"pg-shards start", []string{"pg-shards", "start"}, pgShardPort},
		{"zk start", []string{"zk", "start"}, ports.zk[0]},
		{"zk start N", []string{"zk", "start", strconv.Itoa(len(ports.zk))}, ports.zk[len(ports.zk)-1]},
		{"rocketmq start", []string{"rocketmq", "start"}, ports.namesrv},
		{"rocketmq start-broker", []string{"rocketmq", "start-broker"}, ports.broker},
		{"rocketmq start-acl-broker", []string{"rocketmq", "start-acl-broker"}, aclBrokerPort},
		{"redis start", []string{"redis", "start"}, ports.redis["single"]},
		{"redis start replica", []string{"redis", "start", "replica"}, ports.redis["replica"]},
		{"redis-sentinel start", []string{"redis-sentinel", "start"}, sentinelPrimaryPort},
		{"rocketmq-cluster start", []string{"rocketmq-cluster", "start"}, dledgerNamesrvPort},
		{"rocketmq-cluster start two-masters", []string{"rocketmq-cluster", "start", "two-masters"}, twoMasterNamesrvPort},
		{"rocketmq-cluster start-node", []string{"rocketmq-cluster", "start-node", "n1"}, dledgerNode1Port},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			holders := listeners(t, tc.port)
			if len(holders) == 0 {
				t.Fatalf("no process listens on port %d: this test needs the servers of `make up`", tc.port)
			}
			file := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(file, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			home := filepath.Join(file, "home")
			start := time.Now()
			out, err := runScript(t, home, ports, tc.args...)
			took := time.Since(start)
			t.Logf("deploy/local/%s (%v):\n%s", strings.Join(tc.args, " "), took.Round(time.Millisecond), out)
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the script did not fail with an exit status: %v", err)
			}
			if took > failFast {
				t.Errorf("failed after %v, want within %v", took, failFast)
			}
			if want := fmt.Sprintf("port %d is already in use by pid ", tc.port); !strings.Contains(out, want) {
				t.Fatalf("output does not say %q", want)
			}
			pid := pidAfter(out, fmt.Sprintf("port %d is already in use by pid ", tc.port))
			if !slices.Contains(holders, pid) {
				t.Errorf("output names pid %d; the processes listening on %d are %v", pid, tc.port, holders)
			}
			if cmd := cmdline(pid); len(cmd) < 20 || !strings.Contains(out, cmd[:20]) {
				t.Errorf("output does not show the command line of pid %d (%q)", pid, cmd)
			}
			for _, want := range []string{"TXKIT_HOME=" + home, "Stop that process, or point TXKIT_HOME at the checkout that runs it"} {
				if !strings.Contains(out, want) {
					t.Errorf("output does not say %q", want)
				}
			}
		})
	}
}

// TestIntegrationStatusCreatesNothing: deploy/local/status with a TXKIT_HOME that does not exist
// probes every server, reports each up and not this checkout's (naming the pid that answers), exits
// 0 and creates nothing; with the TXKIT_HOME the servers were started from, it reports each as
// this checkout's.
func TestIntegrationStatusCreatesNothing(t *testing.T) {
	ports := serverPorts(t)
	dir := t.TempDir()
	fresh := filepath.Join(dir, "home")
	out, err := runScript(t, fresh, ports, "status")
	t.Logf("TXKIT_HOME=%s deploy/local/status:\n%s", fresh, out)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) > 0 {
		t.Fatalf("status created %v in %s (err %v), want nothing", entries, dir, err)
	}
	lines := statusLines(t, out, ports)
	for name, line := range lines {
		port := ports.of(name)
		holders := listeners(t, port)
		if !strings.Contains(line, " up (") {
			t.Errorf("%s: %q, want up", name, line)
		}
		want := "NOT this checkout's: pid "
		if !strings.Contains(line, want) || !slices.Contains(holders, pidAfter(line, want)) {
			t.Errorf("%s: %q, want %q with one of %v", name, line, want, holders)
		}
	}

	home := homeOf(t, listeners(t, ports.pg))
	out, err = runScript(t, home, ports, "status")
	t.Logf("TXKIT_HOME=%s deploy/local/status:\n%s", home, out)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	for name, line := range statusLines(t, out, ports) {
		holders := listeners(t, ports.of(name))
		want := "this checkout's (pid "
		if !strings.Contains(line, " up (") || !strings.Contains(line, want) || !slices.Contains(holders, pidAfter(line, want)) {
			t.Errorf("%s: %q, want up and %q with one of %v", name, line, want, holders)
		}
	}
}

// TestIntegrationUpLeavesThisCheckoutsServersAlone: deploy/local/up with the TXKIT_HOME the
// servers were started from succeeds at once and leaves every server running as it was (same pids):
// the port checks accept this checkout's own servers. It runs a copy of the scripts in which
// starting anything (start_daemon, without_fds, apt_install) fails, so that even a server found
// down is not started behind the other tests' backs.
func TestIntegrationUpLeavesThisCheckoutsServersAlone(t *testing.T) {
	p := serverPorts(t)
	home := homeOf(t, listeners(t, p.pg))
	all := []int{p.pg, p.namesrv, p.broker, aclBrokerPort}
	all = append(all, p.zk...)
	for _, name := range redisNames {
		all = append(all, p.redis[name])
	}
	before := map[int][]int{}
	for _, port := range all {
		before[port] = listeners(t, port)
	}

	src := filepath.Join(repoDir(t), "deploy", "local")
	dir := filepath.Join(t.TempDir(), "deploy", "local")
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "lib.sh"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(`
start_daemon() { die "would start a daemon: $*"; }
without_fds() { die "would run: $*"; }
apt_install() { die "would install: $*"; }
`)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"up", "postgres", "pg-ha", "zk", "rocketmq", "rocketmq-cluster", "redis", "redis-sentinel", "env"} {
		if err := os.Chmod(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	out, err := runScriptIn(t, dir, home, p, nil, "up")
	took := time.Since(start)
	t.Logf("TXKIT_HOME=%s deploy/local/up (%v):\n%s", home, took.Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	if took > upAllUp {
		t.Errorf("up took %v with every server up, want within %v", took, upAllUp)
	}
	for _, port := range all {
		if now := listeners(t, port); !slices.Equal(now, before[port]) {
			t.Errorf("port %d: held by %v before up, by %v after", port, before[port], now)
		}
	}
}

// TestIntegrationDaemonsInheritNoDescriptors: a daemon started through deploy/local/lib.sh, as every
// server is (start_daemon for the Java servers, without_fds around pg_ctl, which forks the
// postmaster), holds none of its caller's descriptors above 2: neither the write end of a pipe the
// caller reads (like a test runner's) nor a lock file. The pipe reaches end of file as soon as the
// script returns.
func TestIntegrationDaemonsInheritNoDescriptors(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs deploy/local/lib.sh")
	}
	lib := filepath.Join(repoDir(t), "deploy", "local", "lib.sh")
	cases := []struct {
		name   string
		script string // $1: lib.sh, $2: the pid file to write, $3: a log file
	}{
		{"start_daemon", `source "$1"; start_daemon "$2" "$3" sleep 600`},
		// As pg_ctl start: a command that forks the daemon and returns; its output goes to the log.
		{"without_fds", `source "$1"; without_fds bash -c 'sleep 600 & echo $! >"$0"' "$2" >>"$3" 2>&1`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			pidf := filepath.Join(dir, "daemon.pid")
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			lockPath := filepath.Join(dir, "lock")
			lockFile, err := os.Create(lockPath)
			if err != nil {
				t.Fatal(err)
			}
			defer lockFile.Close()
			pipe := pipeLink(t, w)
			cmd := exec.Command("bash", "-c", tc.script, "bash", lib, pidf, filepath.Join(dir, "daemon.log"))
			cmd.Env = append(os.Environ(), "TXKIT_HOME="+filepath.Join(dir, "home"))
			cmd.ExtraFiles = []*os.File{w, lockFile} // descriptors 3 and 4 of the script
			out, err := cmd.CombinedOutput()
			w.Close()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			b, err := os.ReadFile(pidf)
			if err != nil {
				t.Fatal(err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("pid file: %v", err)
			}
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
				return cmdline(pid) == "sleep 600"
			}, "pid %d runs sleep 600 (it runs %q)", pid, cmdline(pid))
			// Right after exec the dynamic loader briefly holds the libraries it maps (libc as
			// descriptor 3): wait for that to pass. An inherited descriptor never goes away, and
			// checkDescriptors then names it.
			for deadline := time.Now().Add(5 * time.Second); openAbove2(pid) > 0 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond) // polling, with a deadline
			}
			checkDescriptors(t, pid, pipe, lockPath, true)
			checkEOF(t, r)
		})
	}
}

// TestIntegrationPostgresInheritsNoDescriptors: a PostgreSQL server of its own (a fresh TXKIT_HOME,
// a free port), started by the real deploy/local/postgres with a pipe and a lock file open in the
// caller, holds neither, and the pipe reaches end of file once the script returns. The servers the
// other tests use are not touched.
func TestIntegrationPostgresInheritsNoDescriptors(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a PostgreSQL server")
	}
	dir := t.TempDir()
	// As root, the script runs PostgreSQL as the postgres user, who must reach the data directory.
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pgPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	home := filepath.Join(dir, "home")
	p := ports{pg: pgPort}
	t.Cleanup(func() {
		if out, err := runScript(t, home, p, "postgres", "stop"); err != nil {
			t.Errorf("postgres stop: %v\n%s", err, out)
		}
	})

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	lockFile, err := os.Create(filepath.Join(dir, "lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lockFile.Close()
	pipe := pipeLink(t, w)
	out, err := runScriptFiles(t, home, p, []*os.File{w, lockFile}, "postgres", "start")
	w.Close()
	if err != nil {
		t.Fatalf("postgres start: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(home, "pids", "postgres.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	if holders := listeners(t, pgPort); !slices.Contains(holders, pid) {
		t.Fatalf("the pid file names %d; the processes listening on %d are %v", pid, pgPort, holders)
	}
	checkDescriptors(t, pid, pipe, lockFile.Name(), false)
	checkEOF(t, r)
}

// TestScriptsStartServersThroughLib: no script of deploy/local starts a background process but
// through lib.sh's start_daemon, so none can hand its descriptors on to a server.
func TestScriptsStartServersThroughLib(t *testing.T) {
	dir := filepath.Join(repoDir(t), "deploy", "local")
	background := regexp.MustCompile(`(^|[^&])&\s*$|\bsetsid\b`)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || e.Name() == "lib.sh" || strings.HasSuffix(e.Name(), ".xml") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		s := bufio.NewScanner(f)
		for n := 1; s.Scan(); n++ {
			line := strings.TrimSpace(s.Text())
			if strings.HasPrefix(line, "#") {
				continue
			}
			if background.MatchString(line) {
				t.Errorf("deploy/local/%s:%d starts a process itself, not through start_daemon: %s", e.Name(), n, line)
			}
		}
		f.Close()
	}
}

// TestIntegrationTopicCreatesRetryTopic: deploy/local/rocketmq topic -g GROUP NAME creates the
// topic and the group's retry topic (%RETRY%GROUP), which a push consumer of GROUP subscribes to;
// deploy/local/rocketmq route shows both.
func TestIntegrationTopicCreatesRetryTopic(t *testing.T) {
	ports := serverPorts(t)
	home := homeOf(t, listeners(t, ports.pg)) // the checkout whose RocketMQ classpath mqadmin needs
	topic := "txkit-test-" + testenv.Name(t)
	group := "txkit-test-group-" + testenv.Name(t)
	retry := "%RETRY%" + group
	t.Cleanup(func() { deleteTopics(t, ports, topic, retry) })
	if out, err := runScript(t, home, ports, "rocketmq", "topic", "-g", group, topic); err != nil {
		t.Fatalf("rocketmq topic: %v\n%s", err, out)
	}
	broker := fmt.Sprintf(`"127.0.0.1:%d"`, ports.broker)
	for _, want := range []struct {
		topic  string
		queues int
	}{{topic, 4}, {retry, 1}} {
		out, err := runScript(t, home, ports, "rocketmq", "route", want.topic)
		if err != nil {
			t.Fatalf("rocketmq route %s: %v\n%s", want.topic, err, out)
		}
		if !strings.Contains(out, broker) || !strings.Contains(out, fmt.Sprintf(`"readQueueNums":%d`, want.queues)) {
			t.Errorf("route of %s: %s, want broker %s and %d queues", want.topic, out, broker, want.queues)
		}
	}
	if out, err := runScript(t, home, ports, "rocketmq", "route", "txkit-no-such-topic-"+testenv.Name(t)); err == nil {
		t.Errorf("rocketmq route of a missing topic succeeded: %s", out)
	}
}

// pipeLink returns what /proc/PID/fd/N links to when N is the pipe f: "pipe:[INODE]".
func pipeLink(t *testing.T, f *os.File) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("pipe:[%d]", st.Ino)
}

// checkDescriptors fails the test when process pid holds the pipe (pipeLink) or the file at
// lockPath, or, when only012 is set, any descriptor above 2.
func checkDescriptors(t *testing.T, pid int, pipeLink, lockPath string, only012 bool) {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		n, _ := strconv.Atoi(fd.Name())
		switch {
		case link == pipeLink:
			t.Errorf("pid %d holds the caller's pipe as descriptor %d", pid, n)
		case link == lockPath:
			t.Errorf("pid %d holds the caller's lock file as descriptor %d", pid, n)
		case only012 && n > 2:
			t.Errorf("pid %d holds descriptor %d (%s)", pid, n, link)
		}
	}
}

// openAbove2 counts pid's open descriptors other than 0, 1 and 2.
func openAbove2(pid int) int {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	n := 0
	for _, fd := range fds {
		if i, err := strconv.Atoi(fd.Name()); err == nil && i > 2 {
			n++
		}
	}
	return n
}

// checkEOF fails the test when the read end r of a pipe whose write end the caller closed does not
// reach end of file within 5 s: some process still holds the write end.
func checkEOF(t *testing.T, r *os.File) {
	t.Helper()
	if err := r.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(r); err != nil {
		t.Errorf("the caller's pipe does not reach end of file: %v", err)
	}
}

// ports are the servers' ports, from the environment `make test` sets.
type ports struct {
	pg, namesrv, broker int
	zk                  []int
	redis               map[string]int // by instance name (redisNames)
}

// redisNames are deploy/local/redis's instances, as status names them after "redis ".
var redisNames = []string{"single", "redlock1", "redlock2", "redlock3", "primary", "replica"}

func serverPorts(t *testing.T) ports {
	t.Helper()
	u, err := url.Parse(testenv.PGURL(t))
	if err != nil {
		t.Fatalf("%s: %v", testenv.EnvPG, err)
	}
	p := ports{pg: port(t, u.Host), namesrv: port(t, testenv.Namesrv(t)[0]), broker: port(t, testenv.Broker(t))}
	for _, a := range testenv.ZK(t) {
		p.zk = append(p.zk, port(t, a))
	}
	primary, replica := testenv.RedisPair(t)
	addrs := append(append([]string{testenv.Redis(t)}, testenv.Redlock(t)...), primary, replica)
	p.redis = map[string]int{}
	for i, name := range redisNames {
		p.redis[name] = port(t, addrs[i])
	}
	return p
}

// of returns the port of the server named as status names it.
func (p ports) of(name string) int {
	switch {
	case name == "postgres":
		return p.pg
	case name == "namesrv":
		return p.namesrv
	case name == "broker":
		return p.broker
	case name == "acl broker":
		return aclBrokerPort
	case strings.HasPrefix(name, "zk"):
		n, _ := strconv.Atoi(strings.TrimPrefix(name, "zk"))
		return p.zk[n-1]
	case strings.HasPrefix(name, "redis "):
		return p.redis[strings.TrimPrefix(name, "redis ")]
	}
	return 0
}

func port(t *testing.T, hostport string) int {
	t.Helper()
	_, s, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatalf("address %q: %v", hostport, err)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("address %q: %v", hostport, err)
	}
	return n
}

// statusLines returns status's line for each server, by name, after checking that every server is
// there.
func statusLines(t *testing.T, out string, p ports) map[string]string {
	t.Helper()
	names := []string{"postgres", "namesrv", "broker", "acl broker"}
	for i := range p.zk {
		names = append(names, fmt.Sprintf("zk%d", i+1))
	}
	for _, name := range redisNames {
		names = append(names, "redis "+name)
	}
	lines := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		for _, name := range names {
			if strings.HasPrefix(line, name+" ") { // "broker " is not a prefix of "acl broker "
				lines[name] = line
			}
		}
	}
	for _, name := range names {
		if _, ok := lines[name]; !ok {
			t.Errorf("status shows no line for %s", name)
		}
	}
	return lines
}

func repoDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// runScript runs deploy/local/ARGS[0] ARGS[1:] with TXKIT_HOME=home and the servers' PostgreSQL
// port and ZooKeeper node count, and returns its combined output. A script still running after a
// minute is killed with the processes of its group.
func runScript(t *testing.T, home string, p ports, args ...string) (string, error) {
	t.Helper()
	return runScriptFiles(t, home, p, nil, args...)
}

// runScriptFiles is runScript with files open in the script as descriptors 3, 4, ...
func runScriptFiles(t *testing.T, home string, p ports, files []*os.File, args ...string) (string, error) {
	t.Helper()
	return runScriptIn(t, filepath.Join(repoDir(t), "deploy", "local"), home, p, files, args...)
}

// runScriptIn is runScriptFiles with the scripts in dir.
func runScriptIn(t *testing.T, dir, home string, p ports, files []*os.File, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // also from t.Cleanup
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, args[0]), args[1:]...)
	cmd.Env = append(os.Environ(), "TXKIT_HOME="+home, fmt.Sprintf("TXKIT_PG_PORT=%d", p.pg),
		fmt.Sprintf("TXKIT_ZK_NODES=%d", len(p.zk)))
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// listeners returns the pids of the processes listening on TCP port, found through /proc (not the
// way the scripts find them).
func listeners(t *testing.T, port int) []int {
	t.Helper()
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 10 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); err == nil && int(p) == port {
				inodes[fields[9]] = true
			}
		}
	}
	if len(inodes) == 0 {
		return nil
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if strings.HasPrefix(link, "socket:[") && inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
				pids = append(pids, pid)
				break
			}
		}
	}
	if len(pids) == 0 {
		t.Fatalf("something listens on port %d but this user cannot see which process", port)
	}
	return pids
}

// homeOf returns the TXKIT_HOME the PostgreSQL server among pids was started from (its -D
// HOME/pg/data).
func homeOf(t *testing.T, pids []int) string {
	t.Helper()
	for _, pid := range pids {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		for _, arg := range strings.Split(string(b), "\x00") {
			if home, ok := strings.CutSuffix(arg, "/pg/data"); ok {
				return home
			}
		}
	}
	t.Fatalf("no process among %v was started by deploy/local/postgres (-D HOME/pg/data)", pids)
	return ""
}

// cmdline returns the command line of pid, its arguments joined by spaces.
func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// pidAfter returns the number that follows prefix in s, or 0.
func pidAfter(s, prefix string) int {
	_, rest, ok := strings.Cut(s, prefix)
	if !ok {
		return 0
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(rest)
	}
	n, _ := strconv.Atoi(rest[:end])
	return n
}

// deleteTopics deletes the test's topics from the broker and the name server.
func deleteTopics(t *testing.T, p ports, topics ...string) {
	ns := testenv.Namesrv(t)
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(ns)))
	if err != nil {
		t.Logf("cleanup: rocketmq admin: %v", err)
		return
	}
	defer adm.Close() //nolint:errcheck // test cleanup
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
	defer cancel()
	for _, topic := range topics {
		if err := adm.DeleteTopic(ctx, admin.WithTopicDelete(topic), admin.WithBrokerAddrDelete(testenv.Broker(t)),
			admin.WithNameSrvAddr(ns)); err != nil {
			t.Logf("cleanup: delete topic %s: %v", topic, err)
		}
	}
}
