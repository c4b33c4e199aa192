package netcut_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/testkit/netcut"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

func TestNewRefusesBadCuts(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  string
		ms   []netcut.Match
	}{
		{"no name", "", []netcut.Match{{Ports: []int{1}}}},
		{"long name", strings.Repeat("x", 19), []netcut.Match{{Ports: []int{1}}}},
		{"chain syntax", "a b", []netcut.Match{{Ports: []int{1}}}},
		{"nothing", "x", nil},
		{"empty match", "x", []netcut.Match{{}}},
		{"bad port", "x", []netcut.Match{{Ports: []int{70000}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := netcut.New(t.Context(), tc.cut, tc.ms...); !errors.Is(err, netcut.ErrInvalid) {
				t.Fatalf("New(%q, %v) = %v, want ErrInvalid", tc.cut, tc.ms, err)
			}
		})
	}
}

// echoServer accepts connections on loopback and echoes what they send, until the test ends.
func echoServer(t *testing.T) (net.Listener, int) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return l, l.Addr().(*net.TCPAddr).Port
}

// echo sends a line on c and reads it back within d.
func echo(c net.Conn, d time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err == nil && line != "ping\n" {
		err = fmt.Errorf("echoed %q", line)
	}
	return err
}

// suffix returns the random 8 characters of testenv.Name (a cut's name is short: an iptables chain's).
func suffix(t *testing.T) string { n := testenv.Name(t); return n[len(n)-8:] }

func newCut(t *testing.T, name string, ms ...netcut.Match) *netcut.Cut {
	t.Helper()
	c, err := netcut.New(t.Context(), name, ms...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Heal(context.Background()) })
	return c
}

// heal heals c, twice (the second a no-op), and checks that its chain is gone.
func heal(t *testing.T, c *netcut.Cut, name string) {
	t.Helper()
	for range 2 {
		if err := c.Heal(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("iptables", "-w", "-S").CombinedOutput(); err != nil || strings.Contains(string(out), "TXKIT-CUT-"+name) {
		t.Fatalf("after Heal, iptables -S (%v):\n%s", err, out)
	}
}

// TestIntegrationNetcutPorts: a cut of a server's port drops an open connection's bytes both ways
// (no error, no answer) and new connections; healed, the same connection carries them again.
func TestIntegrationNetcutPorts(t *testing.T) {
	if testing.Short() {
		t.Skip("iptables")
	}
	_, port := echoServer(t)
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := echo(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	name := "ports-" + suffix(t)
	cut := newCut(t, name, netcut.Match{Ports: []int{port}})
	if err := echo(c, 500*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("an echo through the cut: %v, want a timeout", err)
	}
	if d, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 500*time.Millisecond); err == nil {
		d.Close()
		t.Fatal("a new connection went through the cut")
	}
	heal(t, cut, name)
	// The ping sent during the cut is retransmitted and echoed.
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("after the heal: %q, %v", line, err)
	}
	if err := echo(c, 5*time.Second); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
}

// TestIntegrationNetcutProcess: a cut of a process (a server of its own, python3's http.server)
// drops what it sends and what comes to its sockets: a request gets no answer; healed, it does,
// and the process is back in its cgroup.
func TestIntegrationNetcutProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("iptables")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	srv := exec.Command("python3", "-m", "http.server", fmt.Sprint(port), "--bind", "127.0.0.1", "--directory", t.TempDir())
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	get := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(t.Context(), d)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", port), nil)
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() bool { return get(time.Second) == nil }, "python3 http.server answers")
	home, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", srv.Process.Pid))
	name := "proc-" + suffix(t)
	cut := newCut(t, name, netcut.Match{PIDs: []int{srv.Process.Pid}})
	if err := get(time.Second); err == nil {
		t.Fatal("a request to the cut process was answered")
	}
	heal(t, cut, name)
	if err := get(5 * time.Second); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
	if now, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", srv.Process.Pid)); string(now) != string(home) {
		t.Fatalf("cgroups after the heal:\n%s\nwant\n%s", now, home)
	}
}

// probeScript connects to each port given every 100 ms, sends a line, and prints "PORT ok" when
// it comes back within 0.5 s, "PORT fail" otherwise.
const probeScript = `
import socket, sys, time
while True:
    for p in sys.argv[1:]:
        try:
            s = socket.create_connection(("127.0.0.1", int(p)), timeout=0.5)
            s.sendall(b"ping\n")
            ok = s.recv(5) == b"ping\n"
            s.close()
        except OSError:
            ok = False
        print(p, "ok" if ok else "fail", flush=True)
    time.sleep(0.1)
`

// TestIntegrationNetcutProcessFromPort: a cut of a process's traffic with one server (the relay's
// with its broker): that server stops answering it, another still does, and other clients of
// the cut server are not cut; healed, it answers again.
func TestIntegrationNetcutProcessFromPort(t *testing.T) {
	if testing.Short() {
		t.Skip("iptables")
	}
	_, a := echoServer(t)
	_, b := echoServer(t)
	probe := exec.Command("python3", "-c", probeScript, fmt.Sprint(a), fmt.Sprint(b))
	out, err := probe.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = probe.Process.Kill(); _ = probe.Wait() })
	lines := bufio.NewScanner(out)
	// seen waits (at most 10 s) until the probe reports want for port, after its next report on
	// every port.
	seen := func(port int, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for lines.Scan() && time.Now().Before(deadline) {
			if lines.Text() == fmt.Sprintf("%d %s", port, want) {
				return
			}
		}
		t.Fatalf("the probe did not report %d %s within 10 s (%v)", port, want, lines.Err())
	}
	seen(a, "ok")
	name := "pport-" + suffix(t)
	cut := newCut(t, name, netcut.Match{PIDs: []int{probe.Process.Pid}, Ports: []int{a}})
	seen(a, "fail")
	seen(a, "fail") // a whole round after the cut began
	seen(b, "ok")
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", a))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := echo(c, 5*time.Second); err != nil {
		t.Fatalf("another client of the cut server: %v", err)
	}
	heal(t, cut, name)
	seen(a, "ok")
}
