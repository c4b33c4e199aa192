package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/drills/internal/drillkit"
	"github.com/txkit/txkit/examples/exapp"
)

// Config is one run of the example.
type Config struct {
	Users       int    // registrations to make
	Instances   int    // users-service instances (only the elected one relays)
	Concurrency int    // registrations in flight at once
	Rate        int    // registrations started per second at most (0: as fast as they go)
	Mode        string // outbox or txmsg
	Drill       bool   // SIGKILL the leading relay twice and the points service once during the load
	// Partitions splits the outbox into this many partitions shared by the users instances
	// (users -partitions); 0: one relay election. With Drill, each "leader" kill SIGKILLs the
	// instance leading the most partitions and measures the takeover.
	Partitions int
	PG, ZK     string // base PostgreSQL URL, ZooKeeper servers
	Namesrv    string
	Broker     string // the brokers the topic is created on, comma-separated (every node of a DLedger group)
	// Lock is the lock backend of the relay's elections (users -lock; default zk) and
	// SessionTimeout its session timeout or lease TTL (users -session-timeout; default 4s).
	Lock           string
	SessionTimeout time.Duration
	Dir            string    // where binaries and logs go
	Log            io.Writer // progress lines
	Keep           bool      // keep the run's schemas and topic afterwards
	// BrokerOutage stops the RocketMQ broker (deploy/local/rocketmq stop-broker) for this long at
	// a third of the load, then starts it again. It stops a server other tests use: run it alone.
	BrokerOutage time.Duration
	// Settled, when set, is called once every registered user has been awarded and nothing is
	// pending, before the services stop, with the addresses (host:port) of the live users instances
	// and of the points service: a test scrapes their GET /metrics there. Its error ends the run.
	Settled func(ctx context.Context, users []string, points string) error
	// PGFailovers, with PG the HA PostgreSQL's URL (TXKIT_PG_HA_URL), SIGKILLs its primary this
	// many times during the load (the last a network cut with PGCut; see drillkit.PGFailover).
	PGFailovers int
	PGCut       bool
	PGAsync     bool
}

// Report is what a run measured.
type Report struct {
	Requests         int           // registrations the load generator saw succeed
	Registered       int           // users in the users database
	Awarded          int           // users with a points row
	Exactly100       int           // users with exactly 100 points
	Over100          int           // users with more (a duplicate applied twice)
	Duplicates       int64         // redeliveries the idempotency claim suppressed
	Pending          int64         // outbox rows not yet relayed
	P50, P99         time.Duration // registration committed → points awarded
	LeaderKills      int
	ConsumerRestarts int
	MaxPending       int64         // the largest outbox backlog seen during a broker outage
	OutageDrained    time.Duration // broker stopped → every message enqueued before it was back relayed
	BackDrained      time.Duration // broker back → the same
	Elapsed          time.Duration
	LoadTook         time.Duration   // the load: first registration started → last answered
	AwardSpan        time.Duration   // first registration committed → last award committed
	UsersCPU         time.Duration   // user + system CPU of every users process (killed ones included)
	PointsCPU        time.Duration   // the same for the points processes
	Takeovers        []time.Duration // with Partitions and Drill: SIGKILL → every partition led again
	PGFailovers      []drillkit.FailoverFigures
}

// OK reports whether the run kept the example's promise: every registered user has exactly 100
// points, none has more, nothing is left pending.
func (r Report) OK() error {
	var errs []error
	if r.Registered == 0 {
		errs = append(errs, errors.New("no user registered"))
	}
	if r.Exactly100 != r.Registered {
		errs = append(errs, fmt.Errorf("%d of %d registered users have exactly 100 points", r.Exactly100, r.Registered))
	}
	if r.Over100 != 0 {
		errs = append(errs, fmt.Errorf("%d users have more than 100 points", r.Over100))
	}
	if r.Pending != 0 {
		errs = append(errs, fmt.Errorf("%d messages still pending in the outbox", r.Pending))
	}
	return errors.Join(errs...)
}

