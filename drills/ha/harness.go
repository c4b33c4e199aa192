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
	"github.com/redis/go-redis/v9"

	"github.com/txkit/txkit/drills/internal/drillkit"
	"github.com/txkit/txkit/examples/exapp"
)

// The server faults the drill injects itself, each through the project's deploy/local scripts
// (their pid files: never a process another checkout started). The relay leader and consumer
// kills are the register-points workloads' own (-drill), the order coordinator's leader kills
// tcc-order's.
const (
	FaultDLedgerLeader = "dledger-leader" // SIGKILL the DLedger group's leader broker, then start it again
	FaultZKLeader      = "zk-leader"      // SIGKILL the ZooKeeper ensemble's leader node (one node only), then start it again
	FaultRedisPrimary  = "redis-primary"  // SIGKILL the Sentinel group's primary, wait for the promotion, start it again (a replica)
)

// Faults returns the server faults the drill knows.
func Faults() []string { return []string{FaultDLedgerLeader, FaultZKLeader, FaultRedisPrimary} }

// Workload is one drill run beside the faults.
type Workload struct {
	Name string
	Cmd  string   // the drill: register-points or tcc-order (a command under ./drills)
	Args []string // its flags
}

// Config is one run of the HA drill.
type Config struct {
	Seed      uint64        // orders the faults; 0: a random seed (printed either way)
	Faults    []string      // the server faults, each injected once in the seed's order (default: all of Faults)
	Gap       time.Duration // load before the first fault, and between a fault's recovery and the next
	Workloads []Workload
	// DLedgerNamesrv is the DLedger group's name server (TXKIT_ROCKETMQ_DLEDGER_NAMESRV) and
	// DLedgerBrokers its brokers (TXKIT_ROCKETMQ_DLEDGER_BROKERS): the publish probe's.
	DLedgerNamesrv, DLedgerBrokers string
	Sentinels                      []string // TXKIT_REDIS_SENTINELS
	SentinelMaster                 string   // TXKIT_REDIS_SENTINEL_MASTER
	PG                             string   // the base PostgreSQL URL (the commit probe reads the register-points users table)
	// PGHA is the hook for the HA PostgreSQL fault (another issue's servers): when set, a
	// command run as a fault "pg-primary" (it must kill the primary and return once a new one
	// serves). Empty: no PostgreSQL fault.
	PGHA string
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
	if cfg.PGHA != "" && !slices.Contains(cfg.Faults, "pg-primary") {
		cfg.Faults = append(slices.Clone(cfg.Faults), "pg-primary")
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
	h := &harness{cfg: cfg, root: root}
	h.logf("drill-ha: seed %d, faults %s", cfg.Seed, strings.Join(rep.Order, ", "))
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return rep, err
	}
	bins := map[string]string{}
	for _, w := range cfg.Workloads {
		if _, ok := bins[w.Cmd]; ok {
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
	for _, w := range cfg.Workloads {
		go func() {
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
	// committed (its topic is created on every broker before that), or 3 minutes.
	if slices.ContainsFunc(cfg.Workloads, func(w Workload) bool { return w.Cmd == "register-points" }) {
		for deadline := time.Now().Add(3 * time.Minute); running > 0 && time.Now().Before(deadline); {
			h.mu.Lock()
			started := len(h.commits) > 0
			h.mu.Unlock()
			if started {
				break
			}
			if err := wait(50 * time.Millisecond); err != nil {
				return rep, err
			}
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
	for _, b := range strings.Split(h.cfg.DLedgerBrokers, ",") {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := adm.CreateTopic(cctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(b),
			admin.WithReadQueueNums(1), admin.WithWriteQueueNums(1))
		cancel()
		if err != nil {
			return fmt.Errorf("create topic %s on %s: %w", topic, b, err)
		}
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, b := range strings.Split(h.cfg.DLedgerBrokers, ",") {
			_ = adm.DeleteTopic(cctx, admin.WithTopicDelete(topic), admin.WithBrokerAddrDelete(b), admin.WithNameSrvAddr(ns))
		}
	}()
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
			if err := conn.QueryRow(ctx, "select count(*) from "+pgx.Identifier{s, "users"}.Sanitize()).Scan(&n); err == nil {
				total += n
			}
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
	case "pg-primary":
		t0 := time.Now()
		cmd := exec.CommandContext(ctx, "sh", "-c", h.cfg.PGHA)
		if out, err := cmd.CombinedOutput(); err != nil {
			fig.Err = fmt.Sprintf("%s: %v\n%s", h.cfg.PGHA, err, out)
			return fig
		}
		fig.Victim, fig.NextLeader = "pg primary", time.Since(t0)
		fig.NextCommit = h.firstAfter(ctx, &h.commits, t0, time.Minute)
		return fig
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
