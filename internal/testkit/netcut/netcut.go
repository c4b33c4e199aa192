// Package netcut cuts a server or a process off the network with iptables, for the tests and
// drills that need a real network cut rather than a proxy in the path (a Patroni node that must
// lose its clients, its standbys and ZooKeeper at once; a relay that must lose its broker).
//
// A cut is an iptables chain of its own, TXKIT-CUT-<name>, jumped to from INPUT and OUTPUT, whose
// rules DROP (no RST: peers see a network that stopped answering, as in a partition):
//   - [Match.Ports] alone: every TCP packet to or from those local ports, both ways (every client
//     of the server listening there is cut off);
//   - [Match.PIDs] alone: every packet those processes send (they are moved, with their children
//     and every child they fork during the cut, into a cgroup v2 of their own, matched by
//     `-m cgroup --path`), and every TCP packet to the connections they have open when the cut
//     begins (their sockets' local ports); new connections cannot open (their SYN is dropped);
//   - both: only what those processes exchange with those ports, both ways.
//
// [Cut.Heal] removes the chain and moves the processes back; it is idempotent, and [New] first
// removes a stale chain of the same name (a test that crashed mid-cut). Rules are machine-wide:
// give each cut a name of its own (the test's, say) and only ports or processes you started.
// It needs root and iptables (deploy/local/up installs it when missing).
//
//	c, err := netcut.New(ctx, "pgha-cut", netcut.Match{Ports: []int{55442, 58001}}, netcut.Match{PIDs: []int{patroni}})
//	if err != nil { ... }
//	defer c.Heal(context.WithoutCancel(ctx))
package netcut

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// ErrInvalid reports a bad name or an empty [Match] given to [New].
var ErrInvalid = errors.New("netcut: invalid cut")

// ErrUnsupported reports a machine where a cut cannot be made: no iptables binary, no cgroup v2
// hierarchy for a [Match] with PIDs.
var ErrUnsupported = errors.New("netcut: unsupported here")

// Match is one part of a cut: local TCP ports, processes, or the processes' traffic with the ports.
type Match struct {
	Ports []int
	PIDs  []int
}

