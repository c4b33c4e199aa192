package zklock_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
)

// countingHandler counts the log records whose message contains a substring.
type countingHandler struct {
	slog.Handler
	substr string
	n      *atomic.Int64
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.substr) {
		h.n.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

// rawConn is a plain go-zookeeper connection of the test's own: a stranger's client.
func rawConn(t *testing.T, servers []string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(servers, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("zk connect: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestIntegrationForeignPersistentChildIgnored: a stranger creates a persistent node named like
// the first contender under an election path. It never goes away, yet candidates must still be
// elected, TryLock must still take a free lock, and Leader must name the real leader.
func TestIntegrationForeignPersistentChildIgnored(t *testing.T) {
	t.Parallel()
	servers, path, stranger := openPath(t, "leader")
	foreign := "_c_" + uuid.NewString() + "-lock-0000000000"
	if _, err := stranger.Create(path+"/"+foreign, []byte("intruder"), zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}

	var warned atomic.Int64
	log := slog.New(countingHandler{Handler: testLogger(t).Handler(), substr: "not a contender", n: &warned})
	s := session(t, servers, zklock.WithLogger(log))
	el, err := zklock.NewElector(s, path, "candidate-a")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	lead, err := el.Campaign(ctx)
	if err != nil {
		t.Fatalf("Campaign with a foreign persistent child under the path: %v", err)
	}
	for range 3 {
		if id, err := el.Leader(ctx); err != nil || id != "candidate-a" {
			t.Fatalf("Leader = %q, %v; want candidate-a", id, err)
		}
	}
	if n := warned.Load(); n != 1 {
		t.Errorf("%d warnings about the foreign node, want 1", n)
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	// A second candidate queued behind the first takes over when the first resigns.
	s2 := session(t, servers)
	a, b := testenvElector(t, s, path, "a"), testenvElector(t, s2, path, "b")
	la, err := a.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	takeOver(t, ctx, s, path, 3, la, b) // 3 children: the foreign node, a's, b's

	// TryLock takes the free lock.
	m := mutex(t, s2, path)
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock of a free lock with a foreign child: %v", err)
	}
	if l.Token().Seq == 0 {
		t.Errorf("token %s carries the foreign node's sequence", l.Token())
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := stranger.Get(path + "/" + foreign); err != nil {
		t.Errorf("the foreign node was touched: %v", err)
	}
	if id, err := el.Leader(ctx); !errors.Is(err, lock.ErrNoLeader) {
		t.Errorf("Leader with only the foreign node left = %q, %v; want ErrNoLeader", id, err)
	}
}

// openPath creates the lock path <test root>/leaf open to all, as txkit's default ACL leaves it,
// and returns the servers, the path and a stranger's connection.
func openPath(t *testing.T, leaf string) ([]string, string, *zk.Conn) {
	t.Helper()
	servers := testenv.ZK(t)
	path := testenv.ZKRoot(t) + "/" + leaf
	stranger := rawConn(t, servers)
	if err := createPath(stranger, path, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	return servers, path, stranger
}

// createPath creates p and its missing parents as persistent nodes with acl.
func createPath(c *zk.Conn, p string, acl []zk.ACL) error {
	cur := ""
	for _, part := range strings.Split(strings.Trim(p, "/"), "/") {
		cur += "/" + part
		if _, err := c.Create(cur, nil, zk.FlagPersistent, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}

// takeOver checks that candidate b, queued behind the leadership la, leads once la resigns: b
// campaigns, and when path has n children (b's node is in) la resigns.
func takeOver(t *testing.T, ctx context.Context, s *zklock.Session, path string, n int, la lock.Leadership, b lock.Elector) {
	t.Helper()
	won := make(chan error, 1)
	go func() {
		lb, err := b.Campaign(ctx)
		if err == nil {
			err = lb.Resign(context.WithoutCancel(ctx))
		}
		won <- err
	}()
	waitChildren(t, s, path, n)
	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatalf("candidate %s after %s resigned: %v", b.ID(), path, err)
	}
}

func testenvElector(t *testing.T, s *zklock.Session, path, id string) lock.Elector {
	t.Helper()
	el, err := zklock.NewElector(s, path, id)
	if err != nil {
		t.Fatal(err)
	}
	return el
}

// TestIntegrationDigestAuthACL: with digest credentials and the creator-only ACL, the nodes txkit
// creates under a lock path cannot be written by a session without the credentials — neither a
// stranger's contender-like child nor the deletion of the leader's node — while sessions with
// them take the lock in turn.
func TestIntegrationDigestAuthACL(t *testing.T) {
	t.Parallel()
	servers := testenv.ZK(t)
	root := testenv.ZKRoot(t)
	path := root + "/acl/leader"
	const user, password = "acl-test", "correct horse battery staple"
	cleanupWithAuth(t, servers, root, user, password)
	authed := func() *zklock.Session {
		return sessionAs(t, servers, zklock.WithDigestAuth(user, password), zklock.WithACL(zklock.CreatorACL(true)...))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	s1 := authed()
	a := testenvElector(t, s1, path, "a")
	la, err := a.Campaign(ctx)
	if err != nil {
		t.Fatalf("Campaign with credentials: %v", err)
	}
	acl, _, err := s1.Conn().GetACL(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(acl) != 2 || acl[0].Scheme != "digest" || !strings.HasPrefix(acl[0].ID, user+":") || acl[0].Perms != zk.PermAll ||
		acl[1] != (zk.ACL{Perms: zk.PermRead, Scheme: "world", ID: "anyone"}) {
		t.Errorf("ACL of %s = %+v, want all for the digest user and read for the world", path, acl)
	}

	// A stranger (no credentials) can read, but not write.
	stranger := rawConn(t, servers)
	names, _, err := stranger.Children(path)
	if err != nil || len(names) != 1 {
		t.Fatalf("stranger's listing = %v, %v; want the leader's node (world read)", names, err)
	}
	if _, err := stranger.Create(path+"/_c_"+uuid.NewString()+"-lock-0000000000", nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("stranger's create under %s = %v, want ErrNoAuth", path, err)
	}
	if err := stranger.Delete(path+"/"+names[0], -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("stranger's delete of the leader's node = %v, want ErrNoAuth", err)
	}
	// So is a txkit session without the credentials: it cannot even contend.
	plain := mutex(t, sessionAs(t, servers, zklock.WithInsecureWorldACL()), path)
	if _, err := plain.TryLock(ctx); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("TryLock without credentials = %v, want ErrNoAuth", err)
	}
	if la.Err() != nil {
		t.Fatalf("leadership lost: %v", la.Err())
	}

	// Another session with the credentials (another process of the same application) takes over.
	b := testenvElector(t, authed(), path, "b")
	takeOver(t, ctx, s1, path, 2, la, b)
}

// TestIntegrationAuthAfterSessionExpires: the credentials are presented again on a reconnection
// within the ZooKeeper session (go-zookeeper resends them) and on the new ZooKeeper session the
// Session opens after losing one (the Session adds them): under a creator-only ACL, either gap
// would make every later Lock fail (the server refuses the "auth" ACL of an unauthenticated
// connection with ErrInvalidACL, and its writes with ErrNoAuth). It cuts the connection through a proxy, so it
// runs without -race (Makefile ZK_RECONNECT_TESTS matches SessionExpires).
func TestIntegrationAuthAfterSessionExpires(t *testing.T) {
	t.Parallel()
	servers := testenv.ZK(t)
	root := testenv.ZKRoot(t)
	path := root + "/lock"
	const user, password = "acl-test", "another long password"
	cleanupWithAuth(t, servers, root, user, password)
	p := testenv.NewProxy(t, servers[0])
	s := sessionAs(t, []string{p.Addr()}, zklock.WithDigestAuth(user, password), zklock.WithACL(zklock.CreatorACL(false)...))
	m := mutex(t, s, path)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	lockUnlock := func(what string) {
		t.Helper()
		if _, err := m.Lock(ctx); err != nil {
			t.Fatalf("Lock %s: %v", what, err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatalf("Unlock %s: %v", what, err)
		}
	}
	lockUnlock("on the first session")
	if _, _, err := rawConn(t, servers).Children(path); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("listing %s without credentials = %v, want ErrNoAuth", path, err)
	}

	p.Cut() // a reconnection within the same ZooKeeper session
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return s.Conn().State() == zk.StateHasSession
	}, "the session to reconnect")
	lockUnlock("after a reconnection")

	p.Down() // longer than the session timeout: the Session gives the ZooKeeper session up
	testenv.Eventually(t, 2*testSessionTimeout, 10*time.Millisecond, func() bool { return s.Stats().Expirations == 1 },
		"the session to be declared lost")
	p.Up()
	lockUnlock("on a new ZooKeeper session")
	if st := s.Stats(); st.Sessions < 2 {
		t.Fatalf("stats %+v: want a second ZooKeeper session", st)
	}
}

// cleanupWithAuth deletes root with the credentials when the test ends, before ZKRoot's own
// cleanup, whose connection has none and could not.
func cleanupWithAuth(t *testing.T, servers []string, root, user, password string) {
	t.Cleanup(func() {
		c, _, err := zk.Connect(servers, 5*time.Second, zk.WithLogInfo(false))
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer c.Close()
		if err := c.AddAuth("digest", []byte(user+":"+password)); err != nil {
			t.Errorf("cleanup: auth: %v", err)
		}
		if err := testenv.DeleteTree(c, root); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}

func TestSessionAuthOptionsValidated(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []zklock.SessionOption
	}{
		{"creator ACL without credentials", []zklock.SessionOption{zklock.WithACL(zklock.CreatorACL(false)...)}},
		{"empty ACL", []zklock.SessionOption{zklock.WithACL()}},
		{"digest user with a colon", []zklock.SessionOption{zklock.WithDigestAuth("a:b", "pw")}},
		{"empty digest user", []zklock.SessionOption{zklock.WithDigestAuth("", "pw")}},
		{"world-writable ACL without WithInsecureWorldACL", []zklock.SessionOption{zklock.WithDigestAuth("u", "pw"), zklock.WithACL(zk.WorldACL(zk.PermAll)...)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := zklock.NewSession(t.Context(), []string{"127.0.0.1:1"}, tc.opts...); !errors.Is(err, lock.ErrInvalidOption) {
				t.Fatalf("NewSession = %v, want ErrInvalidOption", err)
			}
		})
	}
}

// TestNewSessionWithoutCredentials: a Session without credentials would create nodes anyone may
// write, so NewSession refuses it, saying what to do, unless WithInsecureWorldACL says that is
// meant (TestIntegrationInsecureWorldACL).
func TestNewSessionWithoutCredentials(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second) // the address answers nothing
	defer cancel()
	for _, opts := range [][]zklock.SessionOption{
		nil,
		{zklock.WithSessionTimeout(5 * time.Second), zklock.WithACL(zklock.CreatorACL(true)...)},
	} {
		_, err := zklock.NewSession(ctx, []string{"127.0.0.1:1"}, opts...)
		if !errors.Is(err, zklock.ErrNoCredentials) || !errors.Is(err, lock.ErrInvalidOption) {
			t.Fatalf("NewSession without credentials = %v, want ErrNoCredentials and ErrInvalidOption", err)
		}
		if !strings.Contains(err.Error(), "WithDigestAuth") {
			t.Errorf("error %q does not say how to give credentials", err)
		}
	}
}

// TestIntegrationDigestAuthCreatorACLByDefault: a Session with digest credentials and no WithACL
// creates the lock path, its missing parents and its contenders' nodes with the creator-only ACL:
// a session without the credentials can neither read, contend, add a node nor delete the holder's.
func TestIntegrationDigestAuthCreatorACLByDefault(t *testing.T) {
	t.Parallel()
	servers := testenv.ZK(t)
	root := testenv.ZKRoot(t)
	path := root + "/parent/lock"
	s := session(t, servers) // zkenv.Auth only
	m := mutex(t, s, path)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := children(t, s, path)
	if len(names) != 1 {
		t.Fatalf("children of %s = %v, want the holder's node", path, names)
	}
	user, _, _ := strings.Cut(os.Getenv(testenv.EnvZKAuth), ":")
	for _, p := range []string{root, root + "/parent", path, path + "/" + names[0]} {
		acl, _, err := s.Conn().GetACL(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(acl) != 1 || acl[0].Scheme != "digest" || !strings.HasPrefix(acl[0].ID, user+":") || acl[0].Perms != zk.PermAll {
			t.Errorf("ACL of %s = %+v, want all for the digest user %q only", p, acl, user)
		}
	}

	stranger := rawConn(t, servers)
	if _, _, err := stranger.Children(path); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("stranger's listing of %s = %v, want ErrNoAuth", path, err)
	}
	if _, err := stranger.Create(path+"/_c_"+uuid.NewString()+"-lock-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("stranger's contender under %s = %v, want ErrNoAuth", path, err)
	}
	if _, err := stranger.Create(root+"/parent/other", nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("stranger's node beside the lock path = %v, want ErrNoAuth", err)
	}
	if err := stranger.Delete(path+"/"+names[0], -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("stranger's delete of the holder's node = %v, want ErrNoAuth", err)
	}
	open := mutex(t, sessionAs(t, servers, zklock.WithInsecureWorldACL()), path)
	if _, err := open.TryLock(ctx); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("TryLock without credentials = %v, want ErrNoAuth", err)
	}
	if l.Err() != nil {
		t.Fatalf("hold lost: %v", l.Err())
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationInsecureWorldACL: WithInsecureWorldACL still runs a Session without credentials,
// whose nodes are open to all (Curator's default), as it says.
func TestIntegrationInsecureWorldACL(t *testing.T) {
	t.Parallel()
	servers := testenv.ZK(t)
	path := testenv.ZKRoot(t) + "/lock"
	s := sessionAs(t, servers, zklock.WithInsecureWorldACL())
	m := mutex(t, s, path)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := m.Lock(ctx); err != nil {
		t.Fatalf("Lock on an insecure session: %v", err)
	}
	acl, _, err := s.Conn().GetACL(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := zk.WorldACL(zk.PermAll); len(acl) != 1 || acl[0] != want[0] {
		t.Errorf("ACL of %s = %+v, want %+v", path, acl, want)
	}
	if _, err := rawConn(t, servers).Create(path+"/anyone", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Errorf("a stranger's create under the open path: %v", err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationUnreadablePredecessorBacksOff: the waiter's predecessor is a live contender's node
// it may not read (its ACL grants nothing to the waiter). The waiter must keep waiting, but with
// pauses, not by re-reading the ensemble as fast as it answers. The reads made in a fixed window
// are counted (the window bounds the observation; nothing is ordered by it).
func TestIntegrationUnreadablePredecessorBacksOff(t *testing.T) {
	t.Parallel()
	servers, path, other := openPath(t, "lock")
	// Another application's contender, readable only by its own user.
	if _, err := other.Create(path+"/_c_"+uuid.NewString()+"-lock-", nil, zk.FlagEphemeral|zk.FlagSequence,
		zk.DigestACL(zk.PermAll, "other", "secret")); err != nil {
		t.Fatal(err)
	}
	s := session(t, servers)
	m := mutex(t, s, path)
	const window = 2 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), window)
	defer cancel()
	before := s.Stats().Reads
	if _, err := m.Lock(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock behind an unreadable holder = %v, want the deadline", err)
	}
	reads := s.Stats().Reads - before
	t.Logf("%d reads in %v while the predecessor was unreadable", reads, window)
	// With pauses of 50 ms doubling to 1 s: about 6 rounds of a listing and a read.
	if reads > 40 {
		t.Fatalf("%d reads in %v: the waiter retries without pausing", reads, window)
	}
	waitChildren(t, s, path, 1) // our abandoned node is gone
}
