package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/txkit/txkit/drills/internal/drillkit"
	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/examples/recharge/app"
)

// Config is one run of the example.
type Config struct {
	Recharges   int             // top-ups the account service asks for: order-001, order-002, ...
	Lost        []string        // orders whose deliveries are all lost on the way (the recharge service's -drop)
	FailFirst   int             // deliveries the account service answers 500 first (its -fail-first)
	SlowFirst   int             // deliveries the recharge service holds back by Slow first (its -slow-first)
	Slow        time.Duration   // longer than CallTimeout: those deliveries time out
	CallTimeout time.Duration   // bound of each delivery
	Schedule    []time.Duration // delays between attempts (compressed: the demo takes seconds)
	PG, ZK      string          // base PostgreSQL URL, ZooKeeper servers
	Dir         string          // where the binaries and the services' logs go
	Log         io.Writer       // what the run says as it goes
	Keep        bool            // keep the run's schemas afterwards
}

// Report is what a run saw and the checks it made.
type Report struct {
	Asked          int64                   // sum of the amounts asked for
	Recharged      app.Totals              // what the recharge service recorded
	ByNotification int                     // orders credited by a delivered notification
	ByReconcile    int                     // orders credited by reconciliation
	Deliveries     map[string]app.Delivery // order → its notification and attempts at the recharge service
	Retried        []string                // orders delivered after failed attempts
	Reconcile      app.Reconciled          // the reconciliation of the pending orders
	Again          app.Reconciled          // a second one, asking about every order
	Orders         []app.Order
	Balances       map[string]int64
	Waited         time.Duration // last top-up asked → every notification delivered or failed
	Checks         []string      // checks that held
	Violations     []string      // checks that broke; empty when all hold
}

// OK returns the broken checks as one error, an error when nothing was checked, or nil.
func (r Report) OK() error {
	var nothing error
	if len(r.Checks) == 0 {
		nothing = errors.New("nothing checked")
	}
	return drillkit.Verdict(r.Violations, nothing)
}

