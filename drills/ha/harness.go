package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/txkit/txkit/drills/internal/drillkit"
	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/internal/testkit/netcut"
)

// The server faults the drill injects itself, each through the project's deploy/local scripts
// (their pid files: never a process another checkout started). The relay leader and consumer
// kills are the register-points workloads' own (-drill), the order coordinator's leader kills
// tcc-order's.
const (
	FaultDLedgerLeader = "dledger-leader" // SIGKILL the DLedger group's leader broker, then start it again
	FaultZKLeader      = "zk-leader"      // SIGKILL the ZooKeeper ensemble's leader node (one node only), then start it again
	FaultRedisPrimary  = "redis-primary"  // SIGKILL the Sentinel group's primary, wait for the promotion, start it again (a replica)
	// FaultPGPrimary SIGKILLs the HA PostgreSQL's primary (its Patroni and postmaster: pg-ha
	// kill-primary), waits for a new primary that takes writes, and starts the killed node again
	// (a standby). Only with Config.PGHA.
	FaultPGPrimary = "pg-primary"
	// FaultRelayCut cuts the relays off the DLedger group's leader broker for Config.Cut: an
	// iptables cut (internal/testkit/netcut) of everything this process and its descendants — the
	// workloads' relays and transactional producers, and also their consumers and the publish
	// probe — exchange with the leader's ports, both ways (packets dropped, no RST), then healed.
	// The brokers themselves and other processes are not cut: the group keeps its leader.
	FaultRelayCut = "relay-cut"
)

// Faults returns the server faults the drill injects by default (FaultPGPrimary joins them with
// Config.PGHA).
func Faults() []string {
	return []string{FaultDLedgerLeader, FaultZKLeader, FaultRedisPrimary, FaultRelayCut}
}

// Workload is one drill run beside the faults: a command, or a function run in the drill's process.
type Workload struct {
	Name string
	Cmd  string   // the drill: register-points or tcc-order (a command under ./drills)
	Args []string // its flags
	// Started, when set, is (part of) the line of Cmd's output that says its load has begun: the
	// faults wait for it (3 minutes at most), so that none lands on the workload's set-up.
	Started string
	// Run, when set, is the workload instead of Cmd: it runs until stop is closed (once every
	// fault has recovered and one more Gap of load has passed), then returns its report, and an
	// error when it broke its invariants.
	Run func(ctx context.Context, stop <-chan struct{}) (report string, err error)
}

// Config is one run of the HA drill.
type Config struct {
	Seed      uint64        // orders the faults; 0: a random seed (printed either way)
	Faults    []string      // the server faults, each injected once in the seed's order (default: all of Faults)
	Gap       time.Duration // load before the first fault, and between a fault's recovery and the next
	Cut       time.Duration // how long FaultRelayCut lasts (default 10 s)
	Workloads []Workload
	// DLedgerNamesrv is the DLedger group's name server (TXKIT_ROCKETMQ_DLEDGER_NAMESRV) and
	// DLedgerBrokers its brokers (TXKIT_ROCKETMQ_DLEDGER_BROKERS): the publish probe's.
	DLedgerNamesrv, DLedgerBrokers string
	Sentinels                      []string // TXKIT_REDIS_SENTINELS
	SentinelMaster                 string   // TXKIT_REDIS_SENTINEL_MASTER
	PG                             string   // the base PostgreSQL URL (the commit probe reads the register-points users table)
	// PGHA says PG is the HA PostgreSQL's multi-host URL (TXKIT_PG_HA_URL, deploy/local/pg-ha),
	// the workloads' too: FaultPGPrimary joins the faults.
	PGHA bool
	Dir  string    // binaries and logs
	Log  io.Writer // progress lines
}

// FaultFigures is what one fault cost.
type FaultFigures struct {
	Fault        string
	Victim       string        // the node killed
	NextLeader   time.Duration // fault → the server kind's next leader (0 when it kept its leader, e.g. a follower)
	NextPublish  time.Duration // fault → the publish probe's next successful send to the DLedger group
	NextCommit   time.Duration // fault → the next registration committed by a register-points workload
	Restarted    time.Duration // the killed node started again and back in its group
	Err          string
	PublishFails int // probe sends that failed between the fault and the next success
}

