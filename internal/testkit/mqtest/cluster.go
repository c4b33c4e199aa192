package mqtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txkit/txkit/internal/testkit/tcpproxy"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

// The RocketMQ clusters of deploy/local/rocketmq-cluster (deploy/local/env prints them).
const (
	EnvDLedgerNamesrv   = "TXKIT_ROCKETMQ_DLEDGER_NAMESRV"   // the DLedger group's name server
	EnvDLedgerBrokers   = "TXKIT_ROCKETMQ_DLEDGER_BROKERS"   // its three nodes, comma-separated
	EnvTwoMasterNamesrv = "TXKIT_ROCKETMQ_TWOMASTER_NAMESRV" // the two-master cluster's name server
	EnvTwoMasterBrokers = "TXKIT_ROCKETMQ_TWOMASTER_BROKERS" // master-a, master-b
)

// Cluster is one of the RocketMQ clusters of deploy/local/rocketmq-cluster.
type Cluster struct {
	Name     string   // "dledger" or "two-masters", as the script names it
	Namesrv  []string // its name server
	Brokers  []string // every broker: the DLedger group's nodes n0-n2, or master-a and master-b
	Nodes    []string // the script's names of Brokers, in the same order
	QueuesOn int      // broker groups a topic's queues are spread over: 1 (DLedger), 2
}

// DLedger returns the 3-node DLedger broker group once the script's status says it is whole
// (three nodes, one leader), waiting up to 2 minutes. It skips under -short.
func DLedger(t testing.TB) *Cluster {
	t.Helper()
	return cluster(t, "dledger", EnvDLedgerNamesrv, EnvDLedgerBrokers, []string{"n0", "n1", "n2"}, 1)
}

// TwoMasters returns the two-master cluster once both masters are up and registered.
func TwoMasters(t testing.TB) *Cluster {
	t.Helper()
	return cluster(t, "two-masters", EnvTwoMasterNamesrv, EnvTwoMasterBrokers, []string{"master-a", "master-b"}, 2)
}

func cluster(t testing.TB, name, envNS, envBrokers string, nodes []string, groups int) *Cluster {
	t.Helper()
	c := &Cluster{Name: name, Namesrv: strings.Split(testenv.Lookup(t, envNS), ","),
		Brokers: strings.Split(testenv.Lookup(t, envBrokers), ","), Nodes: nodes, QueuesOn: groups}
	if len(c.Brokers) != len(nodes) {
		t.Fatalf("%s=%v: want %d brokers", envBrokers, c.Brokers, len(nodes))
	}
	var out []byte
	var err error
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		if out, err = c.script(t.Context(), "status", name); err == nil {
			return c
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("the RocketMQ cluster %s is not whole (deploy/local/rocketmq-cluster start %s): %v\n%s", name, name, err, out)
	return nil
}

// script runs deploy/local/rocketmq-cluster with args and returns its combined output.
func (c *Cluster) script(ctx context.Context, args ...string) ([]byte, error) {
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "local", "rocketmq-cluster")
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	return exec.CommandContext(ctx, path, args...).CombinedOutput()
}

// Topic creates a topic of tb's own with 4 queues on every broker of c (every node of the DLedger
// group, each master), returns once the name server routes all of its queues, and deletes it when
// tb ends. groups are consumer groups whose retry topics (%RETRY%GROUP) it creates the same way.
func (c *Cluster) Topic(tb testing.TB, groups ...string) string {
	tb.Helper()
	topic := "txkit-test-" + testenv.Name(tb)
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(c.Namesrv)))
	if err != nil {
		tb.Fatalf("rocketmq admin: %v", err)
	}
	tb.Cleanup(func() { _ = adm.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics := []string{topic}
	for _, g := range groups {
		topics = append(topics, "%RETRY%"+g)
	}
	for i, t := range topics {
		queues := 4
		if i > 0 {
			queues = 1
		}
		for _, b := range c.Brokers {
			if err := adm.CreateTopic(ctx, admin.WithTopicCreate(t), admin.WithBrokerAddrCreate(b),
				admin.WithReadQueueNums(queues), admin.WithWriteQueueNums(queues)); err != nil {
				tb.Fatalf("create topic %s on %s broker %s: %v", t, c.Name, b, err)
			}
		}
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		all := topics
		for _, g := range groups {
			all = append(all, "%DLQ%"+g)
		}
		for _, t := range all {
			for _, b := range c.Brokers {
				_ = adm.DeleteTopic(ctx, admin.WithTopicDelete(t), admin.WithBrokerAddrDelete(b), admin.WithNameSrvAddr(c.Namesrv))
			}
		}
	})
	testenv.Eventually(tb, 20*time.Second, 50*time.Millisecond, func() bool {
		qs, err := adm.FetchPublishMessageQueues(ctx, topic)
		return err == nil && len(qs) == 4*c.QueuesOn
	}, "the %s name server to route the %d queues of topic %s", c.Name, 4*c.QueuesOn, topic)
	return topic
}