func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "users registered:       %d (HTTP 201 answers: %d)\n", r.Registered, r.Requests)
	fmt.Fprintf(&b, "points awarded:         %d users with exactly 100, %d with more\n", r.Exactly100, r.Over100)
	fmt.Fprintf(&b, "duplicates suppressed:  %d\n", r.Duplicates)
	fmt.Fprintf(&b, "left pending:           %d\n", r.Pending)
	for i, f := range r.PGFailovers {
		fmt.Fprintf(&b, "PostgreSQL failover %d:  %s\n", i+1, f)
	}
	fmt.Fprintf(&b, "end-to-end latency:     p50 %v, p99 %v (commit → points awarded)\n", r.P50.Round(100*time.Microsecond), r.P99.Round(100*time.Microsecond))
	if r.LoadTook > 0 && r.AwardSpan > 0 && r.Registered > 0 {
		fmt.Fprintf(&b, "throughput:             %.0f registrations/s answered, %.0f awards/s (first commit → last award)\n",
			float64(r.Requests)/r.LoadTook.Seconds(), float64(r.Awarded)/r.AwardSpan.Seconds())
		fmt.Fprintf(&b, "CPU per message:        users %.2f ms (HTTP, insert, enqueue, relay), points %.2f ms (consume, claim, award)\n",
			float64(r.UsersCPU.Microseconds())/1000/float64(r.Registered), float64(r.PointsCPU.Microseconds())/1000/float64(r.Registered))
	}
	if len(r.Takeovers) > 0 {
		ts := make([]string, len(r.Takeovers))
		for i, d := range r.Takeovers {
			ts[i] = d.Round(time.Millisecond).String()
		}
		fmt.Fprintf(&b, "partition takeovers:    %s (SIGKILL → every partition led by a live instance)\n", strings.Join(ts, ", "))
	}
	if r.MaxPending > 0 {
		fmt.Fprintf(&b, "broker outage:          the outbox backlog peaked at %d messages\n", r.MaxPending)
		fmt.Fprintf(&b, "outage → drained:       %v (broker back → drained %v)\n", r.OutageDrained.Round(10*time.Millisecond),
			r.BackDrained.Round(10*time.Millisecond))
	}
	if r.LeaderKills+r.ConsumerRestarts > 0 {
		fmt.Fprintf(&b, "faults injected:        %d relay leaders SIGKILLed, %d points service SIGKILLed and restarted\n", r.LeaderKills, r.ConsumerRestarts)
	}
	fmt.Fprintf(&b, "elapsed:                %v\n", r.Elapsed.Round(10*time.Millisecond))
	return b.String()
}

// proc is a running service process.
type proc struct {
	name string
	args []string
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

type harness struct {
	cfg    Config
	runID  string
	schema string
	topic  string
	mu     sync.Mutex
	users  map[string]*proc // by instance id, "users-<slot>.<start>"
	starts int              // users processes started so far
	points *proc
	dups   atomic.Int64 // duplicates counted by points processes that were killed
	// CPU of the processes that were killed, by kind ("users", "points").
	deadCPU map[string]time.Duration
	client  *http.Client
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.cfg.Log, "[%s] %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// Run builds and starts the services, registers cfg.Users users through the HTTP API (with the
// drill's faults if asked), waits until every registered user has been awarded, and reports.
func Run(ctx context.Context, cfg Config) (Report, error) {
	start := time.Now()
	runID := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	h := &harness{cfg: cfg, runID: runID, schema: "demo_" + runID, topic: "txkit-demo-" + runID,
		users: map[string]*proc{}, client: &http.Client{Timeout: 10 * time.Second}, deadCPU: map[string]time.Duration{}}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return Report{}, err
	}
	if err := drillkit.Build(ctx, h.cfg.Dir, "register-points", "users", "points"); err != nil {
		return Report{}, err
	}
	if err := createTopic(ctx, cfg.Namesrv, cfg.Broker, h.topic); err != nil {
		return Report{}, err
	}
	h.logf("run %s: schema %s in txkit_users and txkit_points, topic %s, mode %s, %d users at %s",
		runID, h.schema, h.topic, cfg.Mode, cfg.Users, rateText(cfg.Rate))
	if !cfg.Keep {
		defer h.cleanup()
	}
	defer h.stopAll()
	if err := h.startPoints(ctx); err != nil {
		return Report{}, err
	}
	for i := 1; i <= cfg.Instances; i++ {
		if err := h.startUsers(ctx, i); err != nil {
			return Report{}, err
		}
	}
	rep := Report{}
	loadStart := time.Now()
	ok, err := h.load(ctx, &rep)
	rep.Requests = ok
	rep.LoadTook = time.Since(loadStart)
	if err != nil {
		return rep, err
	}
	h.logf("%d registrations answered; waiting for every award", ok)
	if err := h.settle(ctx, &rep); err != nil {
		return rep, err
	}
	if cfg.Settled != nil {
		h.mu.Lock()
		var users []string
		for _, p := range h.users {
			users = append(users, p.addr)
		}
		points := h.points.addr
		h.mu.Unlock()
		if err := cfg.Settled(ctx, users, points); err != nil {
			return rep, err
		}
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

func createTopic(ctx context.Context, namesrv, broker, topic string) error {
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(strings.Split(namesrv, ","))))
	if err != nil {
		return fmt.Errorf("rocketmq admin: %w", err)
	}
	defer adm.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, b := range strings.Split(broker, ",") {
		if err := adm.CreateTopic(cctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(b),
			admin.WithReadQueueNums(4), admin.WithWriteQueueNums(4)); err != nil {
			return fmt.Errorf("create topic %s on %s: %w", topic, b, err)
		}
	}
	return nil
}

func rateText(r int) string {
	if r <= 0 {
		return "full speed"
	}
	return fmt.Sprintf("%d/s", r)
}

// cleanup drops the run's schemas and deletes its topic.
func (h *harness) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := drillkit.DropSchema(ctx, h.cfg.PG, h.schema, "txkit_users", "txkit_points"); err != nil {
		h.logf("cleanup: %v", err)
	}
	if adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(strings.Split(h.cfg.Namesrv, ",")))); err == nil {
		for _, b := range strings.Split(h.cfg.Broker, ",") {
			_ = adm.DeleteTopic(ctx, admin.WithTopicDelete(h.topic), admin.WithBrokerAddrDelete(b),
				admin.WithNameSrvAddr(strings.Split(h.cfg.Namesrv, ",")))
		}
		_ = adm.Close()
	}
}

