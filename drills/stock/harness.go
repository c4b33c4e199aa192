package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/drills/internal/drillkit"
	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/stock/shop"
)

// Config is one run of the demo.
type Config struct {
	Lock      string        // zk, zk-unfair, pg, redis, redlock, or none (no lock: the checks must fail)
	Orders    int           // orders of the load phase
	Buyers    int           // concurrent buyers of the load phase
	SKUs      int           // SKUs of the load and crash phases each
	Stock     int64         // initial stock of each of those SKUs
	Instances int           // stock-service instances
	Kills     int           // stock instances SIGKILLed while holding a lock in the crash phase
	TTL       time.Duration // ZooKeeper session timeout / lease TTL of the lock
	Window    time.Duration // the stock service's pause between its read and its write
	PG        string        // base PostgreSQL URL
	Dir       string        // where binaries and logs go
	Log       io.Writer     // progress lines
	Keep      bool          // keep the run's schema and its locks' ZooKeeper nodes
}

// The scenario of the documents: 4 in stock, buyer A asks 3 and buyer B asks 2 at once. It is
// played scenarioRounds times, each on a SKU of its own.
const (
	scenarioRounds = 5
	scenarioStock  = 4
	scenarioA      = 3
	scenarioB      = 2
)

func scenarioSKU(round int) string { return fmt.Sprintf("scenario-%d", round+1) }

// crashRate is the orders started per second in the crash phase, by crashBuyers buyers.
const (
	crashRate   = 15
	crashBuyers = 8
)

type harness struct {
	cfg    Config
	runID  string
	schema string
	pool   *pgxpool.Pool
	client *http.Client
	order  *drillkit.Proc

	mu    sync.Mutex
	stock []*drillkit.Proc       // stock instances by slot; replaced when restarted
	args  [][]string             // how each slot was started
	seen  map[string]shop.Status // op id → the final answer the harness got
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.cfg.Log, "[%s] %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// Run builds and starts the services, runs the scenario, the load and the crash phase, and checks
// the stock. The error reports a run that could not complete; broken checks are in
// [Report.Violations] (see [Report.OK]).
func Run(ctx context.Context, cfg Config) (Report, error) {
	start := time.Now()
	rep := Report{Lock: cfg.Lock}
	if cfg.Lock != "none" && !slices.Contains(exapp.LockKinds(), cfg.Lock) {
		return rep, fmt.Errorf("-lock %q: want one of %s or none", cfg.Lock, strings.Join(exapp.LockKinds(), ", "))
	}
	if cfg.Orders < 1 || cfg.Buyers < 1 || cfg.SKUs < 1 || cfg.Stock < 1 || cfg.Instances < 1 || cfg.Kills < 0 {
		return rep, errors.New("need at least one order, buyer, SKU, item and stock instance, and no negative kills")
	}
	runID := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 2 * cfg.Buyers
	h := &harness{cfg: cfg, runID: runID, schema: "stock_" + runID, seen: map[string]shop.Status{},
		client: &http.Client{Timeout: 2 * time.Minute, Transport: tr}}
	rep.Schema = h.schema
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return rep, err
	}
	if err := drillkit.Build(ctx, cfg.Dir, "stock", "order", "stock"); err != nil {
		return rep, err
	}
	pool, err := exapp.Pool(ctx, cfg.PG, shop.DB, h.schema, 4)
	if err != nil {
		return rep, err
	}
	defer pool.Close()
	h.pool = pool
	if !cfg.Keep {
		defer h.cleanup()
	}
	initial := map[string]int64{}
	for r := range scenarioRounds {
		initial[scenarioSKU(r)] = scenarioStock
	}
	for i := 1; i <= cfg.SKUs; i++ {
		initial[fmt.Sprintf("sku-%d", i)] = cfg.Stock
		initial[fmt.Sprintf("crash-%d", i)] = cfg.Stock
	}
	if err := shop.Migrate(ctx, pool); err != nil {
		return rep, err
	}
	if err := shop.Seed(ctx, pool, initial); err != nil {
		return rep, err
	}
	h.logf("run %s: schema %s in %s; lock %s (ttl %v), %d stock instances, window %v between read and write",
		runID, h.schema, shop.DB, cfg.Lock, cfg.TTL, cfg.Instances, cfg.Window)
	defer h.stopAll()
	if err := h.startAll(ctx); err != nil {
		return rep, err
	}
	if err := h.scenario(ctx, &rep); err != nil {
		return rep, err
	}
	if err := h.load(ctx, &rep); err != nil {
		return rep, err
	}
	if cfg.Kills > 0 {
		if err := h.crash(ctx, &rep); err != nil {
			return rep, err
		}
	}
	if err := h.check(context.WithoutCancel(ctx), &rep); err != nil {
		return rep, err
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// startAll starts the stock instances, then the order service pointing at them.
func (h *harness) startAll(ctx context.Context) error {
	var urls []string
	for slot := range h.cfg.Instances {
		args := []string{"-pg", h.cfg.PG, "-schema", h.schema, "-lock", h.cfg.Lock, "-ttl", h.cfg.TTL.String(),
			"-window", h.cfg.Window.String(), "-lock-prefix", lockPrefix(h.schema), "-id", fmt.Sprintf("stock-%d", slot+1), "-kill-hook"}
		p, err := h.start(ctx, fmt.Sprintf("stock-%d", slot+1), "stock", args)
		if err != nil {
			return err
		}
		h.mu.Lock()
		h.stock = append(h.stock, p)
		h.args = append(h.args, args)
		h.mu.Unlock()
		urls = append(urls, "http://"+p.Addr)
	}
	p, err := h.start(ctx, "order", "order", []string{"-pg", h.cfg.PG, "-schema", h.schema, "-stock", strings.Join(urls, ",")})
	if err != nil {
		return err
	}
	h.order = p
	return nil
}

// start runs binary bin as name and waits for its "LISTENING <addr>" line.
func (h *harness) start(ctx context.Context, name, bin string, args []string) (*drillkit.Proc, error) {
	logPath := filepath.Join(h.cfg.Dir, h.runID+"-"+name+".log")
	p, err := drillkit.Start(ctx, name, filepath.Join(h.cfg.Dir, bin), args, logPath)
	if err != nil {
		return nil, err
	}
	h.logf("%s listening on %s (pid %d, log %s)", name, p.Addr, p.Cmd.Process.Pid, logPath)
	return p, nil
}

func (h *harness) stopAll() {
	h.mu.Lock()
	procs := append([]*drillkit.Proc{h.order}, h.stock...)
	h.mu.Unlock()
	drillkit.Stop(procs...)
}

// lockPrefix returns the prefix of the lock names of the run whose schema is schema: the stock
// instances lock <prefix>/<sku>.
func lockPrefix(schema string) string { return "stock/" + schema }

// cleanup drops the run's schema and, on ZooKeeper, deletes its locks' nodes (the other
// backends keep nothing once the locks are released). It runs after the services have stopped.
func (h *harness) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := drillkit.DropSchema(ctx, h.cfg.PG, h.schema, shop.DB); err != nil {
		h.logf("cleanup: %v", err)
	}
	if h.cfg.Lock != "zk" && h.cfg.Lock != "zk-unfair" {
		return
	}
	locks, err := exapp.OpenLocks(ctx, h.cfg.Lock, nil)
	if err != nil {
		h.logf("cleanup: %v", err)
		return
	}
	defer locks.Close()
	if err := locks.DeleteTree(ctx, lockPrefix(h.schema)); err != nil {
		h.logf("cleanup: %v", err)
	}
}

// place posts one order and returns the answer's status ("" when there is none) and op id.
func (h *harness) place(ctx context.Context, sku string, qty int64) (shop.Status, string) {
	body, _ := json.Marshal(shop.OrderRequest{SKU: sku, Qty: qty})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+h.order.Addr+"/orders", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return "", ""
	}
	defer resp.Body.Close()
	var ans shop.OrderAnswer
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		return "", ""
	}
	if ans.Status.Final() {
		h.mu.Lock()
		h.seen[ans.OpID] = ans.Status
		h.mu.Unlock()
	}
	return ans.Status, ans.OpID
}