// Report is what the HA drill measured.
type Report struct {
	Seed       uint64
	Order      []string
	Figures    []FaultFigures
	Workloads  map[string]string // name → its report (everything from its "report" title on)
	Failed     map[string]string // name → why it failed (its exit status and last lines)
	Published  int               // probe messages sent
	Violations []string
	Elapsed    time.Duration
}

// OK is nil when every workload passed its invariants and every fault recovered.
func (r Report) OK() error {
	var nothing error
	if len(r.Workloads) == 0 && len(r.Failed) == 0 {
		nothing = errors.New("no workload ran")
	}
	return drillkit.Verdict(r.Violations, nothing)
}

func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed:                   %d (faults in order: %s)\n", r.Seed, strings.Join(r.Order, ", "))
	fmt.Fprintf(&b, "%-16s %-22s %12s %13s %12s %11s\n", "fault", "victim", "next leader", "next publish", "next commit", "restarted")
	for _, f := range r.Figures {
		fmt.Fprintf(&b, "%-16s %-22s %12s %13s %12s %11s", f.Fault, f.Victim, ms(f.NextLeader), ms(f.NextPublish), ms(f.NextCommit), ms(f.Restarted))
		if f.PublishFails > 0 {
			fmt.Fprintf(&b, "  (%d probe sends failed)", f.PublishFails)
		}
		if f.Err != "" {
			fmt.Fprintf(&b, "  ERROR %s", f.Err)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "publish probe:          %d messages sent to the DLedger group\n", r.Published)
	for _, name := range slices.Sorted(maps.Keys(r.Workloads)) {
		fmt.Fprintf(&b, "\n== workload %s\n%s", name, r.Workloads[name])
	}
	for _, name := range slices.Sorted(maps.Keys(r.Failed)) {
		fmt.Fprintf(&b, "\n== workload %s FAILED\n%s\n", name, r.Failed[name])
	}
	fmt.Fprintf(&b, "\nelapsed:                %v\n", r.Elapsed.Round(10*time.Millisecond))
	drillkit.WriteChecks(&b, nil, r.Violations)
	return b.String()
}

