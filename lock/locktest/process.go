package locktest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

// The environment of a worker process: the test binary run again by the multi-process tests.
const (
	envWorker  = "TXKIT_LOCKTEST_WORKER" // count, hold or elect
	envBackend = "TXKIT_LOCKTEST_BACKEND"
	envConfig  = "TXKIT_LOCKTEST_CONFIG"
	envName    = "TXKIT_LOCKTEST_NAME" // the lock's name
	envID      = "TXKIT_LOCKTEST_ID"   // elect: the candidate's id
	envPG      = "TXKIT_LOCKTEST_PG"   // count: the counter's schema URL
	envN       = "TXKIT_LOCKTEST_N"    // count: goroutines,increments
)

// IsWorker reports whether this process is a worker started by the suite's multi-process tests.
// A package's TestMain calls it first, and hands a worker to [RunWorker].
func IsWorker() bool { return os.Getenv(envWorker) != "" }

// RunWorker runs this worker process's part of a multi-process test and returns the exit code
// for os.Exit: 0 when it finished, 1 (with the error on stderr) otherwise. It builds the Backend
// by calling build with the name and configuration of the Backend under test ([Backend.Name],
// [Backend.Config]), from the environment only. It blocks until the work is done, or (for workers
// that hold a lock until killed) until its standard input is closed: the test process is gone.
func RunWorker(build func(name, config string) (Backend, error)) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // EOF: the test process has gone
		cancel()
	}()
	err := runWorker(ctx, build)
	if err != nil {
		fmt.Fprintf(os.Stderr, "locktest worker %s (pid %d): %v\n", os.Getenv(envWorker), os.Getpid(), err)
		return 1
	}
	return 0
}