// Leader returns the DLedger group's leader: its node name and its broker address.
func (c *Cluster) Leader(tb testing.TB) (node, addr string) {
	tb.Helper()
	out, err := c.script(tb.Context(), "leader")
	if err != nil {
		tb.Fatalf("rocketmq-cluster leader: %v\n%s", err, out)
	}
	node = strings.TrimSpace(string(out))
	for i, n := range c.Nodes {
		if n == node {
			return node, c.Brokers[i]
		}
	}
	tb.Fatalf("rocketmq-cluster leader: %q is no node of %s", node, c.Name)
	return "", ""
}

// Kill sends SIGKILL to node (a process of deploy/local/rocketmq-cluster, never another's) and
// has it started again when tb ends, waiting until the cluster is whole.
func (c *Cluster) Kill(tb testing.TB, node string) {
	tb.Helper()
	out, err := c.script(tb.Context(), "pid", node)
	if err != nil {
		tb.Fatalf("rocketmq-cluster pid %s: %v\n%s", node, err, out)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		tb.Fatalf("rocketmq-cluster pid %s: %q", node, out)
	}
	tb.Cleanup(func() { c.Restart(tb, node) })
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		tb.Fatalf("kill %s (pid %d): %v", node, pid, err)
	}
	for deadline := time.Now().Add(10 * time.Second); processRuns(pid) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // polling, with a deadline
	}
}

// Restart starts node again (deploy/local/rocketmq-cluster start-node) and waits until the cluster
// is whole; it does nothing to a node that runs.
func (c *Cluster) Restart(tb testing.TB, node string) {
	tb.Helper()
	start := time.Now()
	if out, err := c.script(context.Background(), "start-node", node); err != nil {
		tb.Errorf("rocketmq-cluster start-node %s: %v\n%s", node, err, out)
		return
	}
	tb.Logf("%s node %s up again in %v", c.Name, node, time.Since(start).Round(time.Millisecond))
}

func processRuns(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// Routes records the topic routes a client received from its name server through the proxy of
// [WatchRoutes], so that a test can wait for the client's own route poll (rocketmq-client-go polls
// every 30 s) instead of guessing when it happened.
type Routes struct {
	mu     sync.Mutex
	bodies [][]byte // the bodies of the name server's replies that carry a topic route
}

// WatchRoutes returns name servers for a client that reach ns[0] through a proxy recording its
// route replies, and the record; the proxy stops when tb ends.
func WatchRoutes(tb testing.TB, ns []string) ([]string, *Routes) {
	tb.Helper()
	r := &Routes{}
	p, err := tcpproxy.New(ns[0], tcpproxy.WithReplies(func(dst io.Writer, src io.Reader) error {
		return copyFrames(dst, src, func(header, body []byte) ([]byte, []byte) {
			if bytes.Contains(body, []byte(`"queueDatas"`)) {
				r.mu.Lock()
				r.bodies = append(r.bodies, bytes.Clone(body))
				r.mu.Unlock()
			}
			return header, body
		})
	}))
	if err != nil {
		tb.Fatalf("proxy to name server %s: %v", ns[0], err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return []string{p.Addr()}, r
}

// Len returns how many route replies were recorded.
func (r *Routes) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bodies)
}

// Since reports whether a route reply recorded after the first n matches pred.
func (r *Routes) Since(n int, pred func(body []byte) bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.bodies[min(n, len(r.bodies)):] {
		if pred(b) {
			return true
		}
	}
	return false
}
