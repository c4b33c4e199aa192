package main

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/txkit/txkit/drills/internal/drillkit"
	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/tcc-order/app"
	"github.com/txkit/txkit/examples/tcc-order/shoppb"
)

// Config is one run of the example.
type Config struct {
	Mode        app.Mode // how orders are placed: TCC global transactions or sagas (default TCC)
	Orders      int      // orders to place
	Instances   int      // order-service instances (coordinators; only the elected one recovers)
	Concurrency int      // orders in flight at once
	Rate        int      // orders started per second at most (0: as fast as they go)
	Drill       bool     // inject faults in stock and account, and SIGKILL the mode's leading order instance during the load
	Kills       int      // leader kills of a drill
	// ParticipantKills is how many times a drill SIGKILLs a participant (stock, then account,
	// alternately) and restarts it on the same address, spread over the load.
	ParticipantKills int
	KillEvery        time.Duration // at least this long between two kills (each also waits for the next leader's first recovery)
	PG, ZK           string        // base PostgreSQL URL, ZooKeeper servers
	// Lock is the lock backend of the order instances' recovery elections: zk (default), pg,
	// redis or redlock (see exapp.OpenLocks; the other backends' servers come from TXKIT_*).
	Lock string
	// SessionTimeout is the order instances' ZooKeeper session timeout or lease TTL (order
	// -session-timeout; 0: the service's default, 4s).
	SessionTimeout time.Duration
	Dir            string    // where binaries and logs go
	Log            io.Writer // progress lines
	Keep           bool      // keep the run's schemas afterwards
	// SettleTimeout bounds the wait for every transaction to finish after the load (default 3m).
	SettleTimeout time.Duration
	// NoBarrier runs stock and account without the participant barrier, to show that the checks
	// catch what the barrier prevents (duplicates applied twice, cancels without a try).
	NoBarrier bool
	// Transport is how the order instances call stock and account, and how the harness places
	// orders: HTTP (default) or gRPC (the shoppb services, behind the barrier's interceptor).
	Transport app.Transport
	// Built says that Dir already holds the services' binaries of this tree (an earlier run's):
	// the run does not build them again.
	Built bool
	// PGFailovers, with PG the HA PostgreSQL's URL (TXKIT_PG_HA_URL), SIGKILLs its primary this
	// many times during the load (deploy/local/pg-ha kill-primary; see drillkit.PGFailover).
	PGFailovers int
	PGCut       bool // the last of PGFailovers is a network cut of the primary (frozen, then thawed), not a kill
	PGAsync     bool // PGFailovers with asynchronous replication (Patroni synchronous_mode off)
}

// Databases of the three services; each holds a schema per run.
const (
	dbOrder   = "txkit_order"
	dbStock   = "txkit_stock"
	dbAccount = "txkit_account"
)

// Report is what a run measured and the invariants it checked.
type Report struct {
	Mode                       app.Mode
	Transport                  app.Transport  // how the order instances called stock and account
	Lock                       string         // the lock backend of the recovery elections
	Orders                     int            // POST /orders made
	AnsweredDone               int            // answered 200 confirmed (succeeded)
	AnsweredUndone             int            // answered 409 cancelled (compensated): refused, failed or timed out
	Unanswered                 int            // connection lost (starter killed) or 500: outcome left to the leader
	Globals                    map[string]int // the coordinator log's statuses (of transactions or sagas)
	OrderRows                  map[string]int // the order rows' statuses
	Unsubmitted                int            // saga: order rows whose starter was killed before submitting the saga
	Violations                 []string       // broken invariants; empty when all hold
	Checks                     []string       // invariants checked, with their numbers
	StockFaults, AccountFaults map[string]int64
	LeaderKills                int
	ParticipantKills           int
	Failovers                  []time.Duration // leader SIGKILL → the next leader's first recovery (fenced claim)
	PGFailovers                []drillkit.FailoverFigures
	Settled                    bool          // every global transaction finished within the settle timeout
	Settle                     time.Duration // last answer → every global transaction finished
	Elapsed                    time.Duration
	InitialStock, InitialMoney int64
	Available, Reserved, Sold  int64
	Balance, Frozen, Spent     int64
	DoneQty, DoneAmount        int64 // what the orders that went through took
	LedgerStock, LedgerAccount int
	LedgerOrder                int
	// Undone counts, per service, the branches applied and then undone (a try cancelled, an
	// action compensated): in a saga, the stock deducted before the account refused.
	Undone map[string]int
}