func (r *Report) check(ok bool, format string, args ...any) {
	if ok {
		r.Checks = append(r.Checks, fmt.Sprintf(format, args...))
	} else {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
}

type harness struct {
	cfg      Config
	schema   string
	secret   string // the file holding the run's shared secret
	client   *http.Client
	recharge string // base URLs
	account  string
}

func (h *harness) say(format string, args ...any) { fmt.Fprintf(h.cfg.Log, format+"\n", args...) }

func order(i int) string { return fmt.Sprintf("order-%03d", i) }

// Run builds and starts the recharge and account services, has the account service ask for the
// top-ups, waits until every notification is delivered or has failed after its schedule, shows
// the attempts of the retried ones and of the lost ones, reconciles, and checks that every top-up
// was credited exactly once. The error reports a run that could not complete; broken checks are
// in [Report.Violations] (see [Report.OK]).
func Run(ctx context.Context, cfg Config) (Report, error) {
	rep := Report{Deliveries: map[string]app.Delivery{}}
	if cfg.Recharges < 1 || len(cfg.Schedule) == 0 {
		return rep, errors.New("need a recharge and a schedule")
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return rep, err
	}
	if err := build(ctx, cfg.Dir); err != nil {
		return rep, err
	}
	runID := strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
	h := &harness{cfg: cfg, schema: "rc_" + runID, client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}}
	defer h.client.CloseIdleConnections()
	if !cfg.Keep {
		defer h.cleanup()
	}
	// A fresh random secret for the two services, in a file only this user reads: never a
	// default, never on a command line.
	var err error
	if h.secret, err = writeSecret(cfg.Dir, runID); err != nil {
		return rep, err
	}
	defer os.Remove(h.secret)
	procs, err := h.start(ctx, runID)
	defer drillkit.Stop(procs...)
	if err != nil {
		return rep, err
	}

	// The account service asks for the top-ups.
	for i := 1; i <= cfg.Recharges; i++ {
		req := app.Recharge{Order: order(i), Account: fmt.Sprintf("acct-%d", (i-1)%4+1), Amount: int64(10 * i)}
		var ans app.Answer
		code, err := h.post(ctx, h.account+"/topups", req, &ans)
		if err != nil || code != http.StatusOK {
			return rep, fmt.Errorf("top-up %s: %d %v %s", req.Order, code, err, ans.Error)
		}
		rep.Asked += req.Amount
	}
	asked := time.Now()
	h.say("account service asked for %d top-ups (order-001 .. %s, %d in all): the recharge service took them all", cfg.Recharges, order(cfg.Recharges), rep.Asked)

	// Every notification ends delivered, or failed after the whole schedule (the lost ones).
	if err := h.settle(ctx, &rep); err != nil {
		return rep, err
	}
	rep.Waited = time.Since(asked)
	if err := h.getJSON(ctx, h.account+"/orders", &rep.Orders); err != nil {
		return rep, err
	}
	var credited, pending []string
	for _, o := range rep.Orders {
		if o.Status == "credited" {
			credited = append(credited, o.ID)
		} else {
			pending = append(pending, o.ID)
		}
	}
	h.say("after %v: %d orders credited by notification; pending: %s", rep.Waited.Round(10*time.Millisecond), len(credited), list(pending))
	for i := 1; i <= cfg.Recharges; i++ {
		d := rep.Deliveries[order(i)]
		if d.Status == "delivered" && len(d.Attempts) > 1 {
			rep.Retried = append(rep.Retried, d.Order)
		}
		if d.Status != "delivered" || len(d.Attempts) > 1 {
			h.say("  %s: %s", d.Order, attempts(d))
		}
	}

	// Reconciliation: the account service asks the recharge service's query API about its
	// pending orders, then about every order (which must credit nothing more).
	if _, err := h.post(ctx, h.account+"/reconcile", nil, &rep.Reconcile); err != nil {
		return rep, err
	}
	h.say("reconcile (POST /reconcile): asked the query API about %d pending %s, credited %d; pending now: %s",
		len(rep.Reconcile.Asked), plural(len(rep.Reconcile.Asked), "order"), rep.Reconcile.Credited, list(rep.Reconcile.Pending))
	all := make([]string, cfg.Recharges)
	for i := range all {
		all[i] = order(i + 1)
	}
	if _, err := h.post(ctx, h.account+"/reconcile", map[string]any{"orders": all}, &rep.Again); err != nil {
		return rep, err
	}
	h.say("reconcile again, asking about all %d orders: credited %d", len(rep.Again.Asked), rep.Again.Credited)

	if err := h.check(ctx, &rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// build compiles the two services into dir.
func build(ctx context.Context, dir string) error {
	return drillkit.Build(ctx, dir, "recharge", "recharge", "account")
}

// start starts the recharge service, then the account service, and waits until the recharge
// service leads its delivery election. Each needs the other's address: the account service's
// port is chosen first, so that the recharge service knows where to deliver.
func (h *harness) start(ctx context.Context, runID string) ([]*drillkit.Proc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	accountAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	sched := make([]string, len(h.cfg.Schedule))
	for i, d := range h.cfg.Schedule {
		sched[i] = d.String()
	}
	rargs := []string{"-pg", h.cfg.PG, "-zk", h.cfg.ZK, "-schema", h.schema, "-id", "recharge-1", "-secret-file", h.secret,
		"-account", "http://" + accountAddr + "/notify", "-schedule", strings.Join(sched, ","),
		"-call-timeout", h.cfg.CallTimeout.String(), "-breaker-failures", "50", "-breaker-cooldown", "1s",
		"-drop", strings.Join(h.cfg.Lost, ","), "-slow-first", strconv.Itoa(h.cfg.SlowFirst), "-slow", h.cfg.Slow.String()}
	logPath := filepath.Join(h.cfg.Dir, runID+"-recharge.log")
	rp, err := drillkit.Start(ctx, "recharge", filepath.Join(h.cfg.Dir, "recharge"), rargs, logPath)
	if err != nil {
		return nil, err
	}
	procs := []*drillkit.Proc{rp}
	h.recharge = "http://" + rp.Addr
	h.say("recharge service on %s (database %s, schema %s, log %s)", rp.Addr, app.RechargeDB, h.schema, logPath)
	h.say("  schedule %s (looking for due ones every second): %d attempts; deliveries of %s lost on the way; the first %d held back %v (call timeout %v)",
		strings.Join(sched, ", "), len(sched)+1, list(h.cfg.Lost), h.cfg.SlowFirst, h.cfg.Slow, h.cfg.CallTimeout)
	aargs := []string{"-pg", h.cfg.PG, "-schema", h.schema, "-listen", accountAddr, "-recharge", h.recharge, "-secret-file", h.secret,
		"-fail-first", strconv.Itoa(h.cfg.FailFirst)}
	logPath = filepath.Join(h.cfg.Dir, runID+"-account.log")
	ap, err := drillkit.Start(ctx, "account", filepath.Join(h.cfg.Dir, "account"), aargs, logPath)
	if err != nil {
		return procs, err
	}
	procs = append(procs, ap)
	h.account = "http://" + ap.Addr
	h.say("account service on %s (database %s, schema %s, log %s); it answers 500 to the first %d deliveries",
		ap.Addr, app.AccountDB, h.schema, logPath, h.cfg.FailFirst)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st struct{ Leader string }
		if err := h.getJSON(ctx, h.recharge+"/healthz", &st); err == nil && st.Leader == "recharge-1" {
			return procs, nil
		}
		if time.Now().After(deadline) {
			return procs, errors.New("the recharge service did not lead its delivery election within 30s")
		}
		if err := exapp.Pause(ctx, 50*time.Millisecond); err != nil {
			return procs, err
		}
	}
}

// writeSecret writes a new random secret (32 hex digits) to a file in dir readable by this user
// only, and returns the file's path.
func writeSecret(dir, runID string) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	path := filepath.Join(dir, runID+"-secret")
	if err := os.WriteFile(path, []byte(hex.EncodeToString(b[:])), 0o600); err != nil {
		return "", err
	}
	return path, nil
}

