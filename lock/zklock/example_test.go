package zklock_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
)

// exampleServers returns the ensemble from TXKIT_ZK (set by `make test`).
func exampleServers() []string {
	v := os.Getenv("TXKIT_ZK")
	if v == "" {
		panic("TXKIT_ZK is not set: start the servers with `make up` and run `make test`")
	}
	return strings.Split(v, ",")
}

// exampleAuth returns the digest credentials ("user:password") from TXKIT_ZK_AUTH (set by `make
// test`): a Session without credentials is refused (zklock.ErrNoCredentials).
func exampleAuth() zklock.SessionOption {
	user, password, _ := strings.Cut(os.Getenv("TXKIT_ZK_AUTH"), ":")
	return zklock.WithDigestAuth(user, password)
}

func ExampleMutex() {
	ctx := context.Background()
	sess, path, done, ok := exampleSession(ctx, "lock")
	if !ok {
		return
	}
	defer done()

	a, _ := zklock.NewMutex(sess, path)
	b, _ := zklock.NewMutex(sess, path) // one Mutex value per contender

	first, err := a.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = b.TryLock(ctx)
	fmt.Println("b while a holds:", err != nil)
	_ = a.Unlock(ctx)

	second, err := b.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("token rose:", first.Token().Less(second.Token()))
	_ = b.Unlock(ctx)
	// Output:
	// b while a holds: true
	// token rose: true
}

func ExampleNewElector() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sess, path, done, ok := exampleSession(ctx, "leader")
	if !ok {
		return
	}
	defer done()

	el, _ := zklock.NewElector(sess, path, "relay-1")
	err := el.RunWhileLeader(ctx, func(ctx context.Context, l lock.Leadership) error {
		id, _ := el.Leader(ctx)
		fmt.Println("leading:", id)
		cancel() // a real leader works until ctx ends: leadership lost, or shutdown
		<-ctx.Done()
		return nil
	})
	fmt.Println("returned:", err)
	// Output:
	// leading: relay-1
	// returned: <nil>
}

// exampleSession opens a Session and picks a lock path ending in leaf, under a parent of its own;
// done deletes the nodes and closes the Session. It prints why when it cannot (so that the
// example's output does not match).
func exampleSession(ctx context.Context, leaf string) (sess *zklock.Session, path string, done func(), ok bool) {
	sess, err := zklock.NewSession(ctx, exampleServers(), zklock.WithSessionTimeout(5*time.Second), exampleAuth())
	if err != nil {
		fmt.Println(err)
		return nil, "", nil, false
	}
	path = "/txkit-example/" + uuid.NewString() + "/" + leaf
	return sess, path, func() { deleteAll(sess, path); _ = sess.Close() }, true
}

// deleteAll removes the example's nodes (the path and its parent).
func deleteAll(sess *zklock.Session, path string) {
	c := sess.Conn()
	for p := path; p != "/txkit-example"; p = p[:strings.LastIndex(p, "/")] {
		children, _, _ := c.Children(p)
		for _, ch := range children {
			_ = c.Delete(p+"/"+ch, -1)
		}
		_ = c.Delete(p, -1)
	}
}

func ExampleSession_Inspector() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sess, path, done, ok := exampleSession(ctx, "lock")
	if !ok {
		return
	}
	defer done()

	a, _ := zklock.NewMutex(sess, path, zklock.WithData([]byte("worker-1")))
	b, _ := zklock.NewMutex(sess, path, zklock.WithData([]byte("worker-2")))
	held, err := a.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	next := make(chan lock.Lease, 1)
	go func() {
		l, _ := b.Lock(ctx) // queues behind worker-1
		next <- l
	}()

	in := sess.Inspector() // reads the lock path; takes no part in the lock
	var cs []lock.Contender
	var known bool
	for len(cs) < 2 { // until worker-2's node is there (or ctx ends)
		if cs, known, err = in.Contenders(ctx, path); err != nil {
			fmt.Println(err)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range cs {
		fmt.Printf("%s holder=%v\n", c.ID, c.Holder)
	}
	fmt.Println("waiters known:", known)
	fmt.Println("holder's token is its lease's:", cs[0].Token == held.Token())

	_ = a.Unlock(ctx)
	l := <-next
	fmt.Println("worker-2 got the token it was listed with:", l.Token() == cs[1].Token)
	_ = b.Unlock(ctx)
	cs, _, _ = in.Contenders(ctx, path)
	fmt.Println("contenders after the unlocks:", len(cs))
	// Output:
	// worker-1 holder=true
	// worker-2 holder=false
	// waiters known: true
	// holder's token is its lease's: true
	// worker-2 got the token it was listed with: true
	// contenders after the unlocks: 0
}