// OK returns the broken invariants as one error, an error when nothing ran, or nil.
func (r Report) OK() error {
	var nothing error
	if r.Orders == 0 {
		nothing = errors.New("no order placed")
	}
	return drillkit.Verdict(r.Violations, nothing)
}

// lockKind returns the lock backend of the run, zk when Lock is empty.
func (c Config) lockKind() string {
	if c.Lock == "" {
		return "zk"
	}
	return c.Lock
}

// MaxFailover returns the longest measured failover.
func (r Report) MaxFailover() time.Duration { return drillkit.Longest(r.Failovers) }

func (r Report) String() string {
	p := protocolOf(r.Mode)
	var b strings.Builder
	fmt.Fprintf(&b, "orders placed:          %d (answered: %d %s, %d %s, %d unanswered)\n",
		r.Orders, r.AnsweredDone, p.done, r.AnsweredUndone, p.undone, r.Unanswered)
	if r.Transport == app.TransportGRPC {
		fmt.Fprintf(&b, "transport:              gRPC (orders placed through shop.v1.Orders, stock and account called through their methods)\n")
	}
	fmt.Fprintf(&b, "%-24s%s\n", p.units+":", counts(r.Globals))
	fmt.Fprintf(&b, "order rows:             %s\n", counts(r.OrderRows))
	fmt.Fprintf(&b, "stock:                  initial %d = available %d + reserved %d + sold %d (%s orders' qty %d)\n",
		r.InitialStock, r.Available, r.Reserved, r.Sold, p.done, r.DoneQty)
	fmt.Fprintf(&b, "money:                  initial %d = balance %d + frozen %d + spent %d (%s orders' amount %d)\n",
		r.InitialMoney, r.Balance, r.Frozen, r.Spent, p.done, r.DoneAmount)
	order := "" // the order service is a participant in TCC only
	if r.Mode == app.ModeTCC {
		order = fmt.Sprintf(", order %d", r.LedgerOrder)
	}
	fmt.Fprintf(&b, "ledger rows:            stock %d, account %d%s (each (gid, op) at most once)\n", r.LedgerStock, r.LedgerAccount, order)
	if r.Undone != nil {
		fmt.Fprintf(&b, "undone:                 stock %d, account %d (branches applied, then rolled back with their %s %s)\n",
			r.Undone["stock"], r.Undone["account"], p.undone, p.unit)
	}
	if r.StockFaults != nil {
		failed := "500" // what a failure is answered
		if r.Transport == app.TransportGRPC {
			failed = "UNAVAILABLE"
		}
		fmt.Fprintf(&b, "faults injected:        stock %s; account %s\n", faults(r.StockFaults, failed), faults(r.AccountFaults, failed))
	}
	if r.ParticipantKills > 0 {
		fmt.Fprintf(&b, "participant kills:      %d SIGKILLed (stock and account in turn) and restarted on their address\n", r.ParticipantKills)
	}
	if r.LeaderKills > 0 {
		ds := make([]string, len(r.Failovers))
		for i, d := range r.Failovers {
			ds[i] = d.Round(time.Millisecond).String()
		}
		fmt.Fprintf(&b, "leader kills:           %d SIGKILLed and restarted (leadership on %s); leader death → next leader's first recovery: %s (max %v)\n",
			r.LeaderKills, r.Lock, strings.Join(ds, ", "), r.MaxFailover().Round(time.Millisecond))
	}
	for i, f := range r.PGFailovers {
		fmt.Fprintf(&b, "PostgreSQL failover %d:  %s\n", i+1, f)
	}
	if r.Settled {
		fmt.Fprintf(&b, "settled:                every %s finished %v after the last answer\n", p.unit, r.Settle.Round(time.Millisecond))
	} else {
		fmt.Fprintf(&b, "NOT settled:            %s still unfinished %v after the last answer\n", p.units, r.Settle.Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "elapsed:                %v\n", r.Elapsed.Round(10*time.Millisecond))
	drillkit.WriteChecks(&b, r.Checks, r.Violations)
	return b.String()
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

func faults(m map[string]int64, failed string) string {
	return fmt.Sprintf("%d refused, %d failed (%s), %d replies lost, %d slowed", m["refused"], m["failed"], failed, m["lost"], m["slowed"])
}

// proc is a running service process.
type proc struct {
	name string
	cmd  *exec.Cmd
	addr string
	done chan struct{}
	// With -transport grpc: the address of its gRPC server (from GET /healthz), and for an
	// order instance the connection the harness places orders on.
	grpcAddr string
	conn     *grpc.ClientConn
}

type harness struct {
	cfg     Config
	proto   protocol
	runID   string
	schema  string
	skus    map[string]int64
	accts   map[string]int64
	mu      sync.Mutex
	orders  map[string]*proc // live order instances by id, "order-<slot>.<start>"
	starts  int
	stock   *proc // under mu: replaced when the drill restarts it
	account *proc
	args    map[string][]string // how each participant was started
	faults  map[string]int64    // faults counted by participant processes since killed, by "<service>.<kind>"
	client  *http.Client
	answers sync.Map // gid → the outcome answered: confirmed or cancelled (succeeded or compensated)
	// restartWithin is how long a service started again (after the drill's kill) may take to stay
	// up (drillkit.Restart): 0 for the first starts, 90 s once the load begins.
	restartWithin time.Duration
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.cfg.Log, "[%s] %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// Run builds and starts the services, places cfg.Orders orders through the order instances (with
// the drill's faults if asked), waits until every global transaction has finished, and checks the
// invariants. The error reports a run that could not complete; broken invariants are in
// [Report.Violations] (see [Report.OK]).
func Run(ctx context.Context, cfg Config) (Report, error) {
	start := time.Now()
	if cfg.Instances < 1 || cfg.Orders < 1 || cfg.Concurrency < 1 {
		return Report{}, errors.New("need at least one order, one instance and a concurrency of one")
	}
	if cfg.Mode == 0 {
		cfg.Mode = app.ModeTCC
	}
	if cfg.Transport == "" {
		cfg.Transport = app.TransportHTTP
	}
	runID := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	h := &harness{cfg: cfg, proto: protocolOf(cfg.Mode), runID: runID, schema: "tcco_" + runID, orders: map[string]*proc{}, faults: map[string]int64{},
		client: &http.Client{Timeout: 30 * time.Second}}
	// Four SKUs with stock for about two thirds of the demand, eight accounts with funds for about
	// two thirds of it: late orders are refused by one or the other.
	per := max(int64(cfg.Orders)/2, 10)
	h.skus = map[string]int64{"sku-1": per, "sku-2": per, "sku-3": per, "sku-4": per}
	h.accts = map[string]int64{}
	for i := 1; i <= 8; i++ {
		h.accts[fmt.Sprintf("acct-%d", i)] = per * 5
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return Report{}, err
	}
	if err := shareSecret(); err != nil {
		return Report{}, err
	}
	if !cfg.Built {
		if err := h.build(ctx); err != nil {
			return Report{}, err
		}
	}
	over := "" // HTTP, the default, goes unsaid
	if cfg.Transport == app.TransportGRPC {
		over = " over gRPC"
	}
	h.logf("run %s: schema %s in %s, %s and %s; %d orders as %s%s, %d order instances, drill %v",
		runID, h.schema, dbOrder, dbStock, dbAccount, cfg.Orders, h.proto.units, over, cfg.Instances, cfg.Drill)
	if !cfg.Keep {
		defer h.cleanup()
	}
	defer h.stopAll()
	if err := h.startParticipants(ctx); err != nil {
		return Report{}, err
	}
	for i := 1; i <= cfg.Instances; i++ {
		if err := h.startOrder(ctx, i); err != nil {
			return Report{}, err
		}
	}
	lead, err := h.leader(ctx)
	if err != nil {
		return Report{}, err
	}
	h.restartWithin = 90 * time.Second // the drill's restarts may meet a PostgreSQL failover (make drill-ha -pg-ha)
	h.logf("%s leads; placing the orders", lead)
	rep := Report{Mode: cfg.Mode, Transport: cfg.Transport, Lock: cfg.lockKind(), Orders: cfg.Orders}
	if err := h.load(ctx, &rep); err != nil {
		return rep, err
	}
	answered := time.Now()
	h.logf("%d orders answered (%d %s, %d %s, %d unanswered); waiting for every %s to finish",
		cfg.Orders, rep.AnsweredDone, h.proto.done, rep.AnsweredUndone, h.proto.undone, rep.Unanswered, h.proto.unit)
	// A run that does not settle is still checked: the report says what is broken.
	settleErr := h.settle(ctx)
	rep.Settle, rep.Settled = time.Since(answered), settleErr == nil
	if err := h.check(context.WithoutCancel(ctx), &rep); err != nil {
		return rep, errors.Join(settleErr, err)
	}
	rep.Elapsed = time.Since(start)
	return rep, settleErr
}

// shareSecret makes sure the services started from here share an HMAC key: the order service
// signs its participant calls with it, stock and account refuse calls not signed with it. The key
// goes to them through the environment they inherit (app.EnvSecret), never on a command line;
// one already set is kept, otherwise a random one is generated for this process's runs.
func shareSecret() error {
	if os.Getenv(app.EnvSecret) != "" {
		_, err := app.Secret()
		return err
	}
	return os.Setenv(app.EnvSecret, crand.Text())
}

// build compiles the three services into the run's directory.
func (h *harness) build(ctx context.Context) error {
	return drillkit.Build(ctx, h.cfg.Dir, "tcc-order", "order", "stock", "account")
}

func seed(m map[string]int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, ",")
}

func (h *harness) startParticipants(ctx context.Context) error {
	var fault []string
	if h.cfg.Drill {
		// Refusals, 500s, lost replies (the effect committed, the retry is a duplicate), short
		// delays, and a few calls slower than the coordinator's call timeout (unknown outcome,
		// so a cancel can race its own try).
		fault = []string{"-refuse-rate", "0.03", "-fail-rate", "0.05", "-lost-rate", "0.05", "-delay", "20ms",
			"-slow-rate", "0.005", "-slow", "2500ms"}
	}
	if h.cfg.NoBarrier {
		fault = append(fault, "-no-barrier")
	}
	common := []string{"-pg", h.cfg.PG, "-schema", h.schema, "-transport", h.cfg.Transport.String()}
	h.args = map[string][]string{
		"stock":   append(append(slices.Clone(common), "-db", dbStock, "-seed", seed(h.skus)), fault...),
		"account": append(append(slices.Clone(common), "-db", dbAccount, "-seed", seed(h.accts)), fault...),
	}
	stock, err := h.start(ctx, "stock", h.args["stock"])
	if err != nil {
		return err
	}
	account, err := h.start(ctx, "account", h.args["account"])
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.stock, h.account = stock, account
	h.mu.Unlock()
	return nil
}

// participant returns the running stock or account process.
func (h *harness) participant(name string) *proc {
	h.mu.Lock()
	defer h.mu.Unlock()
	if name == "stock" {
		return h.stock
	}
	return h.account
}

// crashParticipants SIGKILLs stock and account in turn, cfg.ParticipantKills times spread over
// the load, and restarts each on its address (the coordinator log holds the participants' URLs).
func (h *harness) crashParticipants(ctx context.Context, done func() int, rep *Report) error {
	n := h.cfg.ParticipantKills
	for k := range n {
		at := h.cfg.Orders * (k + 1) / (n + 1)
		for done() < at {
			if err := exapp.Pause(ctx, 10*time.Millisecond); err != nil {
				return nil
			}
		}
		name := []string{"stock", "account"}[k%2]
		p := h.participant(name)
		var st struct{ Faults map[string]int64 }
		if err := h.getJSON(ctx, "http://"+p.addr+"/stats", &st); err == nil {
			h.mu.Lock()
			for kind, v := range st.Faults {
				h.faults[name+"."+kind] += v
			}
			h.mu.Unlock()
		}
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		rep.ParticipantKills++
		where := p.addr
		if p.grpcAddr != "" {
			where += ", gRPC " + p.grpcAddr
		}
		h.logf("drill: SIGKILLed %s at %d orders answered; restarting it on %s", name, done(), where)
		args := append(slices.Clone(h.args[name]), "-listen", p.addr)
		if p.grpcAddr != "" {
			args = append(args, "-grpc-listen", p.grpcAddr)
		}
		np, err := h.start(ctx, name, args)
		if err != nil {
			return err
		}
		h.mu.Lock()
		if name == "stock" {
			h.stock = np
		} else {
			h.account = np
		}
		h.mu.Unlock()
	}
	return nil
}

// startOrder starts an order instance in slot; each start gets an id of its own, so the election
// tells a restarted instance from the one it replaces.
func (h *harness) startOrder(ctx context.Context, slot int) error {
	h.mu.Lock()
	h.starts++
	id := fmt.Sprintf("order-%d.%d", slot, h.starts)
	h.mu.Unlock()
	stock, account := "http://"+h.participant("stock").addr, "http://"+h.participant("account").addr
	if h.cfg.Transport == app.TransportGRPC {
		stock, account = h.participant("stock").grpcAddr, h.participant("account").grpcAddr
	}
	args := []string{"-pg", h.cfg.PG, "-db", dbOrder, "-schema", h.schema, "-zk", h.cfg.ZK, "-lock", h.cfg.lockKind(), "-id", id, "-mode", h.cfg.Mode.String(),
		"-transport", h.cfg.Transport.String(), "-stock", stock, "-account", account}
	if h.cfg.SessionTimeout > 0 {
		args = append(args, "-session-timeout", h.cfg.SessionTimeout.String())
	}
	p, err := h.startAs(ctx, id, "order", args)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.orders[id] = p
	h.mu.Unlock()
	return nil
}

func (h *harness) start(ctx context.Context, name string, args []string) (*proc, error) {
	return h.startAs(ctx, name, name, args)
}

// startAs runs binary bin as name, and waits for its "LISTENING <addr>" line; with -transport
// grpc, it reads the address of the service's gRPC server from GET /healthz too.
func (h *harness) startAs(ctx context.Context, name, bin string, args []string) (*proc, error) {
	logPath := filepath.Join(h.cfg.Dir, h.runID+"-"+name+".log")
	hp, err := drillkit.Restart(ctx, h.restartWithin, name, filepath.Join(h.cfg.Dir, bin), args, logPath)
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, cmd: hp.Cmd, addr: hp.Addr, done: hp.Done}
	if h.cfg.Transport != app.TransportGRPC {
		h.logf("%s listening on %s (pid %d, log %s)", name, hp.Addr, hp.Cmd.Process.Pid, logPath)
		return p, nil
	}
	var health struct{ GRPC string }
	if err := h.getJSON(ctx, "http://"+hp.Addr+"/healthz", &health); err != nil || health.GRPC == "" {
		drillkit.Stop(hp)
		return nil, fmt.Errorf("%s: no gRPC address in GET /healthz (err %v); see %s", name, err, logPath)
	}
	p.grpcAddr = health.GRPC
	h.logf("%s listening on %s, gRPC on %s (pid %d, log %s)", name, hp.Addr, p.grpcAddr, hp.Cmd.Process.Pid, logPath)
	return p, nil
}

func (h *harness) stopAll() {
	h.mu.Lock()
	procs := []*proc{h.stock, h.account}
	for _, p := range h.orders {
		procs = append(procs, p)
	}
	h.mu.Unlock()
	var hps []*drillkit.Proc
	for _, p := range procs {
		if p != nil {
			hps = append(hps, p.hp())
		}
	}
	drillkit.Stop(hps...)
	for _, p := range procs {
		if p != nil && p.conn != nil {
			_ = p.conn.Close()
		}
	}
}

// address returns p's address, for drillkit.Leader.
func (p *proc) address() string { return p.addr }

// hp is p as drillkit knows it.
func (p *proc) hp() *drillkit.Proc { return &drillkit.Proc{Cmd: p.cmd, Addr: p.addr, Done: p.done} }

// cleanup drops the run's schemas.
func (h *harness) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := drillkit.DropSchema(ctx, h.cfg.PG, h.schema, dbOrder, dbStock, dbAccount); err != nil {
		h.logf("cleanup: %v", err)
	}
}

