package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/drills/internal/drillkit"
	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/transfer/app"
	"github.com/txkit/txkit/internal/testkit/tcpproxy"
)

// Config is one run of the example.
type Config struct {
	Transfers   int // random transfers after the script (0: the script only)
	Instances   int // bank instances (coordinators; only the elected one recovers)
	Concurrency int // transfers in flight at once
	Rate        int // transfers started per second at most (0: as fast as they go)
	// Drill SIGKILLs the leading bank instance during the load, Kills times, and starts it again;
	// each kill waits first (up to 5s) for the leader to be between the phases of a transfer.
	Drill     bool
	Kills     int
	KillEvery time.Duration // pause before each kill (each also waits for the previous failover)
	// PauseRate of the commits sleep Pause between the phases, at PauseAt ("prepared", "decided"
	// or "both"): the bank's -pause-rate, -pause, -pause-at. Only with Drill.
	PauseRate      float64
	Pause          time.Duration
	PauseAt        string
	SessionTimeout time.Duration // the banks' ZooKeeper session timeout (default 4s)
	PG, ZK         string        // base PostgreSQL URL, ZooKeeper servers
	Dir            string        // where the binary and the logs go
	Log            io.Writer     // progress lines
	Keep           bool          // keep the run's schemas afterwards
	SettleTimeout  time.Duration // bound of the wait for every transaction to finish (default 3m)
	// Protocol is the banks' -protocol: "2pc" (the default) or "3pc". With 3pc the harness also
	// starts one agent (examples/transfer/agent) beside each database, in Termination mode
	// ("consult-log", the default, or "textbook"), with ParticipantTimeout (default 3s) as their
	// timeout and the banks' -participant-timeout.
	Protocol           string
	Termination        string
	ParticipantTimeout time.Duration
	// Votes gives the 2pc banks -votes (twopc.WithVoteMarkers; false: -votes=false, the decision
	// written between the phases): a transfer is recorded while its branches prepare and commits
	// once both voted yes.
	Votes bool
	// Partitions is the number of partition trials run one after the other once the load is over:
	// each arms the west proxy (between the banks and txkit_west) to partition the link as soon
	// as a PREPARE TRANSACTION has gone through, sends a transfer, heals after the participant
	// timeout plus 1s, waits until the transfer has settled, and classifies it by its ledger rows.
	Partitions int
	// PGFailovers, with PG the HA PostgreSQL's URL (TXKIT_PG_HA_URL), SIGKILLs its primary this
	// many times during the load (deploy/local/pg-ha kill-primary; see drillkit.PGFailover).
	PGFailovers int
	PGCut       bool // the last of PGFailovers is a network cut of the primary (frozen, then thawed), not a kill
	PGAsync     bool // PGFailovers with asynchronous replication (Patroni synchronous_mode off)
}

// Step is one transfer of the demo's script, what it should do and what it did.
type Step struct {
	From, To   string
	Amount     int64
	Want, Got  string // answer status: committed, refused, rejected, ...
	Code       int
	GID, Error string
}

// Report is what a run measured and the invariants it checked.
type Report struct {
	Script         []Step
	Before, After  map[string]map[string]int64 // the script's accounts: database → account → balance
	Transfers      int                         // random transfers sent
	Answers        map[string]int              // answer status → count; "unanswered" when the instance died
	Globals        map[string]int              // final statuses in the log
	NotInLog       int                         // transfers sent that the log never recorded (aborted before their commit began)
	Initial, Final int64                       // money in both databases together
	East, West     int64                       // money in each database at the end
	LedgerEast     int                         // ledger rows
	LedgerWest     int
	OtherPrepared  int // txkit prepared transactions of other runs or tests in the two databases
	Protocol       string
	Termination    string // 3pc: the agents' mode
	LeaderKills    int
	Failovers      []time.Duration // leader SIGKILL → the next leader's first recovery (fence)
	PGFailovers    []drillkit.FailoverFigures
	InDoubt        []int           // per kill: prepared transactions the dead leader left in the databases
	Resolved       []time.Duration // per kill with some: SIGKILL → the last of them committed or rolled back
	// Blocking: per transfer a killed leader left prepared, the time from the SIGKILL until its
	// last prepared transaction ended (its row locks released).
	Blocking []time.Duration
	// Partition trials: how many ran, how many of them partitioned (a PREPARE went through to
	// west and its answer was lost), the answers the trials' transfers got, and how they ended by
	// their ledger rows ("aborted on both sides", "committed on both sides", "committed in west
	// only", "committed in east only").
	PartitionTrials, Partitioned int
	PartitionAnswers             map[string]int
	PartitionEnds                map[string]int
	// Anomalies: transfers committed on one side and aborted on the other (ledger rows on one
	// side only); AgainstLog: transfers whose ledger rows disagree with the log's outcome. Both
	// are violations, except in textbook mode for the trials' and the kills' transfers, where the
	// agents' commits are the protocol's documented anomaly and are counted here instead.
	Anomalies, AgainstLog int
	Created               int64          // money the anomalies created (or destroyed) in textbook mode
	Agents                map[string]any // the agents' /stats at the end, by database
	InDoubtEnd            map[string]int // final log status of the transactions left in doubt
	doubted               []string       // their gids
	Settled               bool
	Settle                time.Duration // last answer → every transaction finished, no prepared transaction left
	Elapsed               time.Duration
	Violations            []string // broken invariants; empty when all hold
	Checks                []string // invariants checked, with their numbers
}

