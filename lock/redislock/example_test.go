package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/redislock"
)

// exampleAddrs returns the addresses in the environment variable env (set by `make test`), or
// prints why there are none (so that the example's output does not match).
func exampleAddrs(env string) []string {
	v := os.Getenv(env)
	if v == "" {
		fmt.Println(env + " is not set: start the servers with `make up`")
		return nil
	}
	return strings.Split(v, ",")
}

// exampleClient returns a Client on the server of TXKIT_REDIS (set by `make test`) and its go-redis
// client; done closes both, the Client first. It prints why when it cannot (so that the example's
// output does not match).
func exampleClient(opts ...redislock.Option) (locks *redislock.Client, rdb *redis.Client, done func(), ok bool) {
	addrs := exampleAddrs("TXKIT_REDIS")
	if addrs == nil {
		return nil, nil, nil, false
	}
	rdb = redis.NewClient(&redis.Options{Addr: addrs[0], ContextTimeoutEnabled: true})
	locks, err := redislock.New(rdb, opts...)
	if err != nil {
		fmt.Println(err)
		_ = rdb.Close()
		return nil, nil, nil, false
	}
	return locks, rdb, func() { _ = locks.Close(); _ = rdb.Close() }, true
}

// exampleRedlock returns a Redlock on the servers of TXKIT_REDLOCK and their go-redis clients;
// done closes them all, the Redlock first. It prints why when it cannot.
func exampleRedlock(opts ...redislock.Option) (rl *redislock.Redlock, clients []redis.UniversalClient, done func(), ok bool) {
	addrs := exampleAddrs("TXKIT_REDLOCK")
	if addrs == nil {
		return nil, nil, nil, false
	}
	closeAll := func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	for _, a := range addrs {
		clients = append(clients, redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true}))
	}
	rl, err := redislock.NewRedlock(clients, opts...)
	if err != nil {
		fmt.Println(err)
		closeAll()
		return nil, nil, nil, false
	}
	return rl, clients, func() { _ = rl.Close(); closeAll() }, true
}

func ExampleClient_NewMutex() {
	ctx := context.Background()
	locks, rdb, done, ok := exampleClient(redislock.WithTTL(5 * time.Second))
	if !ok {
		return
	}
	defer done()

	name := "example-" + uuid.NewString()
	defer rdb.Del(ctx, "txkit:lock:{"+name+"}:fence")
	a, _ := locks.NewMutex(name)
	b, _ := locks.NewMutex(name) // one Mutex value per contender

	first, err := a.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = b.TryLock(ctx)
	fmt.Println("b while a holds:", errors.Is(err, lock.ErrLocked))
	_ = a.Unlock(ctx) // compare-and-delete, then a release message wakes the waiters

	second, err := b.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("token rose:", first.Token().Less(second.Token()))
	fmt.Println("first lease ended:", first.Err() != nil)
	_ = b.Unlock(ctx)
	// Output:
	// b while a holds: true
	// token rose: true
	// first lease ended: true
}

func ExampleRedlock_NewMutex() {
	ctx := context.Background()
	rl, clients, done, ok := exampleRedlock(redislock.WithTTL(5 * time.Second)) // three independent servers
	if !ok {
		return
	}
	defer done()

	name := "example-" + uuid.NewString()
	defer func() {
		for _, c := range clients {
			c.Del(ctx, "txkit:lock:{"+name+"}:fence")
		}
	}()
	m, _ := rl.NewMutex(name)
	l, err := m.Lock(ctx) // granted by a majority of the three, within its validity time
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held:", l.Err() == nil, "token set:", !l.Token().IsZero())

	other, _ := rl.NewMutex(name)
	_, err = other.TryLock(ctx)
	fmt.Println("other while held:", errors.Is(err, lock.ErrLocked))
	_ = m.Unlock(ctx) // on every instance
	l2, err := other.TryLock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("token rose:", l.Token().Less(l2.Token()))
	_ = other.Unlock(ctx)
	// Output:
	// held: true token set: true
	// other while held: true
	// token rose: true
}

func ExampleClient_NewElector() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	locks, rdb, done, ok := exampleClient()
	if !ok {
		return
	}
	defer done()

	name := "example-election-" + uuid.NewString()
	defer rdb.Del(ctx, "txkit:lock:{"+name+"}:fence")
	el, err := locks.NewElector(name, "node-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	err = el.RunWhileLeader(ctx, func(ctx context.Context, l lock.Leadership) error {
		id, _ := el.Leader(ctx) // read from the lock key's value
		fmt.Println("leader:", id)
		cancel() // done: RunWhileLeader resigns and returns
		return nil
	})
	fmt.Println("returned:", err)
	// Output:
	// leader: node-1
	// returned: <nil>
}

func ExampleClient_Inspector() {
	ctx := context.Background()
	locks, rdb, done, ok := exampleClient()
	if !ok {
		return
	}
	defer done()

	name := "example-inspect-" + uuid.NewString()
	defer rdb.Del(ctx, "txkit:lock:{"+name+"}:fence")
	m, _ := locks.NewMutex(name, redislock.WithData("worker-1"))
	l, err := m.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	in := locks.Inspector()
	cs, known, err := in.Contenders(ctx, name) // one MGET of the key and its fencing counter
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s holder=%v token is its lease's: %v\n", cs[0].ID, cs[0].Holder, cs[0].Token == l.Token())
	fmt.Println("waiters known:", known)
	_ = m.Unlock(ctx)
	cs, _, _ = in.Contenders(ctx, name)
	fmt.Println("contenders after the unlock:", len(cs))
	// Output:
	// worker-1 holder=true token is its lease's: true
	// waiters known: false
	// contenders after the unlock: 0
}

func ExampleRedlock_Inspector() {
	ctx := context.Background()
	rl, clients, done, ok := exampleRedlock() // three independent servers
	if !ok {
		return
	}
	defer done()

	name := "example-inspect-" + uuid.NewString()
	defer func() {
		for _, c := range clients {
			c.Del(ctx, "txkit:lock:{"+name+"}:fence")
		}
	}()
	el, _ := rl.NewElector(name, "node-1")
	lead, err := el.Campaign(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	cs, _, err := rl.Inspector().Contenders(ctx, name) // the value a majority of the instances hold
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s holder=%v token at least its lease's: %v\n", cs[0].ID, cs[0].Holder, !cs[0].Token.Less(lead.Token()))
	_ = lead.Resign(ctx)
	// Output:
	// node-1 holder=true token at least its lease's: true
}
