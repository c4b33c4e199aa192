// Package zklock is txkit's ZooKeeper lock backend: a fair, Curator-compatible lock ([Mutex]),
// leader election on it ([NewElector], a [lock.Election]) that every txkit coordinator runs its
// recovery under by default, and an inspector of both ([Session.Inspector]). They implement the
// interfaces of package lock and pass its conformance suite (lock/locktest).
//
// A [Session] is the connection they share. It reads ZooKeeper's session events through
// go-zookeeper's callback, declares a session lost when the ensemble has not been heard from for
// most of the session timeout (so a holder stops before the servers let the next one start), ends
// every hold of that session at once, and opens a new ZooKeeper session for what comes next.
//
//	sess, err := zklock.NewSession(ctx, []string{"127.0.0.1:22181"}, zklock.WithSessionTimeout(5*time.Second),
//		zklock.WithDigestAuth("orders", password)) // see Security
//	if err != nil {
//		return err
//	}
//	defer sess.Close()
//	el, err := zklock.NewElector(sess, "/myapp/relay/leader", hostname)
//	if err != nil {
//		return err
//	}
//	return el.RunWhileLeader(ctx, func(ctx context.Context, l lock.Leadership) error {
//		return recoverLoop(ctx, l.Token()) // ctx ends the moment leadership is lost
//	})
//
// The fair recipe: each contender creates an ephemeral-sequential child "_c_<uuid>-lock-<seq>"
// under the lock path; the lowest sequence holds the lock; every other contender watches only its
// immediate predecessor, so a release wakes exactly one waiter. The per-attempt uuid makes the
// create "protected": when a connection loss hides the create's answer, the contender finds its
// node again by the uuid — and adopts it only if its session owns it — instead of leaving an
// orphan that would block everyone. The names and ordering are those of Apache Curator's
// InterProcessMutex, so Go and Java processes can share a lock path. Only ephemeral children
// count: a persistent node named like a contender (which only a stranger would create) is skipped
// and logged, so it cannot stop every election on the path (see [Mutex]).
//
// # Fencing tokens
//
// A hold's [lock.Token] is (Epoch, Seq): Epoch is the czxid of the lock path node — the zxid of
// the transaction that created it, which ZooKeeper makes monotonic across the ensemble — and Seq
// the sequence number of the holder's node under it (the unfair recipe: the czxid of its one
// node, Seq 0). The bare sequence restarts at 0 when the lock path is deleted and created again,
// but the new path's czxid is higher, so tokens still rise. Both come from the listing the recipe
// does anyway: a token costs no extra round trip. An ensemble rebuilt from empty data numbers its
// transactions from zero again, so its tokens are below those package fence recorded: reset the
// fence's entries then (`txkit fence reset -resource R -path P`; [Session.LockEpoch]).
//
// # Security
//
// A node open to anyone who reaches the ensemble (zk.WorldACL(zk.PermAll), Curator's default) lets
// a stranger take a lock, delete the holder's node and depose it, or add a candidate to an
// election (and so count as a member of a sharded job). So [NewSession] wants credentials: give
// every process of the application the same digest user, and the nodes it creates are readable
// and writable by that user only ([CreatorACL](false)); without credentials it returns
// [ErrNoCredentials] unless [WithInsecureWorldACL] says open nodes are meant:
//
//	sess, err := zklock.NewSession(ctx, servers,
//		zklock.WithDigestAuth("orders", password), // on every connection and every new ZooKeeper session
//		zklock.WithACL(zklock.CreatorACL(true)...))  // optional: also let the world read (monitoring)
//
// The ACL applies to the nodes the Session creates (the lock path, its missing parents, the
// contenders' nodes), each node's to itself only; nodes that already exist keep theirs (those an
// older txkit made are open to all), so create the lock paths with it, or set their ACL once with
// zkCli's setAcl. go-zookeeper v1.0.4, the client txkit uses, has no SASL (Kerberos): its source
// defines the SASL packet types but no call that sends them.
//
// Digest credentials travel in clear text. ZooKeeper 3.5+ serves TLS on its secureClientPort
// (with the Netty connection factory); connect to it through [WithDialer] with a TLS dialer, which
// also lets the server authenticate the client by certificate (the "x509" ACL scheme: then
// zklock.WithACL(zk.ACL{Perms: zk.PermAll, Scheme: "x509", ID: subjectDN}) instead of credentials):
//
//	tlsDialer := &tls.Dialer{Config: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}
//	sess, err := zklock.NewSession(ctx, []string{"zk1:2281", "zk2:2281", "zk3:2281"},
//		zklock.WithDigestAuth("orders", password),
//		zklock.WithDialer(func(network, addr string, timeout time.Duration) (net.Conn, error) {
//			ctx, cancel := context.WithTimeout(context.Background(), timeout)
//			defer cancel()
//			return tlsDialer.DialContext(ctx, network, addr)
//		}))
package zklock