func ms(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

type harness struct {
	cfg  Config
	root string // the module root (deploy/local scripts)

	mu        sync.Mutex
	sent      []time.Time // successful probe sends
	failed    []time.Time // failed probe sends
	schemas   []string    // register-points workloads' schemas in txkit_users
	commits   []time.Time // times the commit probe saw the registrations grow
	lastCount int64
	started   map[string]bool // workloads whose Started line came
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.cfg.Log, "%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// Run builds the workloads' drills, starts them, injects the faults in the seed's order while they
// run, and waits for the workloads' verdicts.
func Run(ctx context.Context, cfg Config) (Report, error) {
	start := time.Now()
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	if cfg.Faults == nil {
		cfg.Faults = Faults()
	}
	if cfg.PGHA && !slices.Contains(cfg.Faults, FaultPGPrimary) {
		cfg.Faults = append(slices.Clone(cfg.Faults), FaultPGPrimary)
	}
	if cfg.Gap <= 0 {
		cfg.Gap = 8 * time.Second
	}
	rep := Report{Seed: cfg.Seed, Workloads: map[string]string{}, Failed: map[string]string{}}
	rep.Order = slices.Clone(cfg.Faults)
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	rng.Shuffle(len(rep.Order), func(i, j int) { rep.Order[i], rep.Order[j] = rep.Order[j], rep.Order[i] })
	root, err := drillkit.ModuleRoot(ctx)
	if err != nil {
		return rep, err
	}
	h := &harness{cfg: cfg, root: root, started: map[string]bool{}}
	h.logf("drill-ha: seed %d, faults %s", cfg.Seed, strings.Join(rep.Order, ", "))
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return rep, err
	}
	bins := map[string]string{}
	for _, w := range cfg.Workloads {
		if _, ok := bins[w.Cmd]; ok || w.Run != nil {
			continue
		}
		bin := filepath.Join(cfg.Dir, w.Cmd)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./drills/"+w.Cmd)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return rep, fmt.Errorf("go build %s: %w\n%s", w.Cmd, err, out)
		}
		bins[w.Cmd] = bin
	}

	pctx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	var probes sync.WaitGroup
	probeErr := make(chan error, 2)
	probes.Add(2)
	go func() { defer probes.Done(); probeErr <- h.publishProbe(pctx) }()
	go func() { defer probes.Done(); h.commitProbe(pctx) }()

	type result struct {
		name, report, fail string
	}
	results := make(chan result, len(cfg.Workloads))
	stopLoad := make(chan struct{}) // the in-process workloads' end
	defer func() {
		select {
		case <-stopLoad:
		default:
			close(stopLoad)
		}
	}()
	for _, w := range cfg.Workloads {
		go func() {
			if w.Run != nil {
				h.logf("workload %s: in process", w.Name)
				report, err := w.Run(ctx, stopLoad)
				fail := ""
				if err != nil {
					fail = fmt.Sprintf("%s%v", report, err)
				}
				results <- result{w.Name, report, fail}
				return
			}
			report, fail := h.runWorkload(ctx, w, bins[w.Cmd])
			results <- result{w.Name, report, fail}
		}()
	}
	running := len(cfg.Workloads)
	collect := func(r result) {
		running--
		if r.fail != "" {
			rep.Failed[r.name] = r.fail
			rep.Violations = append(rep.Violations, "workload "+r.name+" failed")
		} else {
			rep.Workloads[r.name] = r.report
		}
	}
	wait := func(d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				return nil
			case r := <-results:
				collect(r)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	// The faults start once the load does: a register-points workload's first registration
	// committed (its topic is created on every broker before that) and every Started line
	// seen, or 3 minutes.
	rp := slices.ContainsFunc(cfg.Workloads, func(w Workload) bool { return w.Cmd == "register-points" })
	for deadline := time.Now().Add(3 * time.Minute); running > 0 && time.Now().Before(deadline); {
		h.mu.Lock()
		started := !rp || len(h.commits) > 0
		for _, w := range cfg.Workloads {
			started = started && (w.Started == "" || h.started[w.Name])
		}
		h.mu.Unlock()
		if started {
			break
		}
		if err := wait(50 * time.Millisecond); err != nil {
			return rep, err
		}
	}
	for _, f := range rep.Order {
		if err := wait(cfg.Gap); err != nil {
			return rep, err
		}
		if running == 0 {
			rep.Violations = append(rep.Violations, fmt.Sprintf("fault %s not injected: the workloads ended before it (lower their rate or the gap)", f))
			continue
		}
		fig := h.inject(ctx, f)
		if fig.Err != "" {
			rep.Violations = append(rep.Violations, fmt.Sprintf("fault %s: %s", f, fig.Err))
		}
		rep.Figures = append(rep.Figures, fig)
	}
	// The in-process workloads run one more gap past the last recovery, then drain and check.
	if err := wait(cfg.Gap); err != nil {
		return rep, err
	}
	close(stopLoad)
	for running > 0 {
		select {
		case r := <-results:
			collect(r)
		case <-ctx.Done():
			return rep, ctx.Err()
		}
	}
	stopProbes()
	probes.Wait()
	if err := <-probeErr; err != nil {
		rep.Violations = append(rep.Violations, "publish probe: "+err.Error())
	}
	h.mu.Lock()
	rep.Published = len(h.sent)
	h.mu.Unlock()
	rep.Elapsed = time.Since(start)
	return rep, nil
}

var schemaLine = regexp.MustCompile(`schema (demo_[0-9a-f]+) in txkit_users`)

// runWorkload runs one drill to its end; it returns the drill's report, or why it failed.
func (h *harness) runWorkload(ctx context.Context, w Workload, bin string) (report, fail string) {
	logPath := filepath.Join(h.cfg.Dir, w.Name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return "", err.Error()
	}
	defer logf.Close()
	args := append(slices.Clone(w.Args), "-dir", filepath.Join(h.cfg.Dir, w.Name))
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = h.root
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err.Error()
	}
	h.logf("workload %s: %s %s (log %s)", w.Name, w.Cmd, strings.Join(w.Args, " "), logPath)
	if err := cmd.Start(); err != nil {
		return "", err.Error()
	}
	var all, rep strings.Builder
	inReport := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(logf, line)
		all.WriteString(line + "\n")
		if m := schemaLine.FindStringSubmatch(line); m != nil {
			h.mu.Lock()
			h.schemas = append(h.schemas, m[1])
			h.mu.Unlock()
		}
		if w.Started != "" && strings.Contains(line, w.Started) {
			h.mu.Lock()
			h.started[w.Name] = true
			h.mu.Unlock()
		}
		if strings.HasSuffix(line, "report") || strings.Contains(line, " report (") {
			inReport = true
		}
		if inReport {
			rep.WriteString(line + "\n")
		}
	}
	if err := cmd.Wait(); err != nil {
		return rep.String(), fmt.Sprintf("%s: %v (see %s)\n%s", w.Cmd, err, logPath, tail(all.String(), 30))
	}
	h.logf("workload %s passed", w.Name)
	return rep.String(), ""
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// publishProbe sends a message to a topic of its own on the DLedger group every 50 ms and records
// when sends succeed and fail.
func (h *harness) publishProbe(ctx context.Context) error {
	ns := strings.Split(h.cfg.DLedgerNamesrv, ",")
	topic := "txkit-ha-probe-" + uuid.NewString()[:8]
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(ns)))
	if err != nil {
		return err
	}
	defer adm.Close()
	if err := createTopic(ctx, adm, h.cfg.DLedgerBrokers, topic, 1); err != nil {
		return err
	}
	defer deleteTopic(adm, ns, h.cfg.DLedgerBrokers, topic)
	p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver(ns)),
		producer.WithGroupName("txkit-ha-probe-"+uuid.NewString()[:8]), producer.WithRetry(0),
		producer.WithSendMsgTimeout(time.Second))
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	defer p.Shutdown()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		res, err := p.SendSync(sctx, primitive.NewMessage(topic, []byte("probe")))
		cancel()
		now := time.Now()
		h.mu.Lock()
		if err == nil && res.Status == primitive.SendOK {
			h.sent = append(h.sent, now)
		} else if ctx.Err() == nil {
			h.failed = append(h.failed, now)
		}
		h.mu.Unlock()
	}
}

