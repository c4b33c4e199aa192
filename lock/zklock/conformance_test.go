package zklock_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/locktest"
	"github.com/txkit/txkit/lock/zklock"
)

// zkBackend builds the ZooKeeper backend called name — "zk" (the fair recipe, with its Elector)
// or "zk-unfair" ([zklock.WithUnfair]; no Elector: elections always use the fair recipe) — on the
// configuration "<root path> <server>,<server>,...". Lock names become children of the root.
// Worker processes build it through TestMain.
func zkBackend(name, config string) (locktest.Backend, error) {
	root, list, ok := strings.Cut(config, " ")
	if !ok {
		return locktest.Backend{}, fmt.Errorf("zk backend config %q: want \"<root> <servers>\"", config)
	}
	servers := strings.Split(list, ",")
	var opts []zklock.Option
	switch name {
	case "zk":
	case "zk-unfair":
		opts = append(opts, zklock.WithUnfair())
	default:
		return locktest.Backend{}, fmt.Errorf("no ZooKeeper backend called %q", name)
	}
	return locktest.Backend{
		Name:   name,
		Config: config,
		Expiry: testSessionTimeout,
		ConnectVia: func(ctx context.Context, dial locktest.DialFunc) (*locktest.Conn, error) {
			s, err := zklock.NewSession(ctx, servers, zklock.WithSessionTimeout(testSessionTimeout),
				zklock.WithDigestAuth(zkenv.Digest()), // worker processes inherit it
				zklock.WithDialer(func(network, addr string, timeout time.Duration) (net.Conn, error) {
					ctx, cancel := context.WithTimeout(context.Background(), timeout)
					defer cancel()
					return dial(ctx, network, addr)
				}))
			if err != nil {
				return nil, err
			}
			c := &locktest.Conn{
				Locker:    func(n string) (lock.Locker, error) { return zklock.NewMutex(s, root+"/"+n, opts...) },
				Close:     s.Close,
				Inspector: rootedInspector{root: root, in: s.Inspector(opts...)},
			}
			if name == "zk" {
				c.Elector = func(n, id string) (lock.Elector, error) { return zklock.NewElector(s, root+"/"+n, id) }
			}
			return c, nil
		},
	}, nil
}

// zkConformance returns the ZooKeeper backend called name for the test, under a path of its own.
func zkConformance(t *testing.T, name string) locktest.Backend {
	t.Helper()
	b, err := zkBackend(name, testenv.ZKRoot(t)+" "+strings.Join(testenv.ZK(t), ","))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestIntegrationConformance runs the lock conformance suite (package lock/locktest) against the
// ZooKeeper lock, fair and unfair.
func TestIntegrationConformance(t *testing.T) {
	for _, name := range []string{"zk", "zk-unfair"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			locktest.Run(t, zkConformance(t, name))
		})
	}
}

// rootedInspector reads the suite's locks by name: the paths under root that the backend's Lockers
// and Electors use.
type rootedInspector struct {
	root string
	in   lock.Inspector
}

func (r rootedInspector) Contenders(ctx context.Context, name string) ([]lock.Contender, bool, error) {
	return r.in.Contenders(ctx, r.root+"/"+name)
}