func runWorker(ctx context.Context, build func(name, config string) (Backend, error)) error {
	b, err := build(os.Getenv(envBackend), os.Getenv(envConfig))
	if err != nil {
		return fmt.Errorf("build backend %q: %w", os.Getenv(envBackend), err)
	}
	if err := b.validate(); err != nil {
		return err
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close() //nolint:errcheck // the worker exits next
	fmt.Println("READY")
	name := os.Getenv(envName)
	switch mode := os.Getenv(envWorker); mode {
	case "count":
		return countWorker(ctx, c, name)
	case "hold":
		return holdWorker(ctx, c, name)
	case "elect":
		return electWorker(ctx, c, name, os.Getenv(envID))
	default:
		return fmt.Errorf("unknown worker %q", mode)
	}
}

// countWorker increments the counter from several goroutines, each with its own Locker.
func countWorker(ctx context.Context, c *Conn, name string) error {
	g, n, _ := strings.Cut(os.Getenv(envN), ",")
	goroutines, err1 := strconv.Atoi(g)
	total, err2 := strconv.Atoi(n)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("%s=%q: %w", envN, os.Getenv(envN), err)
	}
	pool, err := pgxpool.New(ctx, os.Getenv(envPG))
	if err != nil {
		return err
	}
	defer pool.Close()
	var eg errgroup.Group
	for i := range goroutines {
		l, err := c.Locker(name)
		if err != nil {
			return err
		}
		each := total / goroutines
		if i < total%goroutines {
			each++
		}
		eg.Go(func() error {
			for range each {
				if err := incrementUnderLock(ctx, l, pool); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return eg.Wait()
}

// incrementUnderLock reads the counter and writes it plus one, in two statements outside any
// transaction: only the lock keeps two increments from reading the same value. The increment
// records the token of the hold that made it.
func incrementUnderLock(ctx context.Context, l lock.Locker, pool *pgxpool.Pool) error {
	for {
		lease, err := l.Lock(ctx)
		if err != nil {
			if ctx.Err() == nil && (errors.Is(err, lock.ErrSessionExpired) || errors.Is(err, lock.ErrLockLost)) {
				continue // the backend's session was lost and is being replaced: try again
			}
			return fmt.Errorf("lock: %w", err)
		}
		var v int64
		err = pool.QueryRow(lease.Context(), "select v from counter where id = 1").Scan(&v)
		if err == nil {
			_, err = pool.Exec(lease.Context(), "update counter set v = $1 where id = 1", v+1)
		}
		if err == nil {
			_, err = pool.Exec(lease.Context(), "insert into history(v, epoch, seq, pid) values ($1, $2, $3, $4)",
				v+1, lease.Token().Epoch, lease.Token().Seq, os.Getpid())
		}
		uerr := l.Unlock(context.WithoutCancel(ctx))
		if err != nil {
			if lease.Err() != nil && ctx.Err() == nil {
				continue // lost the lock mid-way; the history check shows any harm done
			}
			return err
		}
		if uerr != nil {
			return fmt.Errorf("unlock: %w", uerr)
		}
		return nil
	}
}

// holdWorker takes the lock, prints "HELD <token>", and holds it until killed (or until the test
// process is gone).
func holdWorker(ctx context.Context, c *Conn, name string) error {
	l, err := c.Locker(name)
	if err != nil {
		return err
	}
	lease, err := l.Lock(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("HELD %s\n", lease.Token())
	select {
	case <-ctx.Done():
	case <-lease.Done():
		fmt.Printf("LOST %v\n", lease.Err())
	}
	return nil
}

// electWorker campaigns and prints "LEADER <id> <token>" each time it leads, until killed (or
// until the test process is gone).
func electWorker(ctx context.Context, c *Conn, name, id string) error {
	if c.Elector == nil {
		return errors.New("the backend has no Elector")
	}
	e, err := c.Elector(name, id)
	if err != nil {
		return err
	}
	return e.RunWhileLeader(ctx, func(ctx context.Context, l lock.Leadership) error {
		fmt.Printf("LEADER %s %s\n", id, l.Token())
		<-ctx.Done()
		fmt.Printf("LOST %s\n", id)
		return nil
	})
}

// worker is a running worker process.
type worker struct {
	cmd    *exec.Cmd
	lines  chan string   // its standard output, closed when it ends
	exited chan struct{} // closed when it has exited, after lines; err is set then
	err    error         // its exit error
}

// startWorker runs the test binary again as a worker of the given mode on b, and waits for it
// to connect. The worker is killed when the test ends.
func startWorker(t *testing.T, b Backend, mode string, env ...string) *worker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorker+"="+mode, envBackend+"="+b.Name, envConfig+"="+b.Config)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = testenv.LogWriter(t, "worker stderr: ")
	stdin, err := cmd.StdinPipe() // held open while the test runs; its end tells the worker to go
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	w := &worker{cmd: cmd, lines: make(chan string, 1024), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
		w.err = cmd.Wait()
		close(w.exited)
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		for range w.lines { // unread output
		}
		<-w.exited
	})
	if _, err := w.next(waitLimit, "READY"); err != nil {
		t.Fatalf("worker %s: %v (does the package's TestMain hand workers to locktest.RunWorker?)", mode, err)
	}
	return w
}

// next returns the fields of the next output line whose first field is word, skipping others.
func (w *worker) next(timeout time.Duration, word string) ([]string, error) {
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-w.lines:
			if !ok {
				<-w.exited
				return nil, fmt.Errorf("worker exited before printing %s: %v", word, w.err)
			}
			if f := strings.Fields(line); len(f) > 0 && f[0] == word {
				return f, nil
			}
		case <-deadline:
			return nil, fmt.Errorf("no %s from the worker within %v", word, timeout)
		}
	}
}

// wait waits for the worker to exit and returns its error.
func (w *worker) wait(timeout time.Duration) error {
	for {
		select {
		case _, ok := <-w.lines:
			if !ok {
				<-w.exited
				return w.err
			}
		case <-time.After(timeout):
			return fmt.Errorf("worker did not finish within %v", timeout)
		}
	}
}

// Counter configures [RunCounter]. Zero fields take the defaults.
type Counter struct {
	Procs      int // worker processes (default 4)
	Goroutines int // goroutines per process, each with its own Locker (default 16)
	Increments int // increments in all (default 512)
	// During, when set, runs in the test while the workers count; progress returns the
	// counter's current value. Use it to disturb the servers (stop one, restart it) meanwhile.
	During func(progress func() int64)
}

