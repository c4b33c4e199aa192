package exapp

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/locktest"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// OpenLocks names what it cannot use: an unknown backend (listing the known ones), a TTL that is
// not positive, a server variable that is not set, ZooKeeper without credentials.
func TestOpenLocksRefusesBadInput(t *testing.T) {
	t.Setenv(EnvRedis, "")
	t.Setenv(EnvZK, "127.0.0.1:1")
	t.Setenv(EnvZKAuth, "")
	for _, tc := range []struct {
		name, kind string
		opts       []LocksOption
		want       string
	}{
		{"unknown backend", "etcd", nil, "zk, zk-unfair, pg, redis, redlock"},
		{"empty backend", "", nil, `unknown lock backend ""`},
		{"zero ttl", "zk", []LocksOption{WithLockTTL(0)}, "ttl 0s"},
		{"relative zk root", "zk", []LocksOption{WithZKRoot("txkit")}, `zk root "txkit"`},
		{"zk root with a trailing slash", "zk", []LocksOption{WithZKRoot("/txkit/")}, `zk root "/txkit/"`},
		{"unset variable", "redis", nil, EnvRedis + " is not set"},
		{"no zk credentials", "zk", nil, EnvZKAuth + " is not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := OpenLocks(t.Context(), tc.kind, nil, tc.opts...)
			if err == nil {
				l.Close()
				t.Fatal("OpenLocks succeeded")
			}
			if !errors.Is(err, lock.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v; want one wrapping lock.ErrInvalidOption that says %q", err, tc.want)
			}
		})
	}
}

func TestLockNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"stock/sku-1", true},
		{"relay", true},
		{"", false},
		{"/stock/sku-1", false},
		{"stock/", false},
		{"stock//sku-1", false},
	} {
		if err := validName(tc.name); (err == nil) != tc.ok {
			t.Errorf("validName(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// TestIntegrationOpenLocks: on every backend, two processes' Locks (two connections) exclude each
// other on one name, the next holder's token is higher, and an Elector leads and says so. On
// ZooKeeper the locks are under the test's own root, which DeleteTree empties (and testenv.ZKRoot
// deletes at the end). The first Locks registers its metrics (WithLocksRegisterer): the
// acquisitions counted under the backend's label, the election's leader gauge up while it leads
// and down after its resignation.
func TestIntegrationOpenLocks(t *testing.T) {
	testenv.ZK(t)
	testenv.PGURL(t)
	testenv.Redis(t)
	testenv.Redlock(t)
	testenv.RedisSentinel(t)
	for _, kind := range LockKinds() {
		t.Run(kind, func(t *testing.T) {
			ctx := t.Context()
			root := testenv.ZKRoot(t)
			reg := prometheus.NewRegistry()
			var locks [2]*Locks
			for i := range locks {
				opts := []LocksOption{WithZKRoot(root)}
				if i == 0 {
					opts = append(opts, WithLocksRegisterer(reg))
				}
				l, err := OpenLocks(ctx, kind, testenv.Logger(t), opts...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close() })
				locks[i] = l
			}
			name := "exapp-test/" + testenv.Name(t)
			a, err := locks[0].Locker(name)
			if err != nil {
				t.Fatal(err)
			}
			b, err := locks[1].Locker(name)
			if err != nil {
				t.Fatal(err)
			}
			locktest.Handoff(t, a, b)
			if n := gathered(t, reg, "txkit_lock_acquisitions_total", "backend", metricsBackend(kind)); n < 1 {
				t.Fatalf("txkit_lock_acquisitions_total{backend=%q} = %v after a handoff, want >= 1", metricsBackend(kind), n)
			}

			el, err := locks[0].Elector(name+"-leader", "candidate-a")
			if err != nil {
				t.Fatal(err)
			}
			lead, err := el.Campaign(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if id, err := el.Leader(ctx); err != nil || id != "candidate-a" {
				t.Fatalf("Leader = %q, %v; want candidate-a", id, err)
			}
			if n := gathered(t, reg, "txkit_lock_is_leader", "", ""); n != 1 {
				t.Fatalf("txkit_lock_is_leader = %v while leading, want 1", n)
			}
			if err := lead.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
				return gathered(t, reg, "txkit_lock_is_leader", "", "") == 0
			}, "txkit_lock_is_leader back to 0 after Resign")
			if n := gathered(t, reg, "txkit_lock_leadership_changes_total", "", ""); n != 1 {
				t.Fatalf("txkit_lock_leadership_changes_total = %v, want 1", n)
			}

			if err := locks[1].DeleteTree(ctx, "exapp-test"); err != nil {
				t.Fatal(err)
			}
			if kind == "zk" || kind == "zk-unfair" {
				if ok, _, err := locks[1].zk.Conn().Exists(root + "/exapp-test"); err != nil || ok {
					t.Fatalf("%s/exapp-test after DeleteTree: exists %v, %v; want gone", root, ok, err)
				}
			}
		})
	}
}

// gathered sums the values of the counter or gauge name's series on reg whose label (when not "")
// has value.
func gathered(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				match = match || (l.GetName() == label && l.GetValue() == value)
			}
			if match {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