// Cut is a cut in force. Its methods are safe for concurrent use.
type Cut struct {
	name, chain string
	groups      []string       // cgroup v2 directories made for the PIDs matches
	home        map[int]string // pid → the cgroup v2 directory it was in before the cut
	mu          sync.Mutex
	healed      bool
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,18}$`)

// New cuts what ms match, under name (1-18 letters, digits, '-' or '_'), and returns once every
// rule is in force. A stale cut of the same name is removed first. On an error nothing of the cut
// is left in force. ctx bounds the iptables calls.
func New(ctx context.Context, name string, ms ...Match) (*Cut, error) {
	if !nameRE.MatchString(name) {
		return nil, fmt.Errorf("%w: name %q (1-18 of [A-Za-z0-9_-])", ErrInvalid, name)
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("%w: %s: nothing to cut", ErrInvalid, name)
	}
	for _, m := range ms {
		if len(m.Ports) == 0 && len(m.PIDs) == 0 {
			return nil, fmt.Errorf("%w: %s: a Match with neither ports nor pids", ErrInvalid, name)
		}
		for _, p := range m.Ports {
			if p <= 0 || p > 65535 {
				return nil, fmt.Errorf("%w: %s: port %d", ErrInvalid, name, p)
			}
		}
	}
	if _, err := iptablesPath(); err != nil {
		return nil, err
	}
	c := &Cut{name: name, chain: "TXKIT-CUT-" + name, home: map[int]string{}}
	if err := Remove(ctx, name); err != nil {
		return nil, err
	}
	if err := c.build(ctx, ms); err != nil {
		_ = c.Heal(context.WithoutCancel(ctx))
		return nil, err
	}
	return c, nil
}

func (c *Cut) build(ctx context.Context, ms []Match) error {
	if err := iptables(ctx, "-N", c.chain); err != nil {
		return err
	}
	for i, m := range ms {
		var rules [][]string
		if len(m.PIDs) == 0 {
			for _, p := range m.Ports {
				rules = append(rules, []string{"-p", "tcp", "--dport", strconv.Itoa(p)}, []string{"-p", "tcp", "--sport", strconv.Itoa(p)})
			}
		} else {
			group, err := c.group(i, m.PIDs)
			if err != nil {
				return err
			}
			out := []string{"-m", "cgroup", "--path", group}
			if len(m.Ports) > 0 {
				out = append([]string{"-p", "tcp"}, append(out, "-m", "multiport", "--ports", joinPorts(m.Ports))...)
			}
			rules = append(rules, out)
			// What comes to the connections they have open: their sockets' local ports.
			local, err := localPorts(m.PIDs, m.Ports)
			if err != nil {
				return err
			}
			for _, p := range local {
				rules = append(rules, []string{"-p", "tcp", "--dport", strconv.Itoa(p)})
			}
		}
		for _, r := range rules {
			if err := iptables(ctx, append([]string{"-A", c.chain}, append(r, "-j", "DROP")...)...); err != nil {
				return err
			}
		}
	}
	// The jumps last: the chain is complete when it takes effect.
	for _, hook := range []string{"INPUT", "OUTPUT"} {
		if err := iptables(ctx, "-I", hook, "1", "-j", c.chain); err != nil {
			return err
		}
	}
	return nil
}

// Heal ends the cut: the chain and its jumps are removed, the processes moved back to their
// cgroups. It may be called more than once (later calls return nil) and with any ctx; it does
// not stop at the first error but returns them joined.
func (c *Cut) Heal(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.healed {
		return nil
	}
	c.healed = true
	errs := []error{Remove(ctx, c.name)}
	for _, g := range c.groups {
		errs = append(errs, c.release(g))
	}
	return errors.Join(errs...)
}

// Remove removes the chain of a cut named name and its jumps, if there are any (the cleanup of a
// cut whose [Cut] was lost: a crashed test, a drill run by hand). Processes moved into its cgroup
// stay there (harmless once the chain is gone) until [Cut.Heal].
func Remove(ctx context.Context, name string) error {
	chain := "TXKIT-CUT-" + name
	if iptables(ctx, "-n", "-L", chain) != nil {
		return nil // no such chain
	}
	for _, hook := range []string{"INPUT", "OUTPUT"} {
		for iptables(ctx, "-D", hook, "-j", chain) == nil {
		}
	}
	if err := iptables(ctx, "-F", chain); err != nil {
		return err
	}
	return iptables(ctx, "-X", chain)
}

// group makes the cgroup of match i and moves pids and their descendants into it; it returns
// the path iptables' cgroup match takes (relative to the cgroup v2 root).
func (c *Cut) group(i int, pids []int) (string, error) {
	root, err := cgroup2Root()
	if err != nil {
		return "", err
	}
	rel := fmt.Sprintf("txkit-cut-%s-%d", c.name, i)
	dir := filepath.Join(root, rel)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("netcut: %s: %w", c.name, err)
	}
	c.groups = append(c.groups, dir)
	for _, pid := range withDescendants(pids) {
		if _, ok := c.home[pid]; !ok {
			c.home[pid] = filepath.Join(root, ownCgroup(pid))
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return "", fmt.Errorf("netcut: %s: move pid %d into %s: %w", c.name, pid, dir, err)
		}
	}
	return rel, nil
}

// release moves every process of the cgroup dir back (to its cgroup of before the cut; one forked
// during the cut to its parent's) and removes dir.
func (c *Cut) release(dir string) error {
	var errs []error
	for range 5 { // a process may fork while we move the others
		pids, err := readPIDs(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("netcut: %s: %w", c.name, err)
		}
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			home, ok := c.home[pid]
			if !ok {
				home = c.home[parentPID(pid)]
			}
			if home == "" {
				home = filepath.Dir(dir) // the root
			}
			if err := os.WriteFile(filepath.Join(home, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil && running(pid) {
				errs = append(errs, fmt.Errorf("netcut: %s: move pid %d back: %w", c.name, pid, err))
			}
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("netcut: %s: %w", c.name, err))
	}
	return errors.Join(errs...)
}

func iptablesPath() (string, error) {
	if p, err := exec.LookPath("iptables"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/iptables", "/sbin/iptables"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: no iptables (deploy/local/up installs it; or apt-get install iptables)", ErrUnsupported)
}

// iptables runs iptables -w (waiting for the machine-wide xtables lock other cuts may hold).
func iptables(ctx context.Context, args ...string) error {
	bin, err := iptablesPath()
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, bin, append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netcut: iptables %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// cgroup2Root returns where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup on a unified
// system, /sys/fs/cgroup/unified on a hybrid one).
func cgroup2Root() (string, error) {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fs := strings.Fields(s.Text()); len(fs) >= 3 && fs[2] == "cgroup2" {
			return fs[1], nil
		}
	}
	return "", fmt.Errorf("%w: no cgroup v2 hierarchy mounted (needed to cut processes off)", ErrUnsupported)
}

// ownCgroup returns pid's cgroup v2 path (the "0::" line of /proc/PID/cgroup), "/" when unknown.
func ownCgroup(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "/"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	return "/"
}

func readPIDs(file string) ([]int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids, nil
}

func running(pid int) bool { _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); return err == nil }

// parentPID returns pid's parent (0 when gone).
func parentPID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses; the last ')' ends it.
	s := string(b)
	fs := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fs) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(fs[1])
	return n
}

// withDescendants returns pids and every living descendant of them.
func withDescendants(pids []int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			children[parentPID(pid)] = append(children[parentPID(pid)], pid)
		}
	}
	seen := map[int]bool{}
	var all []int
	var walk func(int)
	walk = func(p int) {
		if seen[p] || !running(p) {
			return
		}
		seen[p] = true
		all = append(all, p)
		for _, c := range children[p] {
			walk(c)
		}
	}
	for _, p := range pids {
		walk(p)
	}
	return all
}

// localPorts returns the local ports of the TCP sockets pids (and their descendants) hold open;
// with peers, only of those whose local or remote port is one of them.
func localPorts(pids, peers []int) ([]int, error) {
	inodes := map[string]bool{}
	for _, pid := range withDescendants(pids) {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
			}
		}
	}
	want := map[int]bool{}
	for _, p := range peers {
		want[p] = true
	}
	seen := map[int]bool{}
	var ports []int
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("netcut: %w", err)
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(l)
			if len(fs) < 10 || !inodes[fs[9]] {
				continue
			}
			local, remote := hexPort(fs[1]), hexPort(fs[2])
			if len(peers) > 0 && !want[local] && !want[remote] {
				continue
			}
			if local > 0 && !seen[local] {
				seen[local] = true
				ports = append(ports, local)
			}
		}
	}
	return ports, nil
}

// hexPort returns the port of a /proc/net/tcp address (ADDR:PORT, PORT in hex).
func hexPort(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	n, _ := strconv.ParseInt(addr[i+1:], 16, 32)
	return int(n)
}

func joinPorts(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}