// RunCounter checks mutual exclusion across processes: c.Procs worker processes, each with one
// Conn and c.Goroutines goroutines with a Locker each, make c.Increments increments of a counter
// in PostgreSQL, each a read and a write in separate statements outside any transaction, under
// the lock, recording the lock's token with the value it wrote. No update may be lost, every
// value must be written once, and in value order the tokens must strictly rise. The counter lives
// in a schema of the test's own on the server named by TXKIT_PG_URL. The package's TestMain must
// hand workers to [RunWorker].
func RunCounter(t *testing.T, b Backend, c Counter) {
	t.Helper()
	if err := b.validate(); err != nil {
		t.Fatal(err)
	}
	c = c.withDefaults()
	db := testenv.PG(t)
	name := testenv.Name(t)
	ctx := t.Context()
	if _, err := db.Pool.Exec(ctx, `create table counter(id int primary key, v bigint not null);
		insert into counter values (1, 0);
		create table history(v bigint not null, epoch bigint not null, seq bigint not null, pid int not null)`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ws := make([]*worker, c.Procs)
	for i := range ws {
		n := c.Increments / c.Procs
		if i < c.Increments%c.Procs {
			n++
		}
		ws[i] = startWorker(t, b, "count", envName+"="+name, envPG+"="+db.URL, fmt.Sprintf("%s=%d,%d", envN, c.Goroutines, n))
	}
	if c.During != nil {
		c.During(func() int64 {
			var v int64
			_ = db.Pool.QueryRow(ctx, "select v from counter where id = 1").Scan(&v)
			return v
		})
	}
	for i, w := range ws {
		if err := w.wait(5 * time.Minute); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	took := time.Since(start)
	var v int64
	if err := db.Pool.QueryRow(ctx, "select v from counter where id = 1").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != int64(c.Increments) {
		t.Fatalf("counter = %d after %d increments: %d lost", v, c.Increments, int64(c.Increments)-v)
	}
	checkHistory(t, db.Pool, c.Increments)
	t.Logf("%d processes x %d goroutines: %d increments in %v (%.0f/s), none lost, tokens rising",
		c.Procs, c.Goroutines, c.Increments, took.Round(time.Millisecond), float64(c.Increments)/took.Seconds())
}

func (c Counter) withDefaults() Counter {
	if c.Procs <= 0 {
		c.Procs = 4
	}
	if c.Goroutines <= 0 {
		c.Goroutines = 16
	}
	if c.Increments <= 0 {
		c.Increments = 512
	}
	return c
}

// checkHistory: every value 1..total was written once, and in value order the tokens strictly
// increase (a holder never wrote after a later holder).
func checkHistory(t *testing.T, pool *pgxpool.Pool, total int) {
	t.Helper()
	rows, err := pool.Query(t.Context(), "select v, epoch, seq from history order by v")
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		v   int64
		tok lock.Token
	}
	recs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (rec, error) {
		var x rec
		return x, r.Scan(&x.v, &x.tok.Epoch, &x.tok.Seq)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != total {
		t.Fatalf("%d history rows, want %d", len(recs), total)
	}
	for i, r := range recs {
		if r.v != int64(i+1) {
			t.Fatalf("history row %d has value %d: a value was written twice or skipped", i, r.v)
		}
		if i > 0 && !recs[i-1].tok.Less(r.tok) {
			t.Fatalf("value %d written with token %s after value %d with token %s", r.v, r.tok, recs[i-1].v, recs[i-1].tok)
		}
	}
}

// RunHolderKilled checks that a dead holder keeps others out no longer than the backend's
// expiry: a worker process takes the lock; a Locker in the test waits for it; the worker is
// SIGKILLed; the waiter must get the lock within [Backend.Expiry] + 1 s, with a higher token. It
// logs and returns the time from the kill to the next hold.
func RunHolderKilled(t *testing.T, b Backend) time.Duration {
	t.Helper()
	if err := b.validate(); err != nil {
		t.Fatal(err)
	}
	name := testenv.Name(t)
	w := startWorker(t, b, "hold", envName+"="+name)
	f, err := w.next(waitLimit, "HELD")
	if err != nil || len(f) != 2 {
		t.Fatalf("holding worker: %v %q", err, f)
	}
	held, err := lock.ParseToken(f[1])
	if err != nil {
		t.Fatal(err)
	}
	next := newLocker(t, open(t, b), name)
	wantLocked(t, next, "while a worker process holds the lock")

	got := lockLater(t, next, b.Expiry+waitLimit, nil)
	killed := time.Now()
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("Lock after the holder was killed: %v", r.err)
	}
	took := r.at.Sub(killed)
	t.Logf("%s: holder SIGKILLed; the next holder got in after %v (Expiry %v)", b.Name, took.Round(time.Millisecond), b.Expiry)
	if took > b.Expiry+time.Second {
		t.Errorf("the next holder got in after %v, want within Expiry + 1 s = %v", took, b.Expiry+time.Second)
	}
	if !held.Less(r.l.Token()) {
		t.Errorf("the next holder's token %s is not above the killed holder's %s", r.l.Token(), held)
	}
	mustUnlock(t, next)
	return took
}

// RunLeaderKilled checks elections across processes: three worker processes campaign on b's
// Elector; the leader is SIGKILLed, rounds times; each time another candidate must lead within
// [Backend.Expiry] + 1 s, with a higher token. It logs and returns the time from each kill to the
// next leader. b's Conn must have an Elector.
func RunLeaderKilled(t *testing.T, b Backend, rounds int) []time.Duration {
	t.Helper()
	if err := b.validate(); err != nil {
		t.Fatal(err)
	}
	name := testenv.Name(t)
	type lead struct{ id, token string }
	leaders := make(chan lead, 16)
	stop := make(chan struct{})
	ws := map[string]*worker{}
	var fwd sync.WaitGroup
	defer func() {
		close(stop)
		for _, w := range ws {
			_ = w.cmd.Process.Kill()
		}
		fwd.Wait()
	}()
	for i := range 3 {
		id := fmt.Sprintf("candidate-%d", i)
		w := startWorker(t, b, "elect", envName+"="+name, envID+"="+id)
		ws[id] = w
		fwd.Go(func() {
			for line := range w.lines {
				if f := strings.Fields(line); len(f) == 3 && f[0] == "LEADER" {
					select {
					case leaders <- lead{f[1], f[2]}:
					case <-stop:
					}
				}
			}
		})
	}
	next := func(limit time.Duration) (lead, bool) {
		select {
		case l := <-leaders:
			return l, true
		case <-time.After(limit):
			return lead{}, false
		}
	}
	cur, ok := next(waitLimit)
	if !ok {
		t.Fatalf("no leader within %v", waitLimit)
	}
	var took []time.Duration
	var last lock.Token
	for round := range rounds {
		tok, err := lock.ParseToken(cur.token)
		if err != nil {
			t.Fatal(err)
		}
		if !last.Less(tok) {
			t.Fatalf("leader token %s not above the previous %s", tok, last)
		}
		last = tok
		killed := time.Now()
		if err := ws[cur.id].cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		nl, ok := next(b.Expiry + waitLimit)
		d := time.Since(killed)
		if !ok {
			t.Fatalf("round %d: no new leader within %v of killing %s", round, b.Expiry+waitLimit, cur.id)
		}
		took = append(took, d)
		t.Logf("%s round %d: leader %s SIGKILLed; %s leads after %v (Expiry %v)", b.Name, round, cur.id, nl.id, d.Round(time.Millisecond), b.Expiry)
		if nl.id == cur.id {
			t.Fatalf("the killed candidate %s leads again", cur.id)
		}
		if d > b.Expiry+time.Second {
			t.Errorf("new leader after %v, want within Expiry + 1 s = %v", d, b.Expiry+time.Second)
		}
		cur = nl
	}
	tok, err := lock.ParseToken(cur.token)
	if err == nil && !last.Less(tok) {
		t.Errorf("leader token %s not above the previous %s", tok, last)
	}
	return took
}
