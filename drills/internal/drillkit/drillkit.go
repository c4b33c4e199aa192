// Package drillkit holds what the drills share: building the services of an example (the
// programs under examples/), starting a service binary and waiting for the "LISTENING <addr>" line
// it prints, stopping services, polling their JSON endpoints, running a drill from its main and
// judging and printing its report, finding the leader of an election among live instances, driving
// a load of numbered requests (with a drill beside it), and dropping a run's schema.
package drillkit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/examples/exapp"
)

// ModuleRoot returns the directory of the txkit module's go.mod, as `go env GOMOD` run in the
// current directory reports it (ctx bounds that command), or an error when the current directory
// is outside a module.
func ModuleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run the demo inside the txkit module")
	}
	return filepath.Dir(mod), nil
}

// Build compiles each of services, the commands ./examples/<example>/<service> of the module at
// [ModuleRoot], into dir/<service>, with the build tag drill (the transfer bank's pause between
// the phases). It blocks until they are built, one after the other; ctx
// ends the go commands. It stops at the first failure, with the compiler's output in the error.
//
// The binaries are linked once per tree, not once per call: go build writes them into a cache
// directory of the checkout under $TXKIT_HOME (see binCache), where it leaves a binary that is up
// to date alone, and Build copies them into dir. Every drill test of a package, and every package, would otherwise
// link the same services again (about 60 s for tcc-order's three on a loaded 2-core machine).
func Build(ctx context.Context, dir, example string, services ...string) error {
	root, err := ModuleRoot(ctx)
	if err != nil {
		return err
	}
	cache, unlock, err := binCache(ctx, root, example)
	if err != nil {
		return err
	}
	defer unlock()
	for _, svc := range services {
		bin := filepath.Join(cache, svc)
		cmd := exec.CommandContext(ctx, "go", "build", "-tags", "drill", "-o", bin, "./examples/"+example+"/"+svc)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", svc, err, out)
		}
		if err := copyFile(filepath.Join(dir, svc), bin); err != nil {
			return err
		}
	}
	return nil
}

// Verdict is a demo report's OK: the violations (broken checks) joined into one error, one
// error per violation, when there are any; otherwise nothing, which the caller sets to an error
// saying that the run did not get to what it checks ("nothing checked") when that is so, or to
// nil when the run did.
func Verdict(violations []string, nothing error) error {
	if len(violations) == 0 {
		return nothing
	}
	errs := make([]error, len(violations))
	for i, v := range violations {
		errs[i] = errors.New(v)
	}
	return errors.Join(errs...)
}

// WriteChecks writes a report's checks to w, a line each: "  ok   <check>" for those that hold,
// then "  FAIL <violation>" for those that do not.
func WriteChecks(w io.Writer, checks, violations []string) {
	for _, c := range checks {
		fmt.Fprintf(w, "  ok   %s\n", c)
	}
	for _, v := range violations {
		fmt.Fprintf(w, "  FAIL %s\n", v)
	}
}

// Longest returns the longest of ds, or 0 when ds is empty.
func Longest(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// Proc is a started service process.
type Proc struct {
	Cmd  *exec.Cmd
	Addr string        // what it printed after "LISTENING "
	Done chan struct{} // closed once it has exited
}

// Start runs bin with args, its stderr appended to logPath, and waits (60 s at most, or until ctx
// ends) for the "LISTENING <addr>" line it prints on stdout. name is for errors.
func Start(ctx context.Context, name, bin string, args []string, logPath string) (*Proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Cmd: cmd, Done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "LISTENING "); ok {
				select {
				case addr <- a:
				default:
				}
			}
		}
		_ = cmd.Wait()
		logf.Close()
		close(p.Done)
	}()
	select {
	case p.Addr = <-addr:
		return p, nil
	case <-p.Done:
		return nil, fmt.Errorf("%s %w; see %s", name, errExited, logPath)
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("%s did not start within 60s; see %s", name, logPath)
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return nil, ctx.Err()
	}
}

var errExited = errors.New("exited while starting")