// scenario is the documents' example, scenarioRounds times on SKUs of their own: buyers A (3)
// and B (2) at once on 4 in stock.
func (h *harness) scenario(ctx context.Context, rep *Report) error {
	rep.Scenario = make([][2]shop.Status, scenarioRounds)
	for r := range scenarioRounds {
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for i, qty := range []int64{scenarioA, scenarioB} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				rep.Scenario[r][i], _ = h.place(ctx, scenarioSKU(r), qty)
			}()
		}
		close(gate)
		wg.Wait()
	}
	h.logf("scenario: %d in stock; buyer A asks %d, buyer B asks %d, at once: %s", scenarioStock, scenarioA, scenarioB, rep.scenarioOutcome())
	return ctx.Err()
}

// load places cfg.Orders orders of 1 to 3 items on the sku-* SKUs from cfg.Buyers buyers at once,
// and measures the orders' latency.
func (h *harness) load(ctx context.Context, rep *Report) error {
	lat := make([]time.Duration, h.cfg.Orders)
	var counts outcomes
	start := time.Now()
	err := drillkit.Load(ctx, h.cfg.Orders, h.cfg.Buyers, 0, func(ctx context.Context, i int) error {
		t := time.Now()
		st, _ := h.place(ctx, fmt.Sprintf("sku-%d", 1+rand.IntN(h.cfg.SKUs)), 1+rand.Int64N(3))
		lat[i-1] = time.Since(t)
		counts.add(st)
		return nil
	})
	rep.Load = counts.phase(h.cfg.Orders, time.Since(start), lat)
	h.logf("load: %d orders from %d buyers on %d SKUs of %d: %s", h.cfg.Orders, h.cfg.Buyers, h.cfg.SKUs, h.cfg.Stock, rep.Load)
	return err
}

// errKillsDone ends the crash phase's load once the kills are done.
var errKillsDone = errors.New("kills done")