// commitProbe polls the register-points workloads' users tables every 50 ms and records when
// their count grows: a registration committed.
func (h *harness) commitProbe(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.mu.Lock()
		schemas := slices.Clone(h.schemas)
		h.mu.Unlock()
		if len(schemas) == 0 {
			continue
		}
		if conn == nil || conn.IsClosed() {
			c, err := exapp.Connect(ctx, h.cfg.PG, "txkit_users", "")
			if err != nil {
				continue
			}
			conn = c
		}
		var total int64
		for _, s := range schemas {
			var n int64
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := conn.QueryRow(qctx, "select count(*) from "+pgx.Identifier{s, "users"}.Sanitize()).Scan(&n)
			cancel()
			var pe *pgconn.PgError
			if err != nil && !errors.As(err, &pe) {
				// The server went away (a killed primary) or did not answer: connect again next tick.
				_ = conn.Close(context.Background())
				conn = nil
				break
			}
			total += n
		}
		if conn == nil {
			continue
		}
		h.mu.Lock()
		if total > h.lastCount {
			h.commits = append(h.commits, time.Now())
			h.lastCount = total
		}
		h.mu.Unlock()
	}
}

// firstAfter returns the first of ts after t0, minus t0, waiting up to d for one.
func (h *harness) firstAfter(ctx context.Context, ts *[]time.Time, t0 time.Time, d time.Duration) time.Duration {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		h.mu.Lock()
		i, _ := slices.BinarySearchFunc(*ts, t0, func(a, b time.Time) int { return a.Compare(b) })
		var got time.Duration
		if i < len(*ts) {
			got = (*ts)[i].Sub(t0)
		}
		h.mu.Unlock()
		if got > 0 {
			return got
		}
		if exapp.Pause(ctx, 20*time.Millisecond) != nil {
			return 0
		}
	}
	return 0
}