func (h *harness) getJSON(ctx context.Context, url string, v any) error {
	return drillkit.GetJSON(ctx, h.client, url, v)
}

// leader waits until a live order instance leads the recovery election of the run's mode (after
// a kill, the dead leader's node stays until its ZooKeeper session expires) and returns its id.
func (h *harness) leader(ctx context.Context) (string, error) {
	mode := h.cfg.Mode.String()
	return drillkit.Leader(ctx, "order instance leads the "+mode+" recovery election", &h.mu, h.orders, (*proc).address,
		drillkit.StatsLeader(h.client, mode))
}

// order returns the i-th order of the load: mostly ordinary ones, one in ten asking more stock
// than exists, one in ten spending more than any account holds.
func (h *harness) order(i int) *shoppb.PlaceRequest {
	qty := int64(1 + rand.IntN(5))
	amount := qty * 10
	switch i % 10 {
	case 3:
		qty = 1_000_000
	case 7:
		amount = 1_000_000_000
	}
	return &shoppb.PlaceRequest{Sku: fmt.Sprintf("sku-%d", 1+i%4), Qty: qty, Account: fmt.Sprintf("acct-%d", 1+i%8), Amount: amount}
}

// placeGRPC places order i through p's Orders service and returns the answer's status ("" when
// unanswered or unknown).
func (h *harness) placeGRPC(ctx context.Context, p *proc, i int) string {
	h.mu.Lock()
	if p.conn == nil {
		conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			h.mu.Unlock()
			return ""
		}
		p.conn = conn
	}
	conn := p.conn
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := shoppb.NewOrdersClient(conn).Place(ctx, h.order(i))
	if err != nil || out.GetGid() == "" {
		return ""
	}
	if out.GetStatus() == h.proto.done || out.GetStatus() == h.proto.undone {
		h.answers.Store(out.GetGid(), out.GetStatus())
		return out.GetStatus()
	}
	return ""
}