// freePort returns a TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// settle waits (60 s at most) until every notification is delivered or has failed, and reads the
// attempts of each.
func (h *harness) settle(ctx context.Context, rep *Report) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		var st struct {
			Stats struct{ Delivered, Failed int }
		}
		if err := h.getJSON(ctx, h.recharge+"/healthz", &st); err != nil {
			return err
		}
		if st.Stats.Delivered+st.Stats.Failed >= h.cfg.Recharges {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 60s: %d notifications delivered and %d failed of %d", st.Stats.Delivered, st.Stats.Failed, h.cfg.Recharges)
		}
		if err := exapp.Pause(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	for i := 1; i <= h.cfg.Recharges; i++ {
		var d app.Delivery
		if err := h.getJSON(ctx, h.recharge+"/notifications/"+order(i)+"/attempts", &d); err != nil {
			return err
		}
		rep.Deliveries[d.Order] = d
	}
	return nil
}

// check reads the final state of both services and checks it.
func (h *harness) check(ctx context.Context, rep *Report) error {
	if err := h.getJSON(ctx, h.account+"/orders", &rep.Orders); err != nil {
		return err
	}
	if err := h.getJSON(ctx, h.account+"/balances", &rep.Balances); err != nil {
		return err
	}
	if err := h.getJSON(ctx, h.recharge+"/recharges", &rep.Recharged); err != nil {
		return err
	}
	var total int64
	var parts []string
	for _, a := range slices.Sorted(maps.Keys(rep.Balances)) {
		total += rep.Balances[a]
		parts = append(parts, fmt.Sprintf("%s %d", a, rep.Balances[a]))
	}
	h.say("balances: %s (total %d)", strings.Join(parts, ", "), total)

	lost := map[string]bool{}
	for _, o := range h.cfg.Lost {
		lost[o] = true
	}
	var notOnce, wrongWay []string
	for _, o := range rep.Orders {
		if o.Status != "credited" || o.Credits != 1 {
			notOnce = append(notOnce, fmt.Sprintf("%s %s %d times", o.ID, o.Status, o.Credits))
			continue
		}
		want := "notification"
		if lost[o.ID] {
			want = "reconcile"
		}
		switch o.Via[0] {
		case "notification":
			rep.ByNotification++
		case "reconcile":
			rep.ByReconcile++
		}
		if o.Via[0] != want {
			wrongWay = append(wrongWay, o.ID+" by "+o.Via[0])
		}
	}
	rep.check(len(rep.Orders) == h.cfg.Recharges && len(notOnce) == 0, "every order credited exactly once (%d orders)%s",
		len(rep.Orders), detail(notOnce))
	rep.check(total == rep.Recharged.Amount && total == rep.Asked && rep.Recharged.Count == h.cfg.Recharges,
		"balances %d = recharged %d (%d recharges) = asked %d", total, rep.Recharged.Amount, rep.Recharged.Count, rep.Asked)
	rep.check(len(wrongWay) == 0 && rep.ByReconcile == len(h.cfg.Lost), "%d credited by notification + %d by reconcile (the lost %s) = %d%s",
		rep.ByNotification, rep.ByReconcile, list(h.cfg.Lost), rep.ByNotification+rep.ByReconcile, detail(wrongWay))
	var codes500, timeouts, lostFailed int
	for _, d := range rep.Deliveries {
		for _, a := range d.Attempts {
			switch {
			case a.StatusCode == 500:
				codes500++
			case a.StatusCode == 0 && !lost[d.Order]:
				timeouts++
			}
		}
		if lost[d.Order] && d.Status == "failed" && len(d.Attempts) == len(h.cfg.Schedule)+1 {
			lostFailed++
		}
	}
	rep.check(codes500 == h.cfg.FailFirst, "attempts answered 500: %d = the account service's -fail-first %d", codes500, h.cfg.FailFirst)
	if h.cfg.Slow > h.cfg.CallTimeout {
		rep.check(timeouts == h.cfg.SlowFirst, "attempts timed out: %d = the recharge service's -slow-first %d", timeouts, h.cfg.SlowFirst)
	}
	rep.check(lostFailed == len(h.cfg.Lost), "lost notifications failed at the recharge service after all %d attempts: %d of %d",
		len(h.cfg.Schedule)+1, lostFailed, len(h.cfg.Lost))
	rep.check(rep.Reconcile.Error == "" && len(rep.Reconcile.Pending) == 0 && rep.Again.Error == "" && rep.Again.Credited == 0,
		"after reconciling nothing is pending, and reconciling every order again credits nothing (%d)", rep.Again.Credited)
	for _, c := range rep.Checks {
		h.say("  ok   %s", c)
	}
	for _, v := range rep.Violations {
		h.say("  FAIL %s", v)
	}
	return nil
}

