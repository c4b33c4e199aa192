package lock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/internal/testenv"
	"github.com/txkit/txkit/lock"
)

// Worker processes: the test binary runs itself with these variables set (see TestMain).
const (
	workerEnv  = "TXKIT_LOCK_WORKER" // "count" or "elect"
	workerPath = "TXKIT_LOCK_PATH"
	workerPG   = "TXKIT_LOCK_PG"
	workerN    = "TXKIT_LOCK_N" // count: goroutines,increments-per-goroutine
	workerID   = "TXKIT_LOCK_ID"
)

func runWorker() int {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var err error
	switch os.Getenv(workerEnv) {
	case "count":
		err = countWorker(ctx)
	case "elect":
		err = electWorker(ctx)
	default:
		err = fmt.Errorf("unknown worker %q", os.Getenv(workerEnv))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

func workerSession(ctx context.Context) (*lock.Session, error) {
	return lock.NewSession(ctx, strings.Split(os.Getenv(testenv.EnvZK), ","), lock.WithSessionTimeout(testSessionTimeout))
}

// countWorker increments a counter in PostgreSQL with a read-then-write under the lock, from
// several goroutines, each with its own Mutex; each increment records the token that made it.
func countWorker(ctx context.Context) error {
	g, n, _ := strings.Cut(os.Getenv(workerN), ",")
	goroutines, _ := strconv.Atoi(g)
	total, _ := strconv.Atoi(n)
	s, err := workerSession(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	pool, err := pgxpool.New(ctx, os.Getenv(workerPG))
	if err != nil {
		return err
	}
	defer pool.Close()
	var eg errgroup.Group
	for i := 0; i < goroutines; i++ {
		m, err := lock.NewMutex(s, os.Getenv(workerPath))
		if err != nil {
			return err
		}
		each := total / goroutines
		if i < total%goroutines {
			each++
		}
		eg.Go(func() error {
			for j := 0; j < each; j++ {
				if err := incrementUnderLock(ctx, m, pool); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return eg.Wait()
}

func incrementUnderLock(ctx context.Context, m *lock.Mutex, pool *pgxpool.Pool) error {
	for {
		l, err := m.Lock(ctx)
		if err != nil {
			if errors.Is(err, lock.ErrSessionExpired) {
				continue // a new session follows; try again
			}
			return err
		}
		var v int64
		err = pool.QueryRow(l.Context(), "select v from counter where id = 1").Scan(&v)
		if err == nil {
			// The read and the write are separate statements outside any transaction: only the
			// lock keeps two increments from reading the same value.
			_, err = pool.Exec(l.Context(), "update counter set v = $1 where id = 1", v+1)
		}
		if err == nil {
			_, err = pool.Exec(l.Context(), "insert into history(v, epoch, seq, pid) values ($1, $2, $3, $4)",
				v+1, l.Token().Epoch, l.Token().Seq, os.Getpid())
		}
		uerr := m.Unlock(ctx)
		if err != nil {
			if l.Err() != nil {
				continue // lost the lock mid-way; the fenced history check would show any harm
			}
			return err
		}
		if uerr != nil {
			return uerr
		}
		return nil
	}
}

// electWorker campaigns and prints "LEADER <id> <token>" when it leads, then leads until killed
// or until the leadership is lost (then it prints "LOST <id>" and campaigns again).
func electWorker(ctx context.Context) error {
	s, err := workerSession(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Println("READY")
	e, err := lock.NewElector(s, os.Getenv(workerPath), os.Getenv(workerID))
	if err != nil {
		return err
	}
	return e.RunWhileLeader(ctx, func(ctx context.Context, l lock.Leadership) error {
		fmt.Printf("LEADER %s %s\n", e.ID(), l.Token())
		<-ctx.Done()
		fmt.Printf("LOST %s\n", e.ID())
		return nil
	})
}

// worker is a running worker process.
type worker struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan error
}

func startWorker(t *testing.T, env ...string) *worker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = &prefixWriter{t: t}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &worker{cmd: cmd, lines: make(chan string, 1024), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
		w.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-w.done
	})
	return w
}

type prefixWriter struct {
	t  *testing.T
	mu sync.Mutex
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.t.Logf("worker stderr: %s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// TestIntegrationExclusionProcesses: 4 processes x 16 goroutines make 2000 read-then-write
// increments under the lock: none is lost, and the tokens that made them strictly increase.
func TestIntegrationExclusionProcesses(t *testing.T) {
	t.Parallel()
	checkCounter(t, 4, 16, 2000, nil)
}

// TestIntegrationExclusionWhileZKServerRestarts: one ZooKeeper server of three — the ensemble's
// leader, the harder case: the others must elect a new one — is stopped and started again while 8
// processes contend; the lock keeps working and exclusion holds.
func TestIntegrationExclusionWhileZKServerRestarts(t *testing.T) {
	servers := testenv.ZK(t)
	if len(servers) < 3 {
		t.Fatalf("this test needs the three-node ensemble (%s has %d servers)", testenv.EnvZK, len(servers))
	}
	checkCounter(t, 8, 4, 800, func(progress func() int64) {
		testenv.Eventually(t, 60*time.Second, 20*time.Millisecond, func() bool { return progress() >= 100 }, "100 increments before the stop")
		n := zkLeader(t, servers)
		zkNode(t, "stop", n)
		at := progress()
		testenv.Eventually(t, 60*time.Second, 20*time.Millisecond, func() bool { return progress() >= at+100 }, "100 increments while zk%d is down", n)
		zkNode(t, "start", n)
		t.Logf("zk%d (the ensemble's leader) stopped at %d increments and started at %d", n, at, progress())
	})
}

// zkLeader returns the number (1-based position in servers) of the ensemble's leader.
func zkLeader(t *testing.T, servers []string) int {
	t.Helper()
	for i, addr := range servers {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			continue
		}
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = c.Write([]byte("srvr"))
		out, _ := io.ReadAll(c)
		_ = c.Close()
		if strings.Contains(string(out), "Mode: leader") {
			return i + 1
		}
	}
	t.Fatal("no ZooKeeper server says it leads")
	return 0
}

// zkNode runs deploy/local/zk ACTION N.
func zkNode(t *testing.T, action string, n int) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "deploy", "local", "zk"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(script, action, strconv.Itoa(n)).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s %d: %v\n%s", script, action, n, err, out)
	}
	if action == "stop" {
		t.Cleanup(func() { _ = exec.Command(script, "start", strconv.Itoa(n)).Run() })
	}
}

func checkCounter(t *testing.T, procs, goroutines, total int, during func(progress func() int64)) {
	t.Helper()
	db := testenv.PG(t)
	path := testenv.ZKRoot(t) + "/counter"
	ctx := t.Context()
	if _, err := db.Pool.Exec(ctx, `create table counter(id int primary key, v bigint not null);
		insert into counter values (1, 0);
		create table history(v bigint not null, epoch bigint not null, seq bigint not null, pid int not null)`); err != nil {
		t.Fatal(err)
	}
	ws := make([]*worker, procs)
	for i := range ws {
		n := total / procs
		if i < total%procs {
			n++
		}
		ws[i] = startWorker(t, workerEnv+"=count", workerPath+"="+path, workerPG+"="+db.URL,
			fmt.Sprintf("%s=%d,%d", workerN, goroutines, n))
	}
	if during != nil {
		during(func() int64 {
			var v int64
			_ = db.Pool.QueryRow(ctx, "select v from counter where id = 1").Scan(&v)
			return v
		})
	}
	for i, w := range ws {
		select {
		case err := <-w.done:
			w.done <- err
			if err != nil {
				t.Fatalf("worker %d: %v", i, err)
			}
		case <-time.After(5 * time.Minute):
			t.Fatalf("worker %d did not finish", i)
		}
	}
	var v int64
	if err := db.Pool.QueryRow(ctx, "select v from counter where id = 1").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != int64(total) {
		t.Fatalf("counter = %d after %d increments: %d lost", v, total, int64(total)-v)
	}
	checkHistory(t, db.Pool, total)
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

// TestIntegrationLeaderKilled: the leading process is SIGKILLed; another leads within the session
// timeout + 1 s. Twice.
func TestIntegrationLeaderKilled(t *testing.T) {
	t.Parallel()
	testenv.ZK(t)
	path := testenv.ZKRoot(t) + "/election"
	ws := map[string]*worker{}
	leaders := make(chan [2]string, 16)
	var fwd sync.WaitGroup
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("candidate-%d", i)
		w := startWorker(t, workerEnv+"=elect", workerPath+"="+path, workerID+"="+id)
		ws[id] = w
		fwd.Add(1)
		go func() {
			defer fwd.Done()
			for line := range w.lines {
				if f := strings.Fields(line); len(f) == 3 && f[0] == "LEADER" {
					leaders <- [2]string{f[1], f[2]}
				}
			}
		}()
	}
	next := func() [2]string {
		select {
		case l := <-leaders:
			return l
		case <-time.After(30 * time.Second):
			t.Fatal("no leader within 30s")
			return [2]string{}
		}
	}
	cur := next()
	var lastTok lock.Token
	for round := 0; round < 2; round++ {
		tok, err := lock.ParseToken(cur[1])
		if err != nil {
			t.Fatal(err)
		}
		if !lastTok.Less(tok) {
			t.Fatalf("leader token %s not above the previous %s", tok, lastTok)
		}
		lastTok = tok
		killed := time.Now()
		if err := ws[cur[0]].cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		nl := next()
		took := time.Since(killed)
		t.Logf("round %d: %s killed, %s leads after %v (session timeout %v)", round, cur[0], nl[0], took.Round(time.Millisecond), testSessionTimeout)
		if nl[0] == cur[0] {
			t.Fatalf("the killed candidate %s leads again", cur[0])
		}
		if took > testSessionTimeout+time.Second {
			t.Fatalf("new leader after %v, want within %v", took, testSessionTimeout+time.Second)
		}
		cur = nl
	}
	for _, w := range ws {
		_ = w.cmd.Process.Kill()
	}
	fwd.Wait()
}
