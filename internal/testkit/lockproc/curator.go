package lockproc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Where the Java contender's sources live, relative to the repository root.
const curatorSrc = "lock/zklock/testdata/curator"

const (
	curatorPOM   = "pom.xml"
	curatorJava  = "CuratorContender.java"
	curatorClass = "CuratorContender"
	stampFile    = "complete" // written last: the cache directory is usable
	buildTimeout = 15 * time.Minute
	tailLines    = 30 // output lines kept for error messages
)

// CuratorProgram is the Java contender of lock/zklock/testdata/curator, compiled, with its classpath: a
// process that takes Apache Curator's InterProcessMutex on a path again and again. Start runs it.
// A CuratorProgram is immutable and safe for concurrent use.
type CuratorProgram struct {
	dir  string // the cache directory: lib/ (jars), classes/, build.log
	java string
}

// Curator returns the Java contender, building it if needed. It blocks while building; the
// build is bounded by t's context and a timeout.
//
// The build — `mvn … dependency:copy-dependencies` for the jars of pom.xml, then `javac` — goes
// into $TXKIT_HOME/curator/<hash of pom.xml and CuratorContender.java>/ and is reused by every
// later call, in this process and the next: a complete cache downloads and compiles nothing.
// Builds happen in a temporary directory renamed into place when complete, so that processes
// building at the same time (each does the whole build then) never see a half-built cache.
//
// A missing java, javac or mvn, or a failed build, fails the test (with the build log's path):
// integration tests skip only under -short, and the caller's test decides that.
func Curator(t testing.TB) *CuratorProgram {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), buildTimeout)
	defer cancel()
	start := time.Now()
	p, built, err := buildCurator(ctx)
	if err != nil {
		t.Fatalf("lockproc: Curator contender: %v", err)
	}
	if built {
		t.Logf("lockproc: built the Curator contender in %v: %s", time.Since(start).Round(time.Millisecond), p.dir)
	} else {
		t.Logf("lockproc: Curator contender cached in %s", p.dir)
	}
	return p
}

// Dir returns the cache directory holding the build (classes/, lib/, build.log).
func (p *CuratorProgram) Dir() string { return p.dir }

func buildCurator(ctx context.Context) (p *CuratorProgram, built bool, err error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, false, fmt.Errorf("java (a JDK, 17 or later) is needed: %w", err)
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, false, err
	}
	home, err := Home()
	if err != nil {
		return nil, false, err
	}
	src := filepath.Join(root, curatorSrc)
	pom, err := os.ReadFile(filepath.Join(src, curatorPOM))
	if err != nil {
		return nil, false, err
	}
	code, err := os.ReadFile(filepath.Join(src, curatorJava))
	if err != nil {
		return nil, false, err
	}
	h := sha256.New()
	for _, b := range [][]byte{pom, code} {
		fmt.Fprintf(h, "%d\n", len(b))
		h.Write(b)
	}
	cache := filepath.Join(home, "curator")
	dir := filepath.Join(cache, hex.EncodeToString(h.Sum(nil))[:16])
	p = &CuratorProgram{dir: dir, java: java}
	if complete(dir) {
		return p, false, nil
	}

	javac, err := exec.LookPath("javac")
	if err != nil {
		return nil, false, fmt.Errorf("javac (a JDK, 17 or later) is needed to build %s: %w", curatorJava, err)
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return nil, false, fmt.Errorf("mvn (Apache Maven) is needed to fetch the jars of %s/%s: %w", curatorSrc, curatorPOM, err)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, false, err
	}
	tmp, err := os.MkdirTemp(cache, filepath.Base(dir)+".build-")
	if err != nil {
		return nil, false, err
	}
	logPath := filepath.Join(tmp, "build.log")
	if err := build(ctx, tmp, logPath, mvn, javac, pom, code); err != nil {
		// The temporary directory stays, with its log, for whoever reads the failure.
		return nil, false, fmt.Errorf("build failed (log: %s): %w", logPath, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if complete(dir) { // another process finished first: use its build
			_ = os.RemoveAll(tmp)
			return p, true, nil
		}
		return nil, false, fmt.Errorf("install the build in %s (log: %s): %w", dir, logPath, err)
	}
	return p, true, nil
}