// load places the orders: Concurrency workers post to the live order instances in turn (with the
// drill running beside them). An order whose instance dies under it is left to the leader.
func (h *harness) load(ctx context.Context, rep *Report) error {
	var conf, canc, lost atomic.Int64
	var beside []func(context.Context, <-chan struct{}) error
	if h.cfg.PGFailovers > 0 {
		beside = append(beside, func(ctx context.Context, loadDone <-chan struct{}) error {
			var err error
			rep.PGFailovers, err = drillkit.PGFailover{Failovers: h.cfg.PGFailovers, CutLast: h.cfg.PGCut, Async: h.cfg.PGAsync, Every: h.cfg.KillEvery, URL: h.cfg.PG, Log: h.logf}.Run(ctx, loadDone)
			return err
		})
	}
	if h.cfg.Drill {
		beside = append(beside, func(ctx context.Context, loadDone <-chan struct{}) error { return h.drill(ctx, loadDone, rep) })
		if h.cfg.ParticipantKills > 0 {
			done := func() int { return int(conf.Load() + canc.Load() + lost.Load()) }
			beside = append(beside, func(ctx context.Context, _ <-chan struct{}) error { return h.crashParticipants(ctx, done, rep) })
		}
	}
	err := drillkit.Load(ctx, h.cfg.Orders, h.cfg.Concurrency, h.cfg.Rate, func(ctx context.Context, i int) error {
		switch h.place(ctx, i) {
		case h.proto.done:
			conf.Add(1)
		case h.proto.undone:
			canc.Add(1)
		default:
			lost.Add(1)
		}
		return nil
	}, beside...)
	rep.AnsweredDone, rep.AnsweredUndone, rep.Unanswered = int(conf.Load()), int(canc.Load()), int(lost.Load())
	return err
}

