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
// The fair recipe (ephemeral-sequential contenders named as Apache Curator's InterProcessMutex, so
// Go and Java processes share a lock path; each waiter watches only its predecessor; creates
// "protected" by a per-attempt uuid) is described in docs/lock.md.
//
// A hold's [lock.Token] is (Epoch, Seq): the czxid of the lock path (monotonic across the
// ensemble) and the sequence of the holder's node (the unfair recipe: its node's czxid, 0), read
// from the listing the recipe makes anyway. An ensemble rebuilt from empty data starts its zxids
// again: reset the fence then (`txkit fence reset`, [Session.LockEpoch]).
//
// [NewSession] wants credentials: with a digest user ([WithDigestAuth]) the nodes it creates are
// that user's only ([CreatorACL](false)); without, it returns [ErrNoCredentials] unless
// [WithInsecureWorldACL] says open nodes are meant. TLS ([WithDialer]), x509 ACLs and what older
// nodes keep: docs/security.md ("ZooKeeper").
package zklock