func complete(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, stampFile))
	return err == nil
}

// build fetches the jars into tmp/lib and compiles into tmp/classes, logging to logPath, and
// writes the stamp. The sources are copied into tmp first, so that what is built is what was hashed
// (and mvn writes nothing next to the repository's pom).
func build(ctx context.Context, tmp, logPath, mvn, javac string, pom, code []byte) error {
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	srcDir := filepath.Join(tmp, "src")
	if err := os.MkdirAll(srcDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(srcDir, curatorPOM), pom, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(srcDir, curatorJava), code, 0o644); err != nil {
		return err
	}
	run := func(name string, args ...string) error {
		fmt.Fprintf(logf, "$ %s %s\n", name, strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = srcDir
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.WaitDelay = 10 * time.Second
		start := time.Now()
		err := cmd.Run()
		fmt.Fprintf(logf, "# %s: %v after %v\n", filepath.Base(name), errOrOK(err), time.Since(start).Round(time.Millisecond))
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(name), err)
		}
		return nil
	}
	lib := filepath.Join(tmp, "lib")
	if err := run(mvn, "-q", "-B", "-f", filepath.Join(srcDir, curatorPOM),
		"org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies",
		"-DoutputDirectory="+lib, "-DincludeScope=runtime"); err != nil {
		return err
	}
	if err := run(javac, "-encoding", "UTF-8", "-Xlint:none", "-d", filepath.Join(tmp, "classes"),
		"-cp", filepath.Join(lib, "*"), filepath.Join(srcDir, curatorJava)); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(tmp, stampFile), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644)
}

func errOrOK(err error) any {
	if err == nil {
		return "ok"
	}
	return err
}

// Start runs the contender: it connects to the ZooKeeper servers of connect ("host:port,…"),
// then iterations times takes the InterProcessMutex on lockPath, enters the marker file at
// markerPath (see [Marker]; the Java side creates it exclusively too), holds for hold, leaves the
// marker and releases. It returns once the process has started; [CuratorProcess.WaitReady] waits
// for its connection. ctx scopes the whole process: when ctx ends the process is killed. The
// caller must call [CuratorProcess.Wait], which reaps the process and the goroutine reading it.
func (p *CuratorProgram) Start(ctx context.Context, connect, lockPath string, iterations int, markerPath string, hold time.Duration) (*CuratorProcess, error) {
	cp := filepath.Join(p.dir, "classes") + string(os.PathListSeparator) + filepath.Join(p.dir, "lib", "*")
	cmd := exec.CommandContext(ctx, p.java, "-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-cp", cp, curatorClass,
		connect, lockPath, strconv.Itoa(iterations), markerPath, strconv.FormatInt(hold.Milliseconds(), 10))
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c := &CuratorProcess{
		cmd:        cmd,
		iterations: iterations,
		stderr:     &lineTail{max: tailLines},
		ready:      make(chan struct{}),
		eof:        make(chan struct{}),
	}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("lockproc: start %s: %w", p.java, err)
	}
	go c.read(stdout)
	return c, nil
}

// CuratorProcess is a running Java contender (see [CuratorProgram.Start]). Its methods are safe
// for concurrent use.
type CuratorProcess struct {
	cmd        *exec.Cmd
	iterations int
	stderr     *lineTail
	ready      chan struct{} // closed at READY
	eof        chan struct{} // closed when the reader has read all of stdout

	mu       sync.Mutex
	lines    []string // all of stdout
	acquired []string // node names, in ACQUIRED order
	readErr  error

	waitOnce sync.Once
	waitErr  error
}