// script runs deploy/local/<name> with args and returns its trimmed output.
func (h *harness) script(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(h.root, "deploy", "local", name), args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("deploy/local/%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// inject runs one fault and measures it.
func (h *harness) inject(ctx context.Context, fault string) FaultFigures {
	fig := FaultFigures{Fault: fault}
	var (
		victim  string
		pidText string
		leader  func(ctx context.Context) (string, error) // the server kind's current leader
		restart func(ctx context.Context) error
		err     error
	)
	switch fault {
	case FaultDLedgerLeader:
		leader = func(ctx context.Context) (string, error) { return h.script(ctx, "rocketmq-cluster", "leader") }
		if victim, err = leader(ctx); err == nil {
			pidText, err = h.script(ctx, "rocketmq-cluster", "pid", victim)
		}
		restart = func(ctx context.Context) error {
			_, err := h.script(ctx, "rocketmq-cluster", "start-node", victim)
			return err
		}
	case FaultZKLeader:
		leader = h.zkLeader
		if victim, err = leader(ctx); err == nil {
			var b []byte
			b, err = os.ReadFile(filepath.Join(exapp.Env("TXKIT_HOME", filepath.Join(h.root, ".txkit")), "pids", "zk"+strings.TrimPrefix(victim, "zk")+".pid"))
			pidText = strings.TrimSpace(string(b))
		}
		restart = func(ctx context.Context) error {
			if _, err := h.script(ctx, "zk", "start", strings.TrimPrefix(victim, "zk")); err != nil {
				return err
			}
			return h.until(ctx, time.Minute, func() bool {
				out, err := h.script(ctx, "zk", "status")
				return err == nil && !strings.Contains(out, "DOWN")
			})
		}
	case FaultRedisPrimary:
		leader = h.redisPrimary
		if victim, err = leader(ctx); err == nil {
			_, port, _ := strings.Cut(victim, ":")
			pidText, err = h.script(ctx, "redis-sentinel", "pid", port)
		}
		restart = func(ctx context.Context) error { _, err := h.script(ctx, "redis-sentinel", "start"); return err }
	case FaultPGPrimary:
		return h.pgPrimary(ctx)
	case FaultRelayCut:
		return h.relayCut(ctx)
	default:
		fig.Err = "unknown fault"
		return fig
	}
	if err != nil {
		fig.Err = err.Error()
		return fig
	}
	fig.Victim = victim
	pid, err := strconv.Atoi(pidText)
	if err != nil {
		fig.Err = fmt.Sprintf("pid of %s: %q", victim, pidText)
		return fig
	}
	old, _ := leader(ctx)
	h.logf("fault %s: SIGKILL %s (pid %d)", fault, victim, pid)
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		fig.Err = fmt.Sprintf("kill %s: %v", victim, err)
		return fig
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); fig.NextPublish = h.firstAfter(ctx, &h.sent, t0, 2*time.Minute) }()
	go func() { defer wg.Done(); fig.NextCommit = h.firstAfter(ctx, &h.commits, t0, 2*time.Minute) }()
	if err := h.until(ctx, 2*time.Minute, func() bool {
		cur, err := leader(ctx)
		return err == nil && cur != "" && cur != old
	}); err != nil {
		fig.Err = "no new leader: " + err.Error()
	} else {
		fig.NextLeader = time.Since(t0)
	}
	wg.Wait()
	h.mu.Lock()
	for _, f := range h.failed {
		if f.After(t0) && f.Before(t0.Add(fig.NextPublish)) {
			fig.PublishFails++
		}
	}
	h.mu.Unlock()
	h.logf("fault %s: next leader %s, next publish %s, next commit %s; starting %s again", fault, ms(fig.NextLeader), ms(fig.NextPublish), ms(fig.NextCommit), victim)
	rs := time.Now()
	if err := restart(ctx); err != nil {
		fig.Err = strings.TrimSpace(fig.Err + " restart: " + err.Error())
	} else {
		fig.Restarted = time.Since(rs)
	}
	return fig
}