func (h *harness) common() []string {
	return []string{"-pg", h.cfg.PG, "-schema", h.schema, "-namesrv", h.cfg.Namesrv, "-topic", h.topic}
}

func (h *harness) startPoints(ctx context.Context) error {
	p, err := h.start(ctx, "points", filepath.Join(h.cfg.Dir, "points"), h.common())
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.points = p
	h.mu.Unlock()
	return nil
}

// startUsers starts a users instance in slot; each start gets an id of its own, so the election
// tells a restarted instance from the one it replaces.
func (h *harness) startUsers(ctx context.Context, slot int) error {
	h.mu.Lock()
	h.starts++
	id := fmt.Sprintf("users-%d.%d", slot, h.starts)
	h.mu.Unlock()
	args := append(h.common(), "-zk", h.cfg.ZK, "-mode", h.cfg.Mode, "-id", id)
	if h.cfg.Lock != "" {
		args = append(args, "-lock", h.cfg.Lock)
	}
	if h.cfg.SessionTimeout > 0 {
		args = append(args, "-session-timeout", h.cfg.SessionTimeout.String())
	}
	if h.cfg.Partitions > 0 {
		args = append(args, "-partitions", fmt.Sprint(h.cfg.Partitions))
	}
	p, err := h.start(ctx, id, filepath.Join(h.cfg.Dir, "users"), args)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.users[id] = p
	h.mu.Unlock()
	return nil
}

// start runs bin, waits for its "LISTENING <addr>" line and for /healthz.
func (h *harness) start(ctx context.Context, name, bin string, args []string) (*proc, error) {
	logPath := filepath.Join(h.cfg.Dir, h.runID+"-"+name+".log")
	hp, err := drillkit.Start(ctx, name, bin, args, logPath)
	if err != nil {
		return nil, err
	}
	h.logf("%s listening on %s (pid %d, log %s)", name, hp.Addr, hp.Cmd.Process.Pid, logPath)
	return &proc{name: name, args: args, cmd: hp.Cmd, addr: hp.Addr, done: hp.Done}, nil
}