// OK returns the broken invariants as one error, an error when nothing ran, or nil.
func (r Report) OK() error {
	var nothing error
	if len(r.Script) == 0 {
		nothing = errors.New("no transfer made")
	}
	return drillkit.Verdict(r.Violations, nothing)
}

// BlockingP returns the q-th percentile (nearest rank) of Blocking, or 0 when it is empty.
func (r Report) BlockingP(q float64) time.Duration {
	if len(r.Blocking) == 0 {
		return 0
	}
	ds := slices.Sorted(slices.Values(r.Blocking))
	i := int(math.Ceil(q/100*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// mode names the run's protocol and, with 3pc, its termination mode.
func (r Report) mode() string {
	if r.Protocol == "3pc" {
		return "3pc " + r.Termination
	}
	return r.Protocol
}

// agentsLine prints the agents' counters.
func agentsLine(agents map[string]any) string {
	var parts []string
	for _, db := range slices.Sorted(maps.Keys(agents)) {
		b, _ := json.Marshal(agents[db])
		parts = append(parts, db+" "+string(b))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// MaxFailover returns the longest measured failover.
func (r Report) MaxFailover() time.Duration { return drillkit.Longest(r.Failovers) }

func (r Report) String() string {
	var b strings.Builder
	if r.Before != nil {
		fmt.Fprintf(&b, "balances before:        %s\n", balances(r.Before))
	}
	for i, s := range r.Script {
		mark := ""
		if s.Got != s.Want {
			mark = fmt.Sprintf("  (WANTED %s)", s.Want)
		}
		fmt.Fprintf(&b, "transfer %d:             %s (east) → %s (west) %d: %d %s%s\n", i+1, s.From, s.To, s.Amount, s.Code, s.Got, mark)
	}
	if r.After != nil {
		fmt.Fprintf(&b, "balances after:         %s\n", balances(r.After))
	}
	if r.Transfers > 0 {
		fmt.Fprintf(&b, "random transfers:       %d (answers: %s)\n", r.Transfers, counts(r.Answers))
	}
	never := "aborted before a decision: presumed abort"
	if r.Protocol == "3pc" {
		never = "aborted at CanCommit, before any PreCommit: presumed abort"
	}
	fmt.Fprintf(&b, "global transactions:    %s; %d transfers never in the log (%s)\n", counts(r.Globals), r.NotInLog, never)
	if r.Created != 0 {
		fmt.Fprintf(&b, "money:                  initial %d %+d from the one-sided transfers = now %d (east %d + west %d)\n", r.Initial, r.Created, r.Final, r.East, r.West)
	} else {
		fmt.Fprintf(&b, "money:                  initial %d = now %d (east %d + west %d)\n", r.Initial, r.Final, r.East, r.West)
	}
	fmt.Fprintf(&b, "ledger rows:            east %d, west %d\n", r.LedgerEast, r.LedgerWest)
	if r.Protocol == "3pc" {
		fmt.Fprintf(&b, "agents:                 %s, %s\n", r.Termination, agentsLine(r.Agents))
	}
	if r.LeaderKills > 0 {
		fmt.Fprintf(&b, "leader kills:           %d SIGKILLed and restarted; leader death → next leader's first recovery: %s (max %v)\n",
			r.LeaderKills, durations(r.Failovers), r.MaxFailover().Round(time.Millisecond))
		landed := 0
		for _, n := range r.InDoubt {
			if n > 0 {
				landed++
			}
		}
		fmt.Fprintf(&b, "between the phases:     %d of %d kills left prepared transactions in doubt (%v); all ended %s after the kill (max %v); their outcome: %s\n",
			landed, r.LeaderKills, r.InDoubt, durations(r.Resolved), drillkit.Longest(r.Resolved).Round(time.Millisecond), counts(r.InDoubtEnd))
		fmt.Fprintf(&b, "blocking (%s):         %d transfers left prepared by a killed leader held their rows locked from the SIGKILL for p50 %v, p99 %v (max %v)\n",
			r.Protocol, len(r.Blocking), r.BlockingP(50).Round(time.Millisecond), r.BlockingP(99).Round(time.Millisecond), drillkit.Longest(r.Blocking).Round(time.Millisecond))
	}
	if r.PartitionTrials > 0 {
		fmt.Fprintf(&b, "partitions:             %d trials, %d partitioned after a PREPARE reached west (answers: %s); ended: %s\n",
			r.PartitionTrials, r.Partitioned, counts(r.PartitionAnswers), counts(r.PartitionEnds))
		fmt.Fprintf(&b, "anomalies:              %s: %d transfers committed on one side and aborted on the other, %d whose ledgers disagree with the log\n",
			r.mode(), r.Anomalies, r.AgainstLog)
	}
	for i, f := range r.PGFailovers {
		fmt.Fprintf(&b, "PostgreSQL failover %d:  %s\n", i+1, f)
	}
	if r.Settled {
		fmt.Fprintf(&b, "settled:                every transaction finished %v after the last answer\n", r.Settle.Round(time.Millisecond))
	} else {
		fmt.Fprintf(&b, "NOT settled:            transactions still unfinished %v after the last answer\n", r.Settle.Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "elapsed:                %v\n", r.Elapsed.Round(10*time.Millisecond))
	drillkit.WriteChecks(&b, r.Checks, r.Violations)
	return b.String()
}

func balances(m map[string]map[string]int64) string {
	var parts []string
	var total int64
	for _, db := range []string{"east", "west"} {
		var accts []string
		for _, k := range slices.Sorted(maps.Keys(m[db])) {
			accts = append(accts, fmt.Sprintf("%s %d", k, m[db][k]))
			total += m[db][k]
		}
		parts = append(parts, db+" "+strings.Join(accts, ", "))
	}
	return strings.Join(parts, " | ") + fmt.Sprintf(" (total %d)", total)
}

func durations(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.Round(time.Millisecond).String()
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func counts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// The demo's script: the accounts it uses and its transfers, each with the answer it must get.
var (
	scriptEast = map[string]int64{"alice": 100, "bob": 50, "carol": 10}
	scriptWest = map[string]int64{"alice": 0, "bob": 20, "carol": 5}
	script     = []Step{
		{From: "alice", To: "bob", Amount: 30, Want: "committed"},
		{From: "bob", To: "carol", Amount: 50, Want: "committed"},
		{From: "carol", To: "alice", Amount: 25, Want: "refused"}, // carol has 10 in east
		{From: "alice", To: "carol", Amount: 70, Want: "committed"},
		{From: "alice", To: "bob", Amount: 1, Want: "refused"},  // alice has nothing left in east
		{From: "carol", To: "zoe", Amount: 5, Want: "rejected"}, // no zoe in west: carol's debit is rolled back
	}
)

// sent is a transfer the harness made: where it went and what it moved.
type sent struct {
	t        app.Transfer
	instance string // the bank instance it was sent to
}

// proc is a running bank process.
type proc struct {
	id   string
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

type harness struct {
	cfg     Config
	proxy   *tcpproxy.Proxy  // between the banks and txkit_west, with Partitions
	agents  map[string]*proc // 3pc: by database, east and west
	runID   string
	schema  string
	east    map[string]int64 // initial balances
	west    map[string]int64
	mu      sync.Mutex
	banks   map[string]*proc // live instances by id, "bank-<slot>.<start>"
	starts  int
	client  *http.Client
	sent    sync.Map // gid → sent
	answers sync.Map // gid → answer status
	errs    sync.Map // gid → the error text of its answer, when it had one
	// expected: gid → true for the transfers a textbook agent may end against the coordinator
	// (the partition trials' and those a killed leader left prepared).
	expected sync.Map
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.cfg.Log, "[%s] %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// Run builds and starts the bank instances, runs the script and cfg.Transfers random transfers
// (SIGKILLing the leader during them in a drill), waits until every global transaction has
// finished and no prepared transaction is left, and checks the invariants. The error reports a
// run that could not complete; broken invariants are in [Report.Violations] (see [Report.OK]).
func Run(ctx context.Context, cfg Config) (Report, error) {
	start := time.Now()
	if cfg.Instances < 1 || cfg.Concurrency < 1 || cfg.Transfers < 0 || cfg.Partitions < 0 {
		return Report{}, errors.New("need at least one instance and a concurrency of one")
	}
	if cfg.Protocol == "" {
		cfg.Protocol = "2pc"
	}
	if cfg.Termination == "" {
		cfg.Termination = "consult-log"
	}
	if cfg.ParticipantTimeout <= 0 {
		cfg.ParticipantTimeout = 3 * time.Second
	}
	if cfg.Protocol != "2pc" && cfg.Protocol != "3pc" {
		return Report{}, fmt.Errorf("protocol %q: want 2pc or 3pc", cfg.Protocol)
	}
	if cfg.Votes && cfg.Protocol != "2pc" {
		return Report{}, fmt.Errorf("votes with protocol %q: vote markers are 2pc's", cfg.Protocol)
	}
	if cfg.Termination != "consult-log" && cfg.Termination != "textbook" {
		return Report{}, fmt.Errorf("termination %q: want consult-log or textbook", cfg.Termination)
	}
	runID := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	h := &harness{cfg: cfg, runID: runID, schema: "xfer_" + runID, banks: map[string]*proc{}, agents: map[string]*proc{},
		client: &http.Client{Timeout: 30 * time.Second}, east: maps.Clone(scriptEast), west: maps.Clone(scriptWest)}
	// A hundred accounts for the random load (few enough that transfers wait on each other's
	// prepared rows), east holding about twice what it sends.
	for i := 1; i <= accountsN && cfg.Transfers > 0; i++ {
		h.east[account(i)] = max(1000, int64(cfg.Transfers)*100/accountsN)
		h.west[account(i)] = 1000
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return Report{}, err
	}
	if cfg.Partitions > 0 {
		h.east[partFrom], h.west[partTo] = int64(cfg.Partitions), 0
	}
	services := []string{"bank"}
	if cfg.Protocol == "3pc" {
		services = append(services, "agent")
	}
	if err := drillkit.Build(ctx, h.cfg.Dir, "transfer", services...); err != nil {
		return Report{}, err
	}
	mode := cfg.Protocol
	if cfg.Protocol == "3pc" {
		mode += " (agents: " + cfg.Termination + ", timeout " + cfg.ParticipantTimeout.String() + ")"
	}
	h.logf("run %s: %s; schema %s in %s and %s; %d bank instances, %d random transfers, drill %v, %d partition trials",
		runID, mode, h.schema, app.East, app.West, cfg.Instances, cfg.Transfers, cfg.Drill, cfg.Partitions)
	if !cfg.Keep {
		defer h.cleanup()
	}
	if cfg.Partitions > 0 {
		if err := h.startProxy(); err != nil {
			return Report{}, err
		}
		defer h.proxy.Close() // after the banks have stopped
	}
	defer h.stopAll()
	if cfg.Protocol == "3pc" {
		for _, db := range []string{"east", "west"} {
			if err := h.startAgent(ctx, db); err != nil {
				return Report{}, err
			}
		}
	}
	for i := 1; i <= cfg.Instances; i++ {
		if err := h.startBank(ctx, i); err != nil {
			return Report{}, err
		}
	}
	if _, err := h.leader(ctx); err != nil {
		return Report{}, err
	}
	rep := Report{Transfers: cfg.Transfers, Protocol: cfg.Protocol}
	if cfg.Protocol == "3pc" {
		rep.Termination = cfg.Termination
	}
	if err := h.runScript(ctx, &rep); err != nil {
		return rep, err
	}
	if cfg.Transfers > 0 {
		if err := h.load(ctx, &rep); err != nil {
			return rep, err
		}
		h.logf("%d random transfers answered (%s); waiting for every transaction to finish", cfg.Transfers, counts(rep.Answers))
	}
	if cfg.Partitions > 0 {
		if err := h.partitions(ctx, &rep); err != nil {
			return rep, err
		}
	}
	answered := time.Now()
	// A run that does not settle is still checked: the report says what is broken.
	settleErr := h.settle(ctx)
	rep.Settle, rep.Settled = time.Since(answered), settleErr == nil
	if err := h.check(context.WithoutCancel(ctx), &rep); err != nil {
		return rep, errors.Join(settleErr, err)
	}
	h.readAgents(context.WithoutCancel(ctx), &rep)
	rep.Elapsed = time.Since(start)
	return rep, settleErr
}

const accountsN = 100

func account(i int) string { return fmt.Sprintf("acct-%03d", i) }

func seed(m map[string]int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, ",")
}

// startBank starts a bank instance in slot; each start gets an id of its own, so the election
// tells a restarted instance from the one it replaces.
func (h *harness) startBank(ctx context.Context, slot int) error {
	h.mu.Lock()
	h.starts++
	id := fmt.Sprintf("bank-%d.%d", slot, h.starts)
	h.mu.Unlock()
	st := h.cfg.SessionTimeout
	if st <= 0 {
		st = 4 * time.Second
	}
	args := []string{"-pg", h.cfg.PG, "-schema", h.schema, "-zk", h.cfg.ZK, "-id", id, "-session-timeout", st.String(),
		"-seed-east", seed(h.east), "-seed-west", seed(h.west), "-protocol", h.cfg.Protocol}
	if h.proxy != nil {
		args = append(args, "-west-addr", h.proxy.Addr())
	}
	if h.cfg.Protocol == "3pc" {
		args = append(args, "-participant-timeout", h.cfg.ParticipantTimeout.String())
	}
	if h.cfg.Protocol == "2pc" {
		args = append(args, "-votes="+strconv.FormatBool(h.cfg.Votes)) // the banks' default is true
	}
	if h.cfg.Drill && h.cfg.PauseRate > 0 {
		at := h.cfg.PauseAt
		if h.cfg.Protocol == "3pc" && at == "prepared" {
			at = "precommitted"
		}
		args = append(args, "-pause-rate", strconv.FormatFloat(h.cfg.PauseRate, 'g', -1, 64), "-pause", h.cfg.Pause.String(), "-pause-at", at)
	}
	p, err := h.start(ctx, "bank", id, args)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.banks[id] = p
	h.mu.Unlock()
	return nil
}

// startAgent starts the 3pc agent beside database db (east or west): it connects to the
// database directly, never through the west proxy — a partition cuts the coordinators off, not
// the agents from their own database or from the log.
func (h *harness) startAgent(ctx context.Context, db string) error {
	id := "agent-" + db
	p, err := h.start(ctx, "agent", id, []string{"-pg", h.cfg.PG, "-schema", h.schema, "-db", db,
		"-termination", h.cfg.Termination, "-timeout", h.cfg.ParticipantTimeout.String(), "-poll", "200ms"})
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.agents[db] = p
	h.mu.Unlock()
	return nil
}

// readAgents puts the agents' /stats in rep.
func (h *harness) readAgents(ctx context.Context, rep *Report) {
	h.mu.Lock()
	agents := maps.Clone(h.agents)
	h.mu.Unlock()
	for db, p := range agents {
		var st map[string]any
		if err := drillkit.GetJSON(ctx, h.client, "http://"+p.addr+"/stats", &st); err != nil {
			h.logf("agent %s: %v", db, err)
			continue
		}
		if rep.Agents == nil {
			rep.Agents = map[string]any{}
		}
		rep.Agents[db] = st["agent"]
	}
}

// start runs the service binary as id and waits for its "LISTENING <addr>" line.
func (h *harness) start(ctx context.Context, service, id string, args []string) (*proc, error) {
	logPath := filepath.Join(h.cfg.Dir, h.runID+"-"+id+".log")
	hp, err := drillkit.Start(ctx, id, filepath.Join(h.cfg.Dir, service), args, logPath)
	if err != nil {
		return nil, err
	}
	h.logf("%s listening on %s (pid %d, log %s)", id, hp.Addr, hp.Cmd.Process.Pid, logPath)
	return &proc{id: id, cmd: hp.Cmd, addr: hp.Addr, done: hp.Done}, nil
}

func (h *harness) stopAll() {
	h.mu.Lock()
	var hps []*drillkit.Proc
	for _, p := range h.banks {
		hps = append(hps, p.hp())
	}
	var agents []*drillkit.Proc
	for _, p := range h.agents {
		agents = append(agents, p.hp())
	}
	h.mu.Unlock()
	drillkit.Stop(hps...)
	drillkit.Stop(agents...)
}

// address returns p's address, for drillkit.Leader.
func (p *proc) address() string { return p.addr }

// hp is p as drillkit knows it.
func (p *proc) hp() *drillkit.Proc { return &drillkit.Proc{Cmd: p.cmd, Addr: p.addr, Done: p.done} }

// cleanup rolls back the run's prepared transactions, if a failed run left any (they would hold
// their locks and block the drop), and drops the run's schemas.
func (h *harness) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, db := range []string{app.East, app.West} {
		c, err := exapp.Connect(ctx, h.cfg.PG, db, "")
		if err != nil {
			h.logf("cleanup: %v", err)
			continue
		}
		ids, _ := h.prepared(ctx, c, db)
		for _, id := range ids {
			_, _ = c.Exec(ctx, "rollback prepared '"+strings.ReplaceAll(id, "'", "''")+"'")
		}
		_ = c.Close(ctx)
	}
	if err := drillkit.DropSchema(ctx, h.cfg.PG, h.schema, app.East, app.West); err != nil {
		h.logf("cleanup: %v", err)
	}
}

// leader waits until a live bank instance leads the recovery election (after a kill, the dead
// leader's node stays until its ZooKeeper session expires) and returns its id.
func (h *harness) leader(ctx context.Context) (string, error) {
	return drillkit.Leader(ctx, "bank instance leads the recovery election", &h.mu, h.banks, (*proc).address, drillkit.StatsLeader(h.client, ""))
}

// post sends t to instance p (a random live one when p is nil) and returns the answer's HTTP code
// and body; code 0 when there was no answer (the instance died under it).
func (h *harness) post(ctx context.Context, t app.Transfer) (int, app.Answer) {
	h.mu.Lock()
	ids := slices.Sorted(maps.Keys(h.banks))
	var p *proc
	if len(ids) > 0 {
		p = h.banks[ids[rand.IntN(len(ids))]]
	}
	h.mu.Unlock()
	if p == nil {
		return 0, app.Answer{}
	}
	if t.GID == "" {
		id, _ := uuid.NewV7()
		t.GID = id.String()
	}
	h.sent.Store(t.GID, sent{t: t, instance: p.id})
	body, _ := json.Marshal(t)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.addr+"/transfers", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, app.Answer{GID: t.GID}
	}
	defer resp.Body.Close()
	var a app.Answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || a.GID != t.GID {
		return 0, app.Answer{GID: t.GID}
	}
	h.answers.Store(t.GID, a.Status)
	if a.Error != "" {
		h.errs.Store(t.GID, a.Error)
	}
	return resp.StatusCode, a
}

// runScript makes the script's transfers one after the other and reads the script's balances
// before and after.
func (h *harness) runScript(ctx context.Context, rep *Report) error {
	var err error
	if rep.Before, err = h.scriptBalances(ctx); err != nil {
		return err
	}
	for _, s := range script {
		code, a := h.post(ctx, app.Transfer{From: s.From, To: s.To, Amount: s.Amount})
		s.Code, s.Got, s.GID, s.Error = code, a.Status, a.GID, a.Error
		if s.Code == 0 {
			s.Got = "unanswered"
		}
		h.logf("transfer %s (east) → %s (west) %d: %d %s", s.From, s.To, s.Amount, s.Code, strings.TrimSpace(s.Got+" "+s.Error))
		rep.Script = append(rep.Script, s)
	}
	rep.After, err = h.scriptBalances(ctx)
	return err
}

func (h *harness) scriptBalances(ctx context.Context) (map[string]map[string]int64, error) {
	out := map[string]map[string]int64{}
	for name, db := range map[string]string{"east": app.East, "west": app.West} {
		c, err := exapp.Connect(ctx, h.cfg.PG, db, h.schema)
		if err != nil {
			return nil, err
		}
		all, err := accounts(ctx, c)
		_ = c.Close(ctx)
		if err != nil {
			return nil, err
		}
		out[name] = map[string]int64{}
		for k := range scriptEast {
			out[name][k] = all[k]
		}
	}
	return out, nil
}

// transfer returns the i-th random transfer: mostly ordinary ones, one in ten asking more than
// any account holds (refused), one in fifty to an account west does not have (rejected after the
// debit was enlisted: Abort rolls it back).
func transfer(i int) app.Transfer {
	t := app.Transfer{From: account(1 + rand.IntN(accountsN)), To: account(1 + rand.IntN(accountsN)), Amount: 1 + rand.Int64N(100)}
	switch {
	case i%10 == 3:
		t.Amount = 1_000_000_000
	case i%50 == 25:
		t.To = "nobody"
	}
	return t
}

// load makes cfg.Transfers random transfers: Concurrency workers post to random live instances
// (with the drill running beside them). A transfer whose instance dies under it is left to the
// leader.
func (h *harness) load(ctx context.Context, rep *Report) error {
	var amu sync.Mutex
	rep.Answers = map[string]int{}
	var beside []func(context.Context, <-chan struct{}) error
	if h.cfg.Drill && h.cfg.Kills > 0 {
		beside = append(beside, func(ctx context.Context, loadDone <-chan struct{}) error { return h.drill(ctx, loadDone, rep) })
	}
	if h.cfg.PGFailovers > 0 {
		beside = append(beside, func(ctx context.Context, loadDone <-chan struct{}) error {
			var err error
			rep.PGFailovers, err = drillkit.PGFailover{Failovers: h.cfg.PGFailovers, CutLast: h.cfg.PGCut, Async: h.cfg.PGAsync, Every: h.cfg.KillEvery, URL: h.cfg.PG, Log: h.logf}.Run(ctx, loadDone)
			return err
		})
	}
	return drillkit.Load(ctx, h.cfg.Transfers, h.cfg.Concurrency, h.cfg.Rate, func(ctx context.Context, i int) error {
		code, a := h.post(ctx, transfer(i))
		st := a.Status
		if code == 0 {
			st = "unanswered"
		}
		amu.Lock()
		rep.Answers[st]++
		amu.Unlock()
		return nil
	}, beside...)
}

// preparedPrefix starts the names of this run's prepared transactions: twopc and threepc name
// them "txkit:<schema>.<table prefix>:<length of gid>:<gid>:<database>", the table prefix being
// txkit_2pc_ or txkit_3pc_.
func (h *harness) preparedPrefix() string { return "txkit:" + h.schema + "." + h.tablePrefix() + ":" }

// tablePrefix is the coordinators' table prefix, txkit_2pc_ or txkit_3pc_.
func (h *harness) tablePrefix() string { return "txkit_" + h.cfg.Protocol + "_" }

// prepared lists this run's prepared transactions in database db.
func (h *harness) prepared(ctx context.Context, c *pgx.Conn, db string) ([]string, error) {
	rows, err := c.Query(ctx, `select gid from pg_prepared_xacts where database = $1 and starts_with(gid, $2)`, db, h.preparedPrefix())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// preparedGIDs returns the global transactions that have a prepared transaction in either
// database now.
func (h *harness) preparedGIDs(ctx context.Context, c *pgx.Conn) (map[string]bool, error) {
	out := map[string]bool{}
	for _, db := range []string{app.East, app.West} {
		ids, err := h.prepared(ctx, c, db)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			n, rest, _ := strings.Cut(strings.TrimPrefix(id, h.preparedPrefix()), ":")
			if l, err := strconv.Atoi(n); err == nil && l <= len(rest) {
				out[rest[:l]] = true
			}
		}
	}
	return out, nil
}

// startedOn returns those of gids that were sent to instance id.
func (h *harness) startedOn(gids map[string]bool, id string) []string {
	var out []string
	for g := range gids {
		if s, ok := h.sent.Load(g); ok && s.(sent).instance == id {
			out = append(out, g)
		}
	}
	return out
}

// fence reads the recovery's fencing token and when it was last written: every claim of the
// leader passes the fence, so a new token there is the new leader's first recovery action.
func fence(ctx context.Context, c *pgx.Conn) (tok string, at time.Time, err error) {
	err = c.QueryRow(ctx, `select epoch || '.' || seq, updated_at from txkit_fence order by updated_at desc limit 1`).Scan(&tok, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", time.Time{}, nil
	}
	return tok, at, err
}

// aimWindow bounds the wait of a kill for the leader to hold a transfer between the phases.
const aimWindow = 5 * time.Second

// aimHeld is how long a kill's aim waits to see a transfer stay prepared before it fires.
const aimHeld = 50 * time.Millisecond

// drill SIGKILLs the leading bank instance up to Kills times while the load runs, and starts it
// again in its slot. Before each kill it waits (up to aimWindow) until the leader has a transfer
// between the phases — prepared in a database, so the pause hook is holding it — so the kill
// strands it in doubt. After the kill it measures the time to the next leader's first recovery
// (a claim under a new fencing token) and to the end of every prepared transaction the dead
// leader left.
func (h *harness) drill(ctx context.Context, loadDone <-chan struct{}, rep *Report) error {
	c, err := exapp.Connect(ctx, h.cfg.PG, app.East, h.schema)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	for k := 0; k < h.cfg.Kills; k++ {
		select {
		case <-loadDone:
			return nil
		case <-ctx.Done():
			return nil
		case <-time.After(h.cfg.KillEvery):
		}
		id, err := h.leader(ctx)
		if err != nil {
			return err
		}
		old, _, err := fence(ctx, c)
		if err != nil {
			return err
		}
		// A transfer prepared for aimHeld is one the pause hook holds (an ordinary commit ends its
		// prepared transactions within milliseconds): kill then, so that it is stranded.
		firstSeen := map[string]time.Time{}
	aim:
		for aim := time.Now().Add(aimWindow); time.Now().Before(aim); {
			gids, err := h.preparedGIDs(ctx, c)
			if err != nil {
				return err
			}
			for _, g := range h.startedOn(gids, id) {
				if _, ok := firstSeen[g]; !ok {
					firstSeen[g] = time.Now()
				}
				if time.Since(firstSeen[g]) >= aimHeld {
					break aim
				}
			}
			if err := exapp.Pause(ctx, 10*time.Millisecond); err != nil {
				return nil
			}
		}
		h.mu.Lock()
		p := h.banks[id]
		delete(h.banks, id)
		h.mu.Unlock()
		killed := time.Now()
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		rep.LeaderKills++
		gids, err := h.preparedGIDs(ctx, c)
		if err != nil {
			return err
		}
		doubt := h.startedOn(gids, id)
		rep.InDoubt = append(rep.InDoubt, len(doubt))
		rep.doubted = append(rep.doubted, doubt...)
		for _, g := range doubt {
			h.expected.Store(g, true)
		}
		h.logf("drill: SIGKILLed the leader %s (fencing token %s); it left %d transfers prepared in doubt", id, old, len(doubt))
		var slot int
		if _, err := fmt.Sscanf(id, "bank-%d.", &slot); err != nil {
			return fmt.Errorf("instance id %q: %w", id, err)
		}
		// Restarted beside the polling: the fence's updated_at is rewritten by every claim, so only
		// a poll that starts at once sees the first one.
		restarted := make(chan error, 1)
		go func() { restarted <- h.startBank(ctx, slot) }()
		err = h.watchRecovery(ctx, c, id, old, killed, doubt, rep)
		if err := errors.Join(err, <-restarted); err != nil {
			return err
		}
	}
	return nil
}

// watchRecovery polls, after the kill of leader id at killed, for the next leader's first claim
// (a fencing token other than old) and for the end of the prepared transactions of doubt, and
// records the time from the kill to each.
func (h *harness) watchRecovery(ctx context.Context, c *pgx.Conn, id, old string, killed time.Time, doubt []string, rep *Report) error {
	deadline := time.Now().Add(60 * time.Second)
	failedOver := false
	for len(doubt) > 0 || !failedOver {
		if !failedOver {
			tok, at, err := fence(ctx, c)
			if err != nil {
				return err
			}
			if tok != old && tok != "" {
				failedOver = true
				d := at.Sub(killed)
				rep.Failovers = append(rep.Failovers, d)
				h.logf("drill: a new leader's first recovery (token %s) came %v after the kill", tok, d.Round(time.Millisecond))
			}
		}
		if len(doubt) > 0 {
			now, err := h.preparedGIDs(ctx, c)
			if err != nil {
				return err
			}
			doubt = slices.DeleteFunc(doubt, func(g string) bool {
				if now[g] {
					return false
				}
				rep.Blocking = append(rep.Blocking, time.Since(killed))
				return true
			})
			if len(doubt) == 0 {
				d := time.Since(killed)
				rep.Resolved = append(rep.Resolved, d)
				h.logf("drill: every prepared transaction the dead leader left has ended, %v after the kill", d.Round(time.Millisecond))
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("60s after killing %s: failed over %v, %d transfers still prepared", id, failedOver, len(doubt))
		}
		if err := exapp.Pause(ctx, 20*time.Millisecond); err != nil {
			return nil
		}
	}
	return nil
}

// settle waits until every global transaction is committed or aborted and no prepared
// transaction of the run is left in either database.
func (h *harness) settle(ctx context.Context) error {
	c, err := exapp.Connect(ctx, h.cfg.PG, app.East, h.schema)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	wait := h.cfg.SettleTimeout
	if wait <= 0 {
		wait = 3 * time.Minute
	}
	deadline := time.Now().Add(wait)
	last := time.Now()
	for {
		var open int
		if err := c.QueryRow(ctx, `select count(*) from `+h.tablePrefix()+`global where status not in ('confirmed', 'cancelled')`).Scan(&open); err != nil {
			return err
		}
		gids, err := h.preparedGIDs(ctx, c)
		if err != nil {
			return err
		}
		if open == 0 && len(gids) == 0 {
			return nil
		}
		if time.Since(last) > 5*time.Second {
			h.logf("waiting: %d global transactions not finished, %d with prepared transactions", open, len(gids))
			last = time.Now()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v, %d global transactions are not finished and %d have prepared transactions", wait, open, len(gids))
		}
		if err := exapp.Pause(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}