// until polls cond every 50 ms until it holds, d passes or ctx ends.
func (h *harness) until(ctx context.Context, d time.Duration, cond func() bool) error {
	for deadline := time.Now().Add(d); ; {
		if cond() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", d)
		}
		if err := exapp.Pause(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

var zkLine = regexp.MustCompile(`^(zk\d+)\s.*mode: leader`)

// zkLeader returns the ensemble's leader node (zk1, zk2, zk3) from deploy/local/zk status.
func (h *harness) zkLeader(ctx context.Context) (string, error) {
	out, _ := h.script(ctx, "zk", "status") // a DOWN node makes status fail; the lines still tell
	if out == "" {
		o, _ := exec.CommandContext(ctx, filepath.Join(h.root, "deploy", "local", "zk"), "status").CombinedOutput()
		out = string(o)
	}
	for _, l := range strings.Split(out, "\n") {
		if m := zkLine.FindStringSubmatch(l); m != nil {
			return m[1], nil
		}
	}
	return "", errors.New("no ZooKeeper node is leader")
}

// redisPrimary returns the address the Sentinels name as the primary.
func (h *harness) redisPrimary(ctx context.Context) (string, error) {
	var errs []error
	for _, s := range h.cfg.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s, DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond})
		addr, err := c.GetMasterAddrByName(ctx, h.cfg.SentinelMaster).Result()
		_ = c.Close()
		if err == nil && len(addr) == 2 {
			return addr[0] + ":" + addr[1], nil
		}
		errs = append(errs, err)
	}
	return "", errors.Join(errs...)
}

// pgPrimary is FaultPGPrimary: drillkit.PGFailover's kill (deploy/local/pg-ha kill-primary, a new
// primary taking writes, the killed node started again as a standby) with the drill's figures. The
// next leader is the first write committed through the HA URL after the kill.
func (h *harness) pgPrimary(ctx context.Context) FaultFigures {
	fig := FaultFigures{Fault: FaultPGPrimary}
	url, err := exapp.DatabaseURL(h.cfg.PG, "txkit_test", "", 0)
	if err != nil {
		fig.Err = err.Error()
		return fig
	}
	h.logf("fault %s: SIGKILL the HA PostgreSQL's primary", FaultPGPrimary)
	t0 := time.Now()
	figs, err := drillkit.PGFailover{Failovers: 1, URL: url, Log: h.logf}.Run(ctx, nil)
	if err != nil {
		fig.Err = err.Error()
	}
	if len(figs) == 1 {
		f := figs[0]
		fig.Victim = f.Node + " (" + f.Promoted + " promoted)"
		fig.NextLeader = f.Unavailable
		// The kill's time: PGFailover waits for a standby first and measures from the kill;
		// SyncBack, its last figure, ends as Run returns.
		killed := t0
		if f.SyncBack > 0 {
			killed = time.Now().Add(-f.SyncBack)
			fig.Restarted = f.SyncBack - f.InDoubtEnd // started again after the in-doubt check, a standby once more
		}
		// The publish probe needs no PostgreSQL: its figure is left out. The commit probe's would
		// count registrations committed before the kill and read after it: the next commit is
		// when registrations were made again after the outage.
		fig.NextCommit = h.registeredAfter(ctx, killed, f.Unavailable+time.Minute)
	}
	return fig
}