// place posts order i to a live instance (over gRPC with -transport grpc) and returns the
// answer's status ("" when unanswered).
func (h *harness) place(ctx context.Context, i int) string {
	h.mu.Lock()
	ids := slices.Sorted(maps.Keys(h.orders))
	var p *proc
	if len(ids) > 0 {
		p = h.orders[ids[i%len(ids)]]
	}
	h.mu.Unlock()
	if p == nil {
		return ""
	}
	if h.cfg.Transport == app.TransportGRPC {
		return h.placeGRPC(ctx, p, i)
	}
	o := h.order(i)
	body, _ := json.Marshal(map[string]any{"sku": o.Sku, "qty": o.Qty, "account": o.Account, "amount": o.Amount})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.addr+"/orders", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var out struct{ GID, Status string }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.GID == "" {
		return ""
	}
	if (resp.StatusCode == http.StatusOK && out.Status == h.proto.done) || (resp.StatusCode == http.StatusConflict && out.Status == h.proto.undone) {
		h.answers.Store(out.GID, out.Status)
		return out.Status
	}
	return ""
}

// fence reads the fencing token of the recovery of p's log and when it was last written: every
// claim of the leader passes the fence, so a new token there is the new leader's first recovery
// action. (The tcc and saga coordinators fence their logs apart: the resource ends with the
// log's table.)
func (p protocol) fence(ctx context.Context, c *pgx.Conn) (tok string, at time.Time, err error) {
	err = c.QueryRow(ctx, `select epoch || '.' || seq, updated_at from txkit_fence where right(resource, length($1)) = $1
		order by updated_at desc limit 1`, `"`+p.log).Scan(&tok, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", time.Time{}, nil
	}
	return tok, at, err
}