// Restart is Start for a service started again during a drill: while it exits while starting —
// a server it needs is failing over, its first connection fails, and it exits as a service
// should — it is started again, every 500 ms for up to within, as its supervisor would.
func Restart(ctx context.Context, within time.Duration, name, bin string, args []string, logPath string) (*Proc, error) {
	deadline := time.Now().Add(within)
	for {
		p, err := Start(ctx, name, bin, args, logPath)
		if err == nil || !errors.Is(err, errExited) || time.Now().After(deadline) {
			return p, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Stop sends SIGTERM to every process, then waits for each, SIGKILLing one that takes more than
// 15 s. Nil entries are skipped.
func Stop(procs ...*Proc) {
	for _, p := range procs {
		if p != nil {
			_ = p.Cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range procs {
		if p == nil {
			continue
		}
		select {
		case <-p.Done:
		case <-time.After(15 * time.Second):
			_ = p.Cmd.Process.Kill()
			<-p.Done
		}
	}
}

// GetJSON GETs url with c and decodes a 200 answer into v.
func GetJSON(ctx context.Context, c *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// RunDemo runs a demo from its main: run(ctx, cfg) with a ctx that ends on SIGINT or SIGTERM or
// after timeout. It prints the report under title when the report prints itself (fmt.Stringer);
// then, on stderr, "demo failed: <err>" when run fails, or "demo broke <broke>: <err>" when the
// report's OK does not hold, and returns false in those two cases (main exits 1).
func RunDemo[C any, R interface{ OK() error }](timeout time.Duration, title string, run func(context.Context, C) (R, error),
	cfg C, broke string) (R, bool) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rep, err := run(ctx, cfg)
	if s, ok := any(rep).(fmt.Stringer); ok {
		fmt.Print("\n" + title + "\n" + s.String())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		return rep, false
	}
	if err := rep.OK(); err != nil {
		fmt.Fprintf(os.Stderr, "demo broke %s: %v\n", broke, err)
		return rep, false
	}
	return rep, true
}

// Leader waits, 30 s at most, until a live instance leads an election and returns its id. Each
// round it asks the instances of procs (id → instance, read under mu; addr gives an instance's
// address) in turn who leads, through leaderOf, until one answers with an id; that id counts only
// when it is in procs then, since after a kill the dead leader's node stays until its ZooKeeper
// session expires. It returns ctx's error when ctx ends first, and an error saying "no live
// <what> after 30s" when no live instance leads by then.
func Leader[P any](ctx context.Context, what string, mu sync.Locker, procs map[string]P, addr func(P) string,
	leaderOf func(ctx context.Context, addr string) (string, error)) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		var addrs []string
		for _, p := range procs {
			addrs = append(addrs, addr(p))
		}
		mu.Unlock()
		for _, a := range addrs {
			if id, err := leaderOf(ctx, a); err == nil && id != "" {
				mu.Lock()
				_, live := procs[id]
				mu.Unlock()
				if live {
					return id, nil
				}
				break
			}
		}
		if err := exapp.Pause(ctx, 50*time.Millisecond); err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("no live %s after 30s", what)
}

// StatsLeader returns a leaderOf for [Leader]: it reads GET http://<addr>/stats with c and returns
// its "leader" field, or, when section is not empty, the "leader" field of its section object.
func StatsLeader(c *http.Client, section string) func(ctx context.Context, addr string) (string, error) {
	return func(ctx context.Context, addr string) (string, error) {
		var st map[string]json.RawMessage
		if err := GetJSON(ctx, c, "http://"+addr+"/stats", &st); err != nil {
			return "", err
		}
		var lead struct {
			Leader string `json:"leader"`
		}
		if section == "" {
			err := json.Unmarshal(st["leader"], &lead.Leader)
			return lead.Leader, err
		}
		err := json.Unmarshal(st[section], &lead)
		return lead.Leader, err
	}
}

// Load runs job for 1..n on workers goroutines, each worker taking the next number until none is
// left; when rate > 0 the workers together start at most rate jobs a second. A job's error ends
// the load: the other workers and beside see their ctx end. Each of beside runs in a goroutine of
// its own during the load (a drill injecting faults) and gets a channel closed once every worker
// has returned. Load blocks until the workers and beside have all returned, and returns the first
// error (ctx's when it ends first), or nil.
func Load(ctx context.Context, n, workers, rate int, job func(ctx context.Context, i int) error,
	beside ...func(ctx context.Context, loadDone <-chan struct{}) error) error {
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	var tick <-chan time.Time
	if rate > 0 {
		t := time.NewTicker(time.Second / time.Duration(rate))
		defer t.Stop()
		tick = t.C
	}
	loadDone := make(chan struct{})
	var running sync.WaitGroup
	for range workers {
		running.Add(1)
		g.Go(func() error {
			defer running.Done()
			for {
				if tick != nil {
					select {
					case <-tick:
					case <-gctx.Done():
						return gctx.Err()
					}
				}
				i := int(next.Add(1))
				if i > n {
					return nil
				}
				if err := job(gctx, i); err != nil {
					return err
				}
			}
		})
	}
	go func() { running.Wait(); close(loadDone) }()
	for _, f := range beside {
		g.Go(func() error { return f(gctx, loadDone) })
	}
	return g.Wait()
}

// DropSchema drops schema, with everything in it, in each of the databases dbs of the server at
// base (a PostgreSQL URL): a demo run's clean-up. It goes on after a failure and returns them all.
func DropSchema(ctx context.Context, base, schema string, dbs ...string) error {
	var errs []error
	for _, db := range dbs {
		c, err := exapp.Connect(ctx, base, db, "")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := c.Exec(ctx, "drop schema if exists "+pgx.Identifier{schema}.Sanitize()+" cascade"); err != nil {
			errs = append(errs, fmt.Errorf("drop schema %s in %s: %w", schema, db, err))
		}
		_ = c.Close(ctx)
	}
	return errors.Join(errs...)
}
