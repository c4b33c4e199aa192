// Package concbench measures txkit's recipes at concurrency against their bare baselines: the
// machinery of BenchmarkConcurrency (in this package's tests), which `make bench-concurrency` runs
// and bench/benchtable turns into one table. It serves this repository's benchmarks only.
//
// A Rotation runs each of its sides — the txkit path and the bare one — in turn, for a block of
// time each, with a given number of client goroutines calling the side's operation in a closed
// loop; the order rotates by one every round so that a change of load on the shared machine weighs
// on all sides alike. It records each side's operations, time, per-operation latency, the
// PostgreSQL transactions its blocks committed, counted by a Commits tracer on every pool the
// recipe's components use, and the processor time its blocks used, by process (cpustat). PGBench runs pgbench with a script of the same writes, for
// PostgreSQL's own ceiling at the same client count.
//
//	r := concbench.NewRotation(16, time.Second, commits.Load, txkitOp, bareOp)
//	for b.Loop() {
//		if err := r.Round(ctx); err != nil {
//			b.Fatal(err)
//		}
//	}
//	txkit, bare := r.Figures()[0], r.Figures()[1]
//	b.ReportMetric(txkit.PerSecond()/bare.PerSecond(), "ratio")
package concbench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/bench/cpustat"
)

// Op is one operation of a side, called by client number client (0 ≤ client < the rotation's
// clients) — so that a recipe can give each client rows or locks of its own. It blocks until the
// operation is done (for the asynchronous recipes: consumed, delivered).
type Op func(ctx context.Context, client int) error

// Figures is what a Rotation measured for one side, over all its blocks.
type Figures struct {
	Ops     int             // operations completed
	Took    time.Duration   // the side's blocks, end to end
	Commits int64           // PostgreSQL transactions committed during the side's blocks
	Lat     []time.Duration // each operation's latency, in no particular order
	CPU     cpustat.Times   // processor time used during the side's blocks
}

// PerSecond is Ops over Took: the side's throughput (0 when nothing ran).
func (f Figures) PerSecond() float64 {
	if f.Took <= 0 {
		return 0
	}
	return float64(f.Ops) / f.Took.Seconds()
}

// CommitsPerOp is Commits over Ops (0 when nothing ran).
func (f Figures) CommitsPerOp() float64 {
	if f.Ops == 0 {
		return 0
	}
	return float64(f.Commits) / float64(f.Ops)
}

// Percentile returns the latency below which a fraction p (0..1) of the operations fall, by
// nearest rank; 0 when nothing ran. It sorts f.Lat.
func (f Figures) Percentile(p float64) time.Duration {
	if len(f.Lat) == 0 {
		return 0
	}
	slices.Sort(f.Lat)
	i := int(p*float64(len(f.Lat))+0.5) - 1
	return f.Lat[min(max(i, 0), len(f.Lat)-1)]
}

// Rotation times sides in rotating blocks. It is not safe for concurrent use: one goroutine calls
// Round (which runs the clients itself).
type Rotation struct {
	clients int
	block   time.Duration
	commits func() int64
	sides   []Op
	figs    []Figures
	round   int
}

// NewRotation returns a Rotation of sides, each run by clients goroutines for block per round;
// commits, when not nil, returns a running count of PostgreSQL commits (Commits.Load) read
// before and after each block.
func NewRotation(clients int, block time.Duration, commits func() int64, sides ...Op) *Rotation {
	return &Rotation{clients: max(clients, 1), block: block, commits: commits, sides: sides, figs: make([]Figures, len(sides))}
}

// Round runs one block of each side (a nil side is skipped: its figures stay empty), the first side rotating by one each call. A block starts
// its clients together and ends when every client has finished the operation in progress at the
// block's deadline. It blocks for about len(sides) × block and returns the first operation error
// (wrapped with the side's index), after which the figures are incomplete. ctx cancels the
// operations.
func (r *Rotation) Round(ctx context.Context) error {
	for k := range r.sides {
		i := (k + r.round) % len(r.sides)
		if r.sides[i] == nil {
			continue
		}
		if err := r.block1(ctx, i); err != nil {
			return fmt.Errorf("side %d: %w", i, err)
		}
	}
	r.round++
	return nil
}

