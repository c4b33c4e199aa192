package zklock_test

import (
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock/locktest"
)

// The multi-process tests of the ZooKeeper lock beyond the conformance suite's (see
// conformance_test.go): worker processes are the test binary run again (see TestMain).

// TestIntegrationExclusionWhileZKServerRestarts: one ZooKeeper server of three — the ensemble's
// leader, the harder case: the others must elect a new one — is stopped and started again while 8
// processes contend; the lock keeps working and exclusion holds.
func TestIntegrationExclusionWhileZKServerRestarts(t *testing.T) {
	servers := testenv.ZK(t)
	if len(servers) < 3 {
		t.Fatalf("this test needs the three-node ensemble (%s has %d servers)", testenv.EnvZK, len(servers))
	}
	locktest.RunCounter(t, zkConformance(t, "zk"), locktest.Counter{Procs: 8, Goroutines: 4, Increments: 800,
		During: func(progress func() int64) {
			testenv.Eventually(t, 60*time.Second, 20*time.Millisecond, func() bool { return progress() >= 100 }, "100 increments before the stop")
			n := zkLeader(t, servers)
			zkNode(t, "stop", n)
			at := progress()
			testenv.Eventually(t, 60*time.Second, 20*time.Millisecond, func() bool { return progress() >= at+100 }, "100 increments while zk%d is down", n)
			zkNode(t, "start", n)
			t.Logf("zk%d (the ensemble's leader) stopped at %d increments and started at %d", n, at, progress())
		}})
}

// zkLeader returns the number (1-based position in servers) of the ensemble's leader.
func zkLeader(t *testing.T, servers []string) int {
	t.Helper()
	for i, addr := range servers {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			continue
		}
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = c.Write([]byte("srvr"))
		out, _ := io.ReadAll(c)
		_ = c.Close()
		if strings.Contains(string(out), "Mode: leader") {
			return i + 1
		}
	}
	t.Fatal("no ZooKeeper server says it leads")
	return 0
}

// zkNode runs deploy/local/zk ACTION N.
func zkNode(t *testing.T, action string, n int) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "..", "deploy", "local", "zk"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(script, action, strconv.Itoa(n)).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s %d: %v\n%s", script, action, n, err, out)
	}
	if action == "stop" {
		t.Cleanup(func() { _ = exec.Command(script, "start", strconv.Itoa(n)).Run() })
	}
}

// TestIntegrationLeaderKilled: the leading process is SIGKILLed; another leads within the session
// timeout + 1 s. Twice.
func TestIntegrationLeaderKilled(t *testing.T) {
	t.Parallel()
	locktest.RunLeaderKilled(t, zkConformance(t, "zk"), 2)
}