// relayCut is FaultRelayCut. Its figures count from the cut's start: the next publish and the
// next committed registration; there is no new leader, nothing to restart.
func (h *harness) relayCut(ctx context.Context) FaultFigures {
	fig := FaultFigures{Fault: FaultRelayCut}
	node, err := h.script(ctx, "rocketmq-cluster", "leader")
	if err != nil {
		fig.Err = err.Error()
		return fig
	}
	brokers := strings.Split(h.cfg.DLedgerBrokers, ",")
	i, err := strconv.Atoi(strings.TrimPrefix(node, "n"))
	if err != nil || i < 0 || i >= len(brokers) {
		fig.Err = fmt.Sprintf("leader %q is not one of %d brokers", node, len(brokers))
		return fig
	}
	_, portText, _ := strings.Cut(brokers[i], ":")
	port, err := strconv.Atoi(portText)
	if err != nil {
		fig.Err = fmt.Sprintf("broker address %q", brokers[i])
		return fig
	}
	d := h.cfg.Cut
	if d <= 0 {
		d = 10 * time.Second
	}
	fig.Victim = fmt.Sprintf("%s :%d, %v", node, port, d)
	// The broker's port and its VIP channel (port-2), which the client may use too.
	h.logf("fault %s: cutting this process's traffic with %s (%s) for %v", FaultRelayCut, node, brokers[i], d)
	t0 := time.Now()
	cut, err := netcut.New(ctx, fmt.Sprintf("ha-relay-%d", os.Getpid()%100000), netcut.Match{PIDs: []int{os.Getpid()}, Ports: []int{port, port - 2}})
	if err != nil {
		fig.Err = err.Error()
		return fig
	}
	defer func() { _ = cut.Heal(context.WithoutCancel(ctx)) }()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); fig.NextPublish = h.firstAfter(ctx, &h.sent, t0.Add(d), 2*time.Minute) }()
	go func() { defer wg.Done(); fig.NextCommit = h.firstAfter(ctx, &h.commits, t0, 2*time.Minute) }()
	if err := exapp.Pause(ctx, d); err != nil {
		fig.Err = err.Error()
	}
	if err := cut.Heal(context.WithoutCancel(ctx)); err != nil {
		fig.Err = strings.TrimSpace(fig.Err + " heal: " + err.Error())
	}
	wg.Wait()
	if fig.NextPublish > 0 {
		fig.NextPublish += d
	}
	h.mu.Lock()
	for _, f := range h.failed {
		if f.After(t0) && f.Before(t0.Add(fig.NextPublish)) {
			fig.PublishFails++
		}
	}
	h.mu.Unlock()
	h.logf("fault %s: healed; next publish %s after the cut began, next commit %s", FaultRelayCut, ms(fig.NextPublish), ms(fig.NextCommit))
	return fig
}

// registeredAfter returns how long after the kill at t (give or take the kill script's run)
// registrations were made again: the end of the longest pause between registrations (by their
// registered_at, set as the users service takes the request) in the register-points workloads'
// users tables from t to t+within. Registrations go on at the load's rate until the primary dies
// and start again when a new one takes writes. 0 when there is none.
func (h *harness) registeredAfter(ctx context.Context, t time.Time, within time.Duration) time.Duration {
	h.mu.Lock()
	schemas := slices.Clone(h.schemas)
	h.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := exapp.Connect(cctx, h.cfg.PG, "txkit_users", "")
	if err != nil {
		return 0
	}
	defer c.Close(context.WithoutCancel(ctx))
	ats := []time.Time{t}
	for _, s := range schemas {
		rows, err := c.Query(cctx, "select registered_at from "+pgx.Identifier{s, "users"}.Sanitize()+" where registered_at > $1 and registered_at < $2", t, t.Add(within))
		if err != nil {
			continue
		}
		for rows.Next() {
			var at time.Time
			if rows.Scan(&at) == nil {
				ats = append(ats, at)
			}
		}
		rows.Close()
	}
	slices.SortFunc(ats, func(a, b time.Time) int { return a.Compare(b) })
	var resumed time.Time
	var longest time.Duration
	for k := 1; k < len(ats); k++ {
		if gap := ats[k].Sub(ats[k-1]); gap > longest {
			longest, resumed = gap, ats[k]
		}
	}
	if resumed.IsZero() {
		return 0
	}
	return resumed.Sub(t)
}