// crash places orders on the crash-* SKUs at crashRate while, cfg.Kills times, a stock instance is
// SIGKILLed while it holds a lock mid-deduction (and restarted on its address); it measures how
// long the deduction it held took to be answered after the kill.
func (h *harness) crash(ctx context.Context, rep *Report) error {
	done := make(chan struct{})
	var counts outcomes
	var n atomic.Int64
	start := time.Now()
	err := drillkit.Load(ctx, 1<<30, crashBuyers, crashRate, func(context.Context, int) error {
		select {
		case <-done:
			return errKillsDone
		default:
		}
		n.Add(1)
		// Under the phase's ctx, not the load's: the orders in flight when the kills are done
		// (and the load ends) are finished, not abandoned.
		st, _ := h.place(ctx, fmt.Sprintf("crash-%d", 1+rand.IntN(h.cfg.SKUs)), 1+rand.Int64N(3))
		counts.add(st)
		return nil
	}, func(ctx context.Context, _ <-chan struct{}) error {
		defer close(done)
		return h.kills(ctx, rep)
	})
	rep.Crash = counts.phase(int(n.Load()), time.Since(start), nil)
	h.logf("crash: %d orders, %d stock instances SIGKILLed while holding a lock: %s", n.Load(), rep.Kills, rep.Crash)
	if errors.Is(err, errKillsDone) {
		return nil
	}
	return err
}

// kills SIGKILLs stock instances (slot by slot) while they hold a lock, cfg.Kills times.
func (h *harness) kills(ctx context.Context, rep *Report) error {
	for k := range h.cfg.Kills {
		slot := k % h.cfg.Instances
		h.mu.Lock()
		p := h.stock[slot]
		h.mu.Unlock()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.Addr+"/hold", nil)
		resp, err := h.client.Do(req)
		if err != nil {
			return fmt.Errorf("arm stock-%d: %w", slot+1, err)
		}
		resp.Body.Close()
		held, err := h.waitHolding(ctx, p)
		if err != nil {
			return fmt.Errorf("stock-%d: %w", slot+1, err)
		}
		_ = p.Cmd.Process.Signal(syscall.SIGKILL)
		killed := time.Now()
		<-p.Done
		rep.Kills++
		h.logf("crash: SIGKILLed stock-%d mid-deduction of %s for op %s, holding its lock (token %q); restarting it on %s",
			slot+1, held.SKU, held.OpID, held.Token, p.Addr)
		np, err := h.start(ctx, fmt.Sprintf("stock-%d", slot+1), "stock", append(slices.Clone(h.args[slot]), "-listen", p.Addr))
		if err != nil {
			return err
		}
		h.mu.Lock()
		h.stock[slot] = np
		h.mu.Unlock()
		d, st, err := h.waitAnswered(ctx, held.OpID, killed)
		if err != nil {
			return err
		}
		rep.Recoveries = append(rep.Recoveries, d)
		h.logf("crash: op %s answered %s %v after the kill (its retry waited for the dead holder's lock)", held.OpID, st, d.Round(time.Millisecond))
	}
	return nil
}

// held is what a stock instance says about the deduction it holds for the kill.
type held struct {
	OpID  string `json:"op_id"`
	SKU   string `json:"sku"`
	Token string `json:"token"`
}

// waitHolding waits, 20 s at most, until p holds a lock for the kill.
func (h *harness) waitHolding(ctx context.Context, p *drillkit.Proc) (held, error) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var st struct{ Holding *held }
		if err := drillkit.GetJSON(ctx, h.client, "http://"+p.Addr+"/stats", &st); err == nil && st.Holding != nil {
			return *st.Holding, nil
		}
		if err := exapp.Pause(ctx, 5*time.Millisecond); err != nil {
			return held{}, err
		}
	}
	return held{}, errors.New("no deduction held a lock there within 20s")
}

// waitAnswered waits, 60 s at most, until the order of op has its answer, and returns the time
// from the kill to it.
func (h *harness) waitAnswered(ctx context.Context, op string, killed time.Time) (time.Duration, shop.Status, error) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var st shop.Status
		if err := h.pool.QueryRow(ctx, `select status from orders where op_id = $1`, op).Scan(&st); err != nil {
			return 0, "", err
		}
		if st != shop.Pending {
			return time.Since(killed), st, nil
		}
		if err := exapp.Pause(ctx, 5*time.Millisecond); err != nil {
			return 0, "", err
		}
	}
	return 0, "", fmt.Errorf("op %s not answered within 60s of the kill", op)
}

// outcomes counts the answers of a phase.
type outcomes struct{ deducted, refused, other atomic.Int64 }

func (o *outcomes) add(st shop.Status) {
	switch st {
	case shop.Deducted:
		o.deducted.Add(1)
	case shop.Refused:
		o.refused.Add(1)
	default:
		o.other.Add(1)
	}
}

func (o *outcomes) phase(n int, elapsed time.Duration, lat []time.Duration) Phase {
	p := Phase{Orders: n, Deducted: int(o.deducted.Load()), Refused: int(o.refused.Load()), Unanswered: int(o.other.Load()), Elapsed: elapsed}
	if len(lat) > 0 {
		slices.Sort(lat)
		p.P50, p.P99 = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
	}
	return p
}