// cleanup drops the run's schema in both databases.
func (h *harness) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := drillkit.DropSchema(ctx, h.cfg.PG, h.schema, app.AccountDB, app.RechargeDB); err != nil {
		h.say("cleanup: %v", err)
	}
}

func (h *harness) getJSON(ctx context.Context, url string, v any) error {
	return drillkit.GetJSON(ctx, h.client, url, v)
}

// post POSTs body as JSON (none when nil) and decodes the answer into v, whatever its status.
func (h *harness) post(ctx context.Context, url string, body, v any) (int, error) {
	var r io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, r)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return resp.StatusCode, fmt.Errorf("POST %s: %s: %w", url, resp.Status, err)
	}
	return resp.StatusCode, nil
}

// attempts describes a notification's attempts: "delivered at attempt 2 (500, 200)".
func attempts(d app.Delivery) string {
	codes := make([]string, len(d.Attempts))
	for i, a := range d.Attempts {
		switch {
		case a.StatusCode != 0:
			codes[i] = strconv.Itoa(a.StatusCode)
		case strings.Contains(a.Error, "lost on the way"):
			codes[i] = "lost"
		case strings.Contains(a.Error, "deadline exceeded"):
			codes[i] = fmt.Sprintf("timeout %.2fs", a.LatencyMS/1000)
		default:
			codes[i] = "no answer: " + a.Error
		}
	}
	if d.Status == "delivered" {
		return fmt.Sprintf("delivered at attempt %d (%s)", len(d.Attempts), strings.Join(codes, ", "))
	}
	return fmt.Sprintf("%s after %d attempts (%s)", d.Status, len(d.Attempts), strings.Join(codes, ", "))
}

func list(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return strings.Join(ss, ", ")
}

// detail is ": a, b" for a non-empty list, else "".
func detail(ss []string) string {
	if len(ss) == 0 {
		return ""
	}
	return ": " + strings.Join(ss, ", ")
}

func plural(n int, s string) string {
	if n == 1 {
		return s
	}
	return s + "s"
}