func (h *harness) stopAll() {
	h.mu.Lock()
	procs := []*proc{h.points}
	for _, p := range h.users {
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
}

// address returns p's address, for drillkit.Leader.
func (p *proc) address() string { return p.addr }

// hp is p as drillkit knows it.
func (p *proc) hp() *drillkit.Proc { return &drillkit.Proc{Cmd: p.cmd, Addr: p.addr, Done: p.done} }

// kill SIGKILLs p, waits for it to be gone, and adds its CPU time to kind's.
func (h *harness) kill(p *proc, kind string) {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	h.mu.Lock()
	h.deadCPU[kind] += cpuOf(p.cmd)
	h.mu.Unlock()
}

func (h *harness) getJSON(ctx context.Context, url string, v any) error {
	return drillkit.GetJSON(ctx, h.client, url, v)
}

// leader waits until a live users instance leads the relay election (after a kill, the dead
// leader's node stays until its session expires) and returns its id. In txmsg mode there is no
// relay: it returns the first live users instance (a transactional producer, whose half messages
// the broker's check-back resolves through another instance).
func (h *harness) leader(ctx context.Context) (string, error) {
	if h.cfg.Mode == "txmsg" {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, id := range slices.Sorted(maps.Keys(h.users)) {
			return id, nil
		}
		return "", errors.New("no live users instance")
	}
	if h.cfg.Partitions > 0 {
		led, err := h.led(ctx)
		if err != nil {
			return "", err
		}
		best := ""
		for id, ps := range led {
			if best == "" || len(ps) > len(led[best]) {
				best = id
			}
		}
		if best == "" || len(led[best]) == 0 {
			return "", errors.New("no users instance leads a partition")
		}
		return best, nil
	}
	return drillkit.Leader(ctx, "users instance leads the relay election", &h.mu, h.users, (*proc).address, drillkit.StatsLeader(h.client, ""))
}

// led returns the partitions each live users instance leads, from its GET /stats.
func (h *harness) led(ctx context.Context) (map[string][]int, error) {
	h.mu.Lock()
	procs := make(map[string]*proc, len(h.users))
	for id, p := range h.users {
		procs[id] = p
	}
	h.mu.Unlock()
	out := map[string][]int{}
	for id, p := range procs {
		var st struct{ Led []int }
		if err := h.getJSON(ctx, "http://"+p.addr+"/stats", &st); err != nil {
			return nil, fmt.Errorf("stats of %s: %w", id, err)
		}
		out[id] = st.Led
	}
	return out, nil
}

// takeover waits until the live users instances lead every partition between them, and returns
// how long that took.
func (h *harness) takeover(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	for time.Since(start) < time.Minute {
		led, err := h.led(ctx)
		if err == nil {
			seen := map[int]bool{}
			for _, ps := range led {
				for _, p := range ps {
					seen[p] = true
				}
			}
			if len(seen) == h.cfg.Partitions {
				return time.Since(start), nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return 0, fmt.Errorf("partitions not all led a minute after a SIGKILL")
}

// load registers the users: Concurrency workers post to the users instances in turn, and move on
// to another instance when one does not answer (it may have been killed by the drill).
func (h *harness) load(ctx context.Context, rep *Report) (int, error) {
	var okCount atomic.Int64
	var beside []func(context.Context, <-chan struct{}) error
	if h.cfg.Drill {
		beside = append(beside, func(ctx context.Context, _ <-chan struct{}) error { return h.drill(ctx, &okCount, rep) })
	}
	if h.cfg.BrokerOutage > 0 {
		beside = append(beside, func(ctx context.Context, _ <-chan struct{}) error { return h.brokerOutage(ctx, &okCount, rep) })
	}
	if h.cfg.PGFailovers > 0 {
		pointsURL, _ := exapp.DatabaseURL(h.cfg.PG, "txkit_points", h.schema, 0)
		relayed := func(ctx context.Context, since time.Time) (bool, error) {
			c, err := pgx.Connect(ctx, pointsURL)
			if err != nil {
				return false, err
			}
			defer c.Close(context.WithoutCancel(ctx))
			var ok bool
			err = c.QueryRow(ctx, "select exists (select 1 from points where awarded_at > $1)", since).Scan(&ok)
			return ok, err
		}
		beside = append(beside, func(ctx context.Context, loadDone <-chan struct{}) error {
			var err error
			rep.PGFailovers, err = drillkit.PGFailover{Failovers: h.cfg.PGFailovers, CutLast: h.cfg.PGCut, Async: h.cfg.PGAsync, Every: 3 * time.Second,
				URL: h.cfg.PG, Relayed: relayed, Log: h.logf}.Run(ctx, loadDone)
			return err
		})
	}
	err := drillkit.Load(ctx, h.cfg.Users, h.cfg.Concurrency, h.cfg.Rate, func(ctx context.Context, i int) error {
		if err := h.register(ctx, i); err != nil {
			return err
		}
		okCount.Add(1)
		return nil
	}, beside...)
	return int(okCount.Load()), err
}

func (h *harness) register(ctx context.Context, i int) error {
	body, _ := json.Marshal(map[string]string{"name": fmt.Sprintf("user-%d", i)})
	deadline := time.Now().Add(60 * time.Second)
	for attempt := 0; ; attempt++ {
		h.mu.Lock()
		ids := make([]string, 0, len(h.users))
		for id := range h.users {
			ids = append(ids, id)
		}
		h.mu.Unlock()
		if len(ids) == 0 {
			return errors.New("no users instance")
		}
		h.mu.Lock()
		p := h.users[ids[(i+attempt)%len(ids)]]
		h.mu.Unlock()
		if p != nil {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.addr+"/users", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := h.client.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusCreated {
					return nil
				}
				err = fmt.Errorf("POST /users: %s", resp.Status)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("registration %d: %w", i, err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// drill injects the faults as the load progresses: the leading relay instance is SIGKILLed at a
// quarter and at 60 % of the registrations (and started again), the points service at 40 %.
func (h *harness) drill(ctx context.Context, done *atomic.Int64, rep *Report) error {
	steps := []struct {
		at   float64
		what string
	}{{0.25, "leader"}, {0.40, "points"}, {0.60, "leader"}}
	for _, s := range steps {
		for float64(done.Load()) < s.at*float64(h.cfg.Users) {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(5 * time.Millisecond):
			}
		}
		switch s.what {
		case "leader":
			id, err := h.leader(ctx)
			if err != nil {
				return err
			}
			h.mu.Lock()
			p := h.users[id]
			delete(h.users, id)
			h.mu.Unlock()
			h.logf("drill: SIGKILL the relay leader (txmsg: a transactional producer) %s at %d registrations", id, done.Load())
			h.kill(p, "users")
			rep.LeaderKills++
			if h.cfg.Partitions > 0 {
				took, err := h.takeover(ctx)
				if err != nil {
					return err
				}
				h.logf("drill: every partition led again %v after the SIGKILL", took.Round(time.Millisecond))
				rep.Takeovers = append(rep.Takeovers, took)
			}
			var slot int
			if _, err := fmt.Sscanf(id, "users-%d.", &slot); err != nil {
				return fmt.Errorf("instance id %q: %w", id, err)
			}
			if err := h.startUsers(ctx, slot); err != nil {
				return err
			}
		case "points":
			h.mu.Lock()
			p := h.points
			h.mu.Unlock()
			var st struct{ Duplicates int64 }
			_ = h.getJSON(ctx, "http://"+p.addr+"/stats", &st)
			h.logf("drill: SIGKILL the points service at %d registrations, then start it again", done.Load())
			h.kill(p, "points")
			h.dups.Add(st.Duplicates)
			rep.ConsumerRestarts++
			if err := h.startPoints(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// brokerOutage stops the broker at a third of the load for cfg.BrokerOutage, watching the outbox
// grow, then starts it again and measures how long the relay takes to send every message enqueued
// before the broker was back (outage → drained).
func (h *harness) brokerOutage(ctx context.Context, done *atomic.Int64, rep *Report) error {
	for float64(done.Load()) < float64(h.cfg.Users)/3 {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Millisecond):
		}
	}
	root, err := drillkit.ModuleRoot(ctx)
	if err != nil {
		return err
	}
	script := filepath.Join(root, "deploy", "local", "rocketmq")
	h.logf("outage: stopping the broker at %d registrations for %v", done.Load(), h.cfg.BrokerOutage)
	stopped := time.Now()
	if out, err := exec.CommandContext(ctx, script, "stop-broker").CombinedOutput(); err != nil {
		return fmt.Errorf("stop-broker: %w\n%s", err, out)
	}
	started := false
	startBroker := func() {
		started = true
		if out, err := exec.Command(script, "start-broker").CombinedOutput(); err != nil {
			h.logf("start-broker: %v\n%s", err, out)
		}
		h.logf("outage: broker started again; outbox backlog peaked at %d", rep.MaxPending)
	}
	defer func() {
		if !started {
			startBroker()
		}
	}()
	usersURL, _ := exapp.DatabaseURL(h.cfg.PG, "txkit_users", h.schema, 0)
	c, err := pgx.Connect(ctx, usersURL)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	end := time.Now().Add(h.cfg.BrokerOutage)
	for time.Now().Before(end) {
		var n int64
		if err := c.QueryRow(ctx, "select count(*) from txkit_outbox").Scan(&n); err == nil && n > rep.MaxPending {
			rep.MaxPending = n
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
	startBroker()
	back := time.Now()
	for {
		var n int64
		if err := c.QueryRow(ctx, "select count(*) from txkit_outbox where created_at < $1", back).Scan(&n); err == nil && n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
	rep.OutageDrained, rep.BackDrained = time.Since(stopped), time.Since(back)
	h.logf("outage → drained: %v (broker back → drained %v)", rep.OutageDrained.Round(10*time.Millisecond),
		rep.BackDrained.Round(10*time.Millisecond))
	return nil
}

// settle waits until every registered user has a points row and the outbox is empty, then fills
// the report from the two databases.
func (h *harness) settle(ctx context.Context, rep *Report) error {
	usersURL, _ := exapp.DatabaseURL(h.cfg.PG, "txkit_users", h.schema, 0)
	pointsURL, _ := exapp.DatabaseURL(h.cfg.PG, "txkit_points", h.schema, 0)
	uc, err := pgx.Connect(ctx, usersURL)
	if err != nil {
		return err
	}
	defer uc.Close(context.WithoutCancel(ctx))
	pc, err := pgx.Connect(ctx, pointsURL)
	if err != nil {
		return err
	}
	defer pc.Close(context.WithoutCancel(ctx))
	deadline := time.Now().Add(3 * time.Minute)
	last := time.Now()
	for {
		var registered, awarded int
		if err := uc.QueryRow(ctx, "select count(*) from users").Scan(&registered); err != nil {
			return err
		}
		if err := pc.QueryRow(ctx, "select count(*) from points").Scan(&awarded); err != nil {
			return err
		}
		pending := int64(0)
		if h.cfg.Mode == "outbox" {
			if err := uc.QueryRow(ctx, "select count(*) from txkit_outbox").Scan(&pending); err != nil {
				return err
			}
		}
		if awarded >= registered && pending == 0 {
			rep.Registered, rep.Awarded, rep.Pending = registered, awarded, pending
			break
		}
		if time.Since(last) > 5*time.Second {
			h.logf("waiting: %d registered, %d awarded, %d pending in the outbox", registered, awarded, pending)
			last = time.Now()
		}
		if time.Now().After(deadline) {
			rep.Registered, rep.Awarded, rep.Pending = registered, awarded, pending
			return fmt.Errorf("after 3 minutes: %d registered, %d awarded, %d pending", registered, awarded, pending)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	// Let redeliveries in flight land before counting.
	time.Sleep(time.Second)
	if err := pc.QueryRow(ctx, `select count(*) filter (where points = 100), count(*) filter (where points > 100) from points`).
		Scan(&rep.Exactly100, &rep.Over100); err != nil {
		return err
	}
	var p50, p99 float64
	if err := pc.QueryRow(ctx, `select
			coalesce(percentile_cont(0.5) within group (order by extract(epoch from awarded_at - registered_at)), 0),
			coalesce(percentile_cont(0.99) within group (order by extract(epoch from awarded_at - registered_at)), 0)
		from points`).Scan(&p50, &p99); err != nil {
		return err
	}
	rep.P50, rep.P99 = time.Duration(p50*float64(time.Second)), time.Duration(p99*float64(time.Second))
	var span float64
	if err := pc.QueryRow(ctx, `select coalesce(extract(epoch from max(awarded_at) - min(registered_at)), 0) from points`).
		Scan(&span); err != nil {
		return err
	}
	rep.AwardSpan = time.Duration(span * float64(time.Second))
	h.mu.Lock()
	rep.UsersCPU, rep.PointsCPU = h.deadCPU["users"], h.deadCPU["points"]
	for _, p := range h.users {
		rep.UsersCPU += cpuOf(p.cmd)
	}
	rep.PointsCPU += cpuOf(h.points.cmd)
	h.mu.Unlock()
	h.mu.Lock()
	p := h.points
	h.mu.Unlock()
	var st struct{ Duplicates int64 }
	if err := h.getJSON(ctx, "http://"+p.addr+"/stats", &st); err != nil {
		return err
	}
	rep.Duplicates = h.dups.Load() + st.Duplicates
	return nil
}

// cpuOf returns the user + system CPU time of cmd's process: from its exit status once it has
// been reaped, else from /proc/<pid>/stat (0 when unreadable).
func cpuOf(cmd *exec.Cmd) time.Duration {
	if ps := cmd.ProcessState; ps != nil {
		return ps.UserTime() + ps.SystemTime()
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which may hold spaces, in parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 > len(data) {
		return 0
	}
	f := strings.Fields(string(data[i+2:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64) // fields 14 and 15 of proc(5), in clock ticks
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // sysconf(_SC_CLK_TCK) is 100 on Linux
}
