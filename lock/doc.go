// Package lock is txkit's coordination layer: the interfaces every txkit component depends on for
// mutual exclusion and leader election — [Locker] (Lock, TryLock, Unlock), [Lease] (a hold with its
// fencing [Token], Done and Context), [Elector] and [Leadership] — the one elector built on any
// Locker ([Election]), and the ZooKeeper backend: a fair, Curator-compatible lock ([Mutex]) and
// leader election on it ([NewElector]) that every txkit coordinator runs its recovery under by
// default. The other backends live beside it: lock/pglock (PostgreSQL lease rows, or advisory
// locks) and lock/redislock (Redis SET NX PX with a watchdog, and Redlock); lock/locktest is the
// conformance suite all of them pass. An [Inspector] reads who holds a lock and who waits, on any
// backend, without taking part ([Session.Inspector] for ZooKeeper). Fencing tokens rise strictly
// from one holder to the next on every backend; tokens of different backends are not comparable, so
// a resource fenced under one backend is reset (`txkit fence reset`) before its leaders move to
// another. The PostgreSQL fence that refuses the writes of a deposed holder is package fence
// (github.com/txkit/txkit/fence), so this package links no database driver.
//
// A [Session] is the connection all of these share. It reads ZooKeeper's session events through
// go-zookeeper's callback, declares a session lost when the ensemble has not been heard from for
// most of the session timeout (so a holder stops before the servers let the next one start), ends
// every hold of that session at once, and opens a new ZooKeeper session for what comes next.
//
// A lock can be lost at any time. Run the work that needs it under [Lease.Context] (or
// [Leadership.Context]) and send [Lease.Token] along with every write it makes, so that the store
// can refuse a holder that was deposed while it was still writing:
//
//	sess, err := lock.NewSession(ctx, []string{"127.0.0.1:22181"}, lock.WithSessionTimeout(5*time.Second),
//		lock.WithDigestAuth("orders", password)) // see Security
//	if err != nil {
//		return err
//	}
//	defer sess.Close()
//	el, err := lock.NewElector(sess, "/myapp/relay/leader", hostname)
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
// # Metrics
//
// [Instrument] wraps any [Locker] to count, on the caller's Prometheus registerer,
// acquisitions and their wait and holds lost before Unlock (txkit_lock_acquisitions_total,
// txkit_lock_wait_seconds, txkit_lock_session_losses_total, by backend);
// [WithElectionRegisterer] makes an election expose txkit_lock_is_leader and
// txkit_lock_leadership_changes_total by election (docs/lock.md has the table).
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
//	sess, err := lock.NewSession(ctx, servers,
//		lock.WithDigestAuth("orders", password), // on every connection and every new ZooKeeper session
//		lock.WithACL(lock.CreatorACL(true)...))  // optional: also let the world read (monitoring)
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
// lock.WithACL(zk.ACL{Perms: zk.PermAll, Scheme: "x509", ID: subjectDN}) instead of credentials):
//
//	tlsDialer := &tls.Dialer{Config: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}
//	sess, err := lock.NewSession(ctx, []string{"zk1:2281", "zk2:2281", "zk3:2281"},
//		lock.WithDigestAuth("orders", password),
//		lock.WithDialer(func(network, addr string, timeout time.Duration) (net.Conn, error) {
//			ctx, cancel := context.WithTimeout(context.Background(), timeout)
//			defer cancel()
//			return tlsDialer.DialContext(ctx, network, addr)
//		}))
package lock