func (c *CuratorProcess) read(r io.Reader) {
	defer close(c.eof)
	sc := bufio.NewScanner(r)
	readyClosed := false
	for sc.Scan() {
		line := sc.Text()
		c.mu.Lock()
		c.lines = append(c.lines, line)
		if f := strings.Fields(line); len(f) == 3 && f[0] == "ACQUIRED" {
			c.acquired = append(c.acquired, f[2])
		}
		c.mu.Unlock()
		if line == "READY" && !readyClosed {
			readyClosed = true
			close(c.ready)
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, fs.ErrClosed) {
		c.mu.Lock()
		c.readErr = err
		c.mu.Unlock()
		_, _ = io.Copy(io.Discard, r) // keep the process from blocking on a full pipe
	}
}

// WaitReady blocks until the contender has connected to ZooKeeper (it contends right after), the
// process has ended, or ctx ends. A process that ended first is reaped and its error returned.
func (c *CuratorProcess) WaitReady(ctx context.Context) error {
	select {
	case <-c.ready:
		return nil
	case <-c.eof:
		select {
		case <-c.ready:
			return nil
		default:
		}
		if err := c.Wait(); err != nil {
			return fmt.Errorf("lockproc: curator contender ended before READY: %w", err)
		}
		return errors.New("lockproc: curator contender ended before READY")
	case <-ctx.Done():
		return fmt.Errorf("lockproc: curator contender not READY: %w", ctx.Err())
	}
}

// Wait blocks until the process ends and returns nil only when it exited 0 after printing
// "DONE <iterations>". A VIOLATION line gives an error wrapping [ErrOverlap]; any other failure an
// error with the last lines the process printed. Wait may be called more than once.
func (c *CuratorProcess) Wait() error {
	c.waitOnce.Do(func() {
		<-c.eof // os/exec: all reads from the pipe before Wait
		err := c.cmd.Wait()
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.readErr != nil {
			err = errors.Join(err, fmt.Errorf("read stdout: %w", c.readErr))
		}
		done := false
		for _, l := range c.lines {
			if strings.HasPrefix(l, "VIOLATION") {
				err = errors.Join(err, fmt.Errorf("%w: curator contender: %s", ErrOverlap, l))
			}
			done = done || l == "DONE "+strconv.Itoa(c.iterations)
		}
		if err == nil && !done {
			err = fmt.Errorf("exited 0 without printing DONE %d", c.iterations)
		}
		if err != nil {
			c.waitErr = fmt.Errorf("lockproc: curator contender: %w\nlast stdout lines:\n%s\nlast stderr lines:\n%s",
				err, indent(lastN(c.lines, tailLines)), indent(c.stderr.Lines()))
		}
	})
	return c.waitErr
}

// Acquired returns the names of the lock nodes the contender has held so far, in order (one per
// ACQUIRED line).
func (c *CuratorProcess) Acquired() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.acquired...)
}

// Output returns every line the contender has printed on stdout so far.
func (c *CuratorProcess) Output() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.lines...)
}

func lastN(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}

func indent(lines []string) string {
	if len(lines) == 0 {
		return "\t(none)"
	}
	return "\t" + strings.Join(lines, "\n\t")
}

// lineTail is an io.Writer keeping the last max lines written to it.
type lineTail struct {
	mu      sync.Mutex
	max     int
	lines   []string
	partial []byte
}

func (w *lineTail) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.lines = append(w.lines, string(w.partial[:i]))
		w.partial = w.partial[i+1:]
		if len(w.lines) > w.max {
			w.lines = w.lines[len(w.lines)-w.max:]
		}
	}
	return len(b), nil
}

// Lines returns the kept lines, with an unfinished last line if any.
func (w *lineTail) Lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := append([]string(nil), w.lines...)
	if len(w.partial) > 0 {
		out = append(out, string(w.partial))
	}
	return out
}
