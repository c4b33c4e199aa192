package drillkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/testkit/netcut"
)

// PGFailover is what a drill does to the HA PostgreSQL (deploy/local/pg-ha) while its load runs:
// Failovers times, it SIGKILLs the leader's Patroni and postmaster (pg-ha kill-primary), waits for
// a new leader, and starts the killed node again (it rejoins as a replica) before the next kill,
// so the second kill lands on the promoted node.
type PGFailover struct {
	Failovers int
	// CutLast makes the last failover a network cut instead of a kill: the leader node is cut off
	// with iptables (internal/testkit/netcut: its PostgreSQL and REST ports both ways, and
	// everything its Patroni, postmaster and backends send, ZooKeeper included; no RST), so the
	// standby is promoted and the old primary, its leader key lost, demotes itself; the cut heals
	// once the new primary takes writes and the old one rejoins.
	CutLast bool
	// Async runs the failovers with Patroni's synchronous_mode off (restored when Run returns):
	// what a failover loses with asynchronous replication. Before each kill the primary's WAL
	// senders are stopped for AsyncLag (default 1 s), as a loaded network would leave the standbys
	// behind, and killed with it: the commits it acknowledged meanwhile are on no standby.
	Async    bool
	AsyncLag time.Duration
	Every    time.Duration // pause before each kill
	URL      string        // the HA URL the services use (a database of it)
	// Relayed, when set, reports whether a message enqueued on the database was relayed and
	// consumed after since (register-points: a points row awarded since): the figure "kill → first
	// relayed message".
	Relayed func(ctx context.Context, since time.Time) (bool, error)
	Log     func(format string, args ...any)
}

// FailoverFigures is what one failover cost, from the kill.
type FailoverFigures struct {
	Node        string        // the node killed or cut off (pgN)
	Cut         bool          // a network cut (frozen, then thawed), not a kill
	Promoted    string        // the node that took over
	Unavailable time.Duration // the kill → the first write committed on the new primary (the write-unavailability window)
	FirstRelay  time.Duration // the kill → the first message relayed and consumed (with PGFailover.Relayed)
	InDoubt     int           // prepared transactions (2PC votes) left by the old primary on the new one
	InDoubtEnd  time.Duration // the kill → none of them left
	SyncBack    time.Duration // the kill → a synchronous standby again
}

func (f FailoverFigures) String() string {
	how := "killed"
	if f.Cut {
		how = "cut off (iptables)"
	}
	s := fmt.Sprintf("%s %s, %s promoted: writes back after %v", f.Node, how, f.Promoted, f.Unavailable.Round(time.Millisecond))
	if f.FirstRelay > 0 {
		s += fmt.Sprintf(", first message relayed after %v", f.FirstRelay.Round(time.Millisecond))
	}
	if f.InDoubt > 0 {
		s += fmt.Sprintf(", %d prepared transactions in doubt ended after %v", f.InDoubt, f.InDoubtEnd.Round(time.Millisecond))
	} else {
		s += ", no prepared transaction in doubt"
	}
	return s + fmt.Sprintf(", a (synchronous) standby again after %v", f.SyncBack.Round(time.Millisecond))
}