func (r *Rotation) block1(ctx context.Context, side int) error {
	var c0 int64
	if r.commits != nil {
		c0 = r.commits()
	}
	cpu0 := cpustat.Read()
	start := time.Now()
	deadline := start.Add(r.block)
	lats := make([][]time.Duration, r.clients)
	errs := make([]error, r.clients)
	var failed atomic.Bool
	var wg sync.WaitGroup
	for c := range r.clients {
		wg.Go(func() {
			for !failed.Load() && time.Now().Before(deadline) {
				t0 := time.Now()
				if err := r.sides[side](ctx, c); err != nil {
					errs[c] = err
					failed.Store(true)
					return
				}
				lats[c] = append(lats[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	f := &r.figs[side]
	f.Took += time.Since(start)
	f.CPU = f.CPU.Add(cpustat.Read().Sub(cpu0))
	for _, l := range lats {
		f.Ops += len(l)
		f.Lat = append(f.Lat, l...)
	}
	if r.commits != nil {
		f.Commits += r.commits() - c0
	}
	return errors.Join(errs...)
}

// Figures returns each side's figures so far, in the order of NewRotation's sides.
func (r *Rotation) Figures() []Figures { return r.figs }

// Commits counts the PostgreSQL transactions committed on the connections it traces: set it as
// the Tracer of every pool a recipe's components use (Pool does). A transaction counts when a
// statement, batch or copy ends without error on a connection that is then idle (not in a
// transaction block) and its command tag is not ROLLBACK: an autocommit statement, a COMMIT that
// committed, a batch or COPY outside a transaction. This is pg_stat_database.xact_commit for these
// connections alone (read-only transactions included), exact at every instant — the server's
// counter is shared with every other session in the database and flushed up to 10 s late. Safe
// for concurrent use.
type Commits struct {
	n     atomic.Int64
	mu    sync.Mutex
	pools []*pgxpool.Pool // made by Pool
}

// AcquireWait returns the time spent acquiring connections from the pools Pool made, summed
// over every acquisition so far (pgxpool's AcquireDuration: waiting for a free connection or a
// new one to be dialled).
func (c *Commits) AcquireWait() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var d time.Duration
	for _, p := range c.pools {
		d += p.Stat().AcquireDuration()
	}
	return d
}

// Load returns the commits counted so far.
func (c *Commits) Load() int64 { return c.n.Load() }

func (c *Commits) ended(conn *pgx.Conn, err error, tag string) {
	if err == nil && tag != "ROLLBACK" && conn.PgConn().TxStatus() == 'I' {
		c.n.Add(1)
	}
}

// TraceQueryStart implements pgx.QueryTracer; it does nothing.
func (c *Commits) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer: it counts a statement that ended a transaction.
func (c *Commits) TraceQueryEnd(_ context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	c.ended(conn, d.Err, d.CommandTag.String())
}

// TraceBatchStart implements pgx.BatchTracer; it does nothing.
func (c *Commits) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer; it does nothing (the batch is counted at its end).
func (c *Commits) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer: a batch outside a transaction block is one transaction.
func (c *Commits) TraceBatchEnd(_ context.Context, conn *pgx.Conn, d pgx.TraceBatchEndData) {
	c.ended(conn, d.Err, "")
}

// TraceCopyFromStart implements pgx.CopyFromTracer; it does nothing.
func (c *Commits) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	return ctx
}

// TraceCopyFromEnd implements pgx.CopyFromTracer: a COPY outside a transaction block is one transaction.
func (c *Commits) TraceCopyFromEnd(_ context.Context, conn *pgx.Conn, d pgx.TraceCopyFromEndData) {
	c.ended(conn, d.Err, "")
}

// AppName is the application_name of the connections of Commits.Pool: pg_stat_activity's rows
// of a benchmark run (for sampling its wait events) are those with it.
const AppName = "txkit-concbench"

// Pool returns a pool on url of at most maxConns connections, named AppName, whose transactions
// c counts. It blocks for nothing (pgxpool connects lazily); ctx is pgxpool's. The caller closes
// the pool.
func (c *Commits) Pool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("concbench: %w", err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.Tracer = c
	cfg.ConnConfig.RuntimeParams["application_name"] = AppName
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("concbench: %w", err)
	}
	c.mu.Lock()
	c.pools = append(c.pools, pool)
	c.mu.Unlock()
	return pool, nil
}

// PGBenchPath returns the pgbench executable: the one on PATH, else the newest of
// /usr/lib/postgresql/*/bin/pgbench (Debian's postgresql package, which deploy/local installs),
// else an error.
func PGBenchPath() (string, error) {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	if len(found) == 0 {
		return "", errors.New("concbench: no pgbench on PATH or in /usr/lib/postgresql/*/bin (install postgresql: make up does)")
	}
	slices.Sort(found) // one digit-count of major versions on a machine in practice
	return found[len(found)-1], nil
}

// PGBench runs pgbench against dsn (a connection URL; its search_path parameter, which pgx
// understands and libpq does not, is passed to the server through PGOPTIONS) with
// script, clients connections on 2 threads, for d (rounded up to whole seconds), the statements
// sent as prepared statements unless simple is set (then pgbench substitutes its :variables in
// the text, quoted literals included). It blocks until pgbench exits (ctx kills it) and returns
// the transactions per second pgbench reports, each transaction being one run of the script.
func PGBench(ctx context.Context, dsn, script string, clients int, d time.Duration, simple bool) (float64, error) {
	bin, err := PGBenchPath()
	if err != nil {
		return 0, err
	}
	f, err := os.CreateTemp("", "concbench-*.sql")
	if err != nil {
		return 0, fmt.Errorf("concbench: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(script); err != nil {
		f.Close()
		return 0, fmt.Errorf("concbench: %w", err)
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("concbench: %w", err)
	}
	mode := "prepared"
	if simple {
		mode = "simple"
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return 0, fmt.Errorf("concbench: %w", err)
	}
	q := u.Query()
	searchPath := q.Get("search_path")
	q.Del("search_path")
	u.RawQuery = q.Encode()
	secs := int((d + time.Second - 1) / time.Second)
	cmd := exec.CommandContext(ctx, bin, "-n", "-M", mode, "-c", strconv.Itoa(max(clients, 1)), "-j", strconv.Itoa(min(max(clients, 1), 2)),
		"-T", strconv.Itoa(max(secs, 1)), "-f", f.Name(), u.String())
	if searchPath != "" {
		cmd.Env = append(os.Environ(), "PGOPTIONS=-c search_path="+searchPath)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("concbench: pgbench: %w: %s", err, out)
	}
	return ParseTPS(string(out))
}

var tpsLine = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)

// ParseTPS returns the throughput in pgbench's report (the "tps = … (without initial connection
// time)" line), or an error naming the output when there is none.
func ParseTPS(out string) (float64, error) {
	m := tpsLine.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("concbench: no tps in pgbench's output: %q", out)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("concbench: pgbench tps %q: %w", m[1], err)
	}
	return v, nil
}

// DurationEnv returns the duration in the environment variable name (time.ParseDuration syntax),
// or def when it is unset; an unparsable value is an error naming the variable.
func DurationEnv(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("concbench: %s=%q: want a positive duration such as 2s", name, v)
	}
	return d, nil
}