// drill SIGKILLs the leading order instance up to Kills times while the load runs, and starts it
// again in its slot. After each kill it waits for the next leader's first recovery — a claim
// under a new fencing token — and measures the time from the kill to it.
func (h *harness) drill(ctx context.Context, loadDone <-chan struct{}, rep *Report) error {
	url, _ := exapp.DatabaseURL(h.cfg.PG, dbOrder, h.schema, 0)
	var c *pgx.Conn
	defer func() {
		if c != nil {
			_ = c.Close(context.WithoutCancel(ctx))
		}
	}()
	// fence reads the token, connecting again for up to 90 s when the connection fails: a
	// PostgreSQL failover (make drill-ha -pg-ha kills the HA primary under this drill).
	fence := func() (string, time.Time, error) {
		deadline := time.Now().Add(90 * time.Second)
		for {
			var err error
			if c == nil {
				c, err = pgx.Connect(ctx, url)
			}
			if err == nil {
				tok, at, ferr := h.proto.fence(ctx, c)
				if ferr == nil {
					return tok, at, nil
				}
				_ = c.Close(context.WithoutCancel(ctx))
				c, err = nil, ferr
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return "", time.Time{}, err
			}
			if perr := exapp.Pause(ctx, 200*time.Millisecond); perr != nil {
				return "", time.Time{}, err
			}
		}
	}
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
		old, _, err := fence()
		if err != nil {
			return err
		}
		h.mu.Lock()
		p := h.orders[id]
		delete(h.orders, id)
		h.mu.Unlock()
		killed := time.Now()
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		rep.LeaderKills++
		h.logf("drill: SIGKILLed the leader %s (fencing token %s)", id, old)
		var slot int
		if _, err := fmt.Sscanf(id, "order-%d.", &slot); err != nil {
			return fmt.Errorf("instance id %q: %w", id, err)
		}
		if err := h.startOrder(ctx, slot); err != nil {
			return err
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			tok, at, err := fence()
			if err != nil {
				return err
			}
			if tok != old && tok != "" {
				d := at.Sub(killed)
				rep.Failovers = append(rep.Failovers, d)
				lead, _ := h.leader(ctx)
				h.logf("drill: %s leads; its first recovery (token %s) came %v after the kill", lead, tok, d.Round(time.Millisecond))
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no new leader recovered within 60s of killing %s", id)
			}
			if err := exapp.Pause(ctx, 20*time.Millisecond); err != nil {
				return nil
			}
		}
	}
	return nil
}

// settle waits until every global transaction (saga) is finished.
func (h *harness) settle(ctx context.Context) error {
	url, _ := exapp.DatabaseURL(h.cfg.PG, dbOrder, h.schema, 0)
	c, err := pgx.Connect(ctx, url)
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
		if err := c.QueryRow(ctx, `select count(*) from `+pgx.Identifier{h.proto.log}.Sanitize()+` where status not in ($1, $2)`,
			h.proto.done, h.proto.undone).Scan(&open); err != nil {
			return err
		}
		if open == 0 {
			return nil
		}
		if time.Since(last) > 5*time.Second {
			h.logf("waiting: %d %s not finished", open, h.proto.units)
			last = time.Now()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v, %d %s are not finished", wait, open, h.proto.units)
		}
		if err := exapp.Pause(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}