// pgHA runs deploy/local/pg-ha with args and returns its output's last line.
func pgHA(ctx context.Context, args ...string) (string, error) {
	root, err := ModuleRoot(ctx)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "deploy", "local", "pg-ha"), args...)
	cmd.Env = os.Environ()
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("pg-ha %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("pg-ha %s: %w", strings.Join(args, " "), err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// PGSync sets Patroni's synchronous_mode (pg-ha sync on|off) and waits until the cluster has it.
func PGSync(ctx context.Context, on bool) error {
	v := "off"
	if on {
		v = "on"
	}
	if _, err := pgHA(ctx, "sync", v); err != nil {
		return err
	}
	for {
		_, err := pgHA(ctx, "sync-standby")
		if (err == nil) == on {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Run kills the primary f.Failovers times while the load runs (it stops early when loadDone is
// closed) and returns each failover's figures.
func (f PGFailover) Run(ctx context.Context, loadDone <-chan struct{}) ([]FailoverFigures, error) {
	var figs []FailoverFigures
	if f.Async {
		if err := PGSync(ctx, false); err != nil {
			return nil, err
		}
		f.Log("Patroni synchronous_mode off: asynchronous replication")
		defer func() {
			if err := PGSync(context.WithoutCancel(ctx), true); err != nil {
				f.Log("synchronous_mode back on: %v", err)
			}
		}()
	}
	for k := 0; k < f.Failovers; k++ {
		select {
		case <-ctx.Done():
			return figs, ctx.Err()
		case <-loadDone:
			return figs, nil
		case <-time.After(f.Every):
		}
		fig, err := f.once(ctx, f.CutLast && k == f.Failovers-1)
		if err != nil {
			return figs, err
		}
		f.Log("PostgreSQL failover %d: %s", k+1, fig)
		figs = append(figs, fig)
	}
	return figs, nil
}

func (f PGFailover) once(ctx context.Context, cut bool) (FailoverFigures, error) {
	fig := FailoverFigures{Cut: cut}
	// A (synchronous) standby must be there before a kill: the previous rejoin has finished.
	if err := waitFor(ctx, 60*time.Second, f.standby(ctx)); err != nil {
		f.Log("no standby before the kill")
	}
	if f.Async && !cut {
		lag := f.AsyncLag
		if lag == 0 {
			lag = time.Second
		}
		if _, err := pgHA(ctx, "pause-senders"); err != nil {
			return fig, err
		}
		defer func() { _, _ = pgHA(context.WithoutCancel(ctx), "resume-senders") }() // not killed: let them go on
		select {
		case <-ctx.Done():
			return fig, ctx.Err()
		case <-time.After(lag):
		}
	}
	var (
		n      string
		err    error
		killed time.Time
		nc     *netcut.Cut
	)
	if cut {
		killed, n, nc, err = cutPrimary(ctx)
	} else {
		killed = time.Now()
		n, err = pgHA(ctx, "kill-primary")
	}
	if err != nil {
		return fig, err
	}
	if f.Async && !cut {
		// The dead primary's stopped senders die too: what they held back never reaches a standby.
		if _, err := pgHA(ctx, "drop-senders"); err != nil {
			return fig, err
		}
	}
	thaw := func() {
		if nc != nil {
			if err := nc.Heal(context.WithoutCancel(ctx)); err != nil {
				f.Log("healing the cut of pg%s: %v", n, err)
			}
		}
	}
	defer thaw()
	fig.Node = "pg" + n
	// The first write committed through the HA URL after the kill: a probe row, over a new
	// connection each try (as a pool's new connections would find the new primary).
	if err := waitFor(ctx, 90*time.Second, func() bool { return probeWrite(ctx, f.URL) == nil }); err != nil {
		return fig, fmt.Errorf("no write committed within 90 s of killing %s: %w", fig.Node, err)
	}
	fig.Unavailable = time.Since(killed)
	leader, err := pgHA(ctx, "leader")
	if err != nil {
		return fig, err
	}
	fig.Promoted = "pg" + leader
	thaw() // the cut heals: the old primary finds the leader key taken and demotes itself
	if f.Relayed != nil {
		if err := waitFor(ctx, 90*time.Second, func() bool { ok, err := f.Relayed(ctx, killed); return err == nil && ok }); err == nil {
			fig.FirstRelay = time.Since(killed)
		}
	}
	// The prepared transactions the old primary handed over (prepared before the kill) end when
	// the banks' coordinators resolve them.
	first := true
	if err := waitFor(ctx, 120*time.Second, func() bool {
		c, err := connect(ctx, f.URL)
		if err != nil {
			return false
		}
		defer c.Close(context.WithoutCancel(ctx))
		var left int
		if err := c.QueryRow(ctx, "select count(*) from pg_prepared_xacts where prepared < $1", killed).Scan(&left); err != nil {
			return false
		}
		if first {
			fig.InDoubt, first = left, false
		}
		return left == 0
	}); err != nil {
		return fig, fmt.Errorf("prepared transactions of before the kill of %s still there after 120 s", fig.Node)
	}
	fig.InDoubtEnd = time.Since(killed)
	// The killed node rejoins (pg_rewind or a new clone) and becomes a standby again. A start
	// failed once with Patroni's REST port "already in use" though nothing listened on it: the
	// ports are in Linux's ephemeral range (32768-60999), so an outgoing connection may hold one as
	// its source port for a while. Tried again.
	for try := 1; ; try++ {
		_, err := pgHA(ctx, "start", n)
		if err == nil {
			break
		}
		if try == 3 {
			return fig, err
		}
		f.Log("rejoin of %s: %v; trying again", fig.Node, err)
		select {
		case <-ctx.Done():
			return fig, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	if err := waitFor(ctx, 90*time.Second, f.standby(ctx)); err == nil {
		fig.SyncBack = time.Since(killed)
	}
	return fig, nil
}

// cutPrimary cuts the leader node off the network (netcut): its PostgreSQL and REST ports both
// ways, and every packet its Patroni, postmaster and backends send (ZooKeeper's session, the
// others' REST APIs); it returns when the cut began, the node's number and the cut to heal.
func cutPrimary(ctx context.Context) (time.Time, string, *netcut.Cut, error) {
	n, err := pgHA(ctx, "leader")
	if err != nil {
		return time.Time{}, "", nil, err
	}
	var m [2]netcut.Match
	for i, what := range []string{"ports", "pids"} {
		out, err := pgHA(ctx, what, n)
		if err != nil {
			return time.Time{}, "", nil, err
		}
		for _, f := range strings.Fields(out) {
			v, err := strconv.Atoi(f)
			if err != nil {
				return time.Time{}, "", nil, fmt.Errorf("pg-ha %s %s: %q", what, n, out)
			}
			if i == 0 {
				m[0].Ports = append(m[0].Ports, v)
			} else {
				m[1].PIDs = append(m[1].PIDs, v)
			}
		}
	}
	at := time.Now()
	c, err := netcut.New(ctx, "pgha-pg"+n, m[0], m[1])
	return at, n, c, err
}

// standby returns the condition "the cluster has a synchronous standby" (a running standby when
// Async).
func (f PGFailover) standby(ctx context.Context) func() bool {
	return func() bool {
		if f.Async {
			n, err := pgHA(ctx, "standbys")
			return err == nil && n != "0"
		}
		_, err := pgHA(ctx, "sync-standby")
		return err == nil
	}
}

// connect connects to url, trying its hosts in turn (the HA URL's connect_timeout bounds each).
func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return pgx.Connect(cctx, url)
}

// probeWrite commits one write on the primary url leads to.
func probeWrite(ctx context.Context, url string) error {
	c, err := connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = c.Exec(wctx, "create table if not exists txkit_drill_probe (at timestamptz not null); insert into txkit_drill_probe values (now())")
	return err
}

// waitFor polls cond every 100 ms for at most d.
func waitFor(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
