package redislock

import (
	"context"
	"fmt"
	"reflect"

	"github.com/redis/go-redis/v9"

	"github.com/txkit/txkit/lock"
)

// Client makes locks on one Redis server (or a primary with replicas behind a failover client):
// SET NX PX with a random value per hold, compare-and-delete release, a renewing watchdog, a
// fencing counter, and waiters woken by a release message. It holds one pub/sub subscription,
// started by the first waiter and shared by all its mutexes. Client is safe for concurrent use by
// multiple goroutines.
type Client struct {
	g *group
}

// New returns a Client on client, a go-redis client the caller keeps and closes (after
// [Client.Close]). It does not talk to Redis. A nil client, or options that cannot work together
// (a TTL below 1 ms, a renewal interval not below the TTL minus the drift allowance), return an
// error wrapping [lock.ErrInvalidOption].
//
// go-redis applies a ctx's deadline to socket reads only with Options.ContextTimeoutEnabled;
// otherwise a server that stops answering holds a call for ReadTimeout (3 s by default). The
// locks stay safe either way (a hold's local deadline does not wait for the call), but set
// ContextTimeoutEnabled or a ReadTimeout well below the TTL so that a renewal can be retried
// before the deadline.
func New(client redis.UniversalClient, opts ...Option) (*Client, error) {
	if isNil(client) {
		return nil, fmt.Errorf("redislock: nil redis client: %w", lock.ErrInvalidOption)
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.finish("redislock"); err != nil {
		return nil, err
	}
	return &Client{g: newGroup("redislock", []*instance{{rdb: client}}, o)}, nil
}

func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// NewMutex returns a [Mutex] on name (1 to [MaxNameLen] bytes; the key is the prefix followed by
// "{name}"). It does not talk to Redis. Each goroutine or component that must exclude the others
// needs a Mutex value of its own; a value is reentrant.
func (c *Client) NewMutex(name string, opts ...MutexOption) (*Mutex, error) {
	m, err := c.g.newMutex(name, opts...)
	if err != nil {
		return nil, err
	}
	return &Mutex{m: m}, nil
}

// NewElector returns a candidate with the given id (not empty, at most [MaxDataLen] bytes) in the
// election name: a [lock.Election] on a [Mutex] whose holds carry the id, so that Leader reads
// it from the key. opts configure the Election (such as lock.WithElectionRegisterer). It does not
// talk to Redis.
func (c *Client) NewElector(name, id string, opts ...lock.ElectionOption) (*lock.Election, error) {
	return c.g.newElector(name, id, opts)
}

// Close ends every hold of the Client's mutexes (their leases end with an error wrapping
// [lock.ErrLockLost] and [lock.ErrClosed], and their keys are released), stops the release
// subscription and every goroutine, and waits for them. After Close, Lock and TryLock return an
// error wrapping [lock.ErrClosed]. It does not close the go-redis client. Calling it again does
// nothing and returns nil.
func (c *Client) Close() error { return c.g.close() }

// Redlock makes locks on N independent Redis servers with antirez's Redlock algorithm: a hold
// exists when a majority (N/2+1) of the instances took it within its validity time. It tolerates
// the loss of N−(N/2+1) instances: one of three, two of five. An even N buys nothing over N−1
// (four instances need three, and still tolerate only one loss) and two instances tolerate
// none. See docs/lock.md ("Redis") for the algorithm's caveats. Redlock is safe for concurrent
// use by multiple goroutines.
type Redlock struct {
	g *group
}

// NewRedlock returns a Redlock on clients, one per independent Redis server (not replicas of one
// another; three or five are the usual numbers). The caller keeps and closes the clients. It does
// not talk to Redis. No clients, a nil client, the same client twice, or options that cannot work
// together return an error wrapping [lock.ErrInvalidOption].
func NewRedlock(clients []redis.UniversalClient, opts ...Option) (*Redlock, error) {
	if len(clients) == 0 {
		return nil, fmt.Errorf("redislock: redlock: no redis clients: %w", lock.ErrInvalidOption)
	}
	seen := map[redis.UniversalClient]bool{}
	inst := make([]*instance, len(clients))
	for i, c := range clients {
		if isNil(c) {
			return nil, fmt.Errorf("redislock: redlock: redis client %d is nil: %w", i, lock.ErrInvalidOption)
		}
		if seen[c] {
			return nil, fmt.Errorf("redislock: redlock: redis client %d appears twice (it would count twice towards a majority): %w", i, lock.ErrInvalidOption)
		}
		seen[c] = true
		inst[i] = &instance{rdb: c}
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.finish("redislock: redlock"); err != nil {
		return nil, err
	}
	return &Redlock{g: newGroup("redislock: redlock", inst, o)}, nil
}

// NewMutex returns a [RedlockMutex] on name (1 to [MaxNameLen] bytes). It does not talk to Redis.
func (r *Redlock) NewMutex(name string, opts ...MutexOption) (*RedlockMutex, error) {
	m, err := r.g.newMutex(name, opts...)
	if err != nil {
		return nil, err
	}
	return &RedlockMutex{m: m}, nil
}

// NewElector returns a candidate with the given id in the election name, on a [RedlockMutex]
// whose holds carry the id; Leader reports the id a majority of the instances agree on. opts
// configure the Election (such as lock.WithElectionRegisterer).
func (r *Redlock) NewElector(name, id string, opts ...lock.ElectionOption) (*lock.Election, error) {
	return r.g.newElector(name, id, opts)
}

// Close ends every hold of the Redlock's mutexes and releases their keys, stops the
// subscriptions and every goroutine; as [Client.Close]. It does not close the go-redis clients.
func (r *Redlock) Close() error { return r.g.close() }

func (g *group) newElector(name, id string, opts []lock.ElectionOption) (*lock.Election, error) {
	if id == "" {
		return nil, fmt.Errorf("%s: elector on %s: empty candidate id: %w", g.what, name, lock.ErrInvalidOption)
	}
	m, err := g.newMutex(name, WithData(id))
	if err != nil {
		return nil, err
	}
	holder := func(ctx context.Context) (string, error) { return g.holder(ctx, name) }
	return lock.NewElection(m, name, id, holder, nil, g.o.log, opts...)
}

// Mutex is a lock on one name on a single Redis server ([Client]). It implements [lock.Locker]:
// Lock blocks until the lock is held or ctx ends (then nothing is left behind and ctx's error is
// returned), waiting in no FIFO order; TryLock returns an error wrapping [lock.ErrLocked] when
// another owner holds it. Both return an error wrapping [ErrEvictionPolicy] at once, taking
// nothing, while the server's maxmemory-policy is not noeviction. A Mutex value is reentrant: each
// Lock or TryLock needs its Unlock. The hold can be lost at any time (a renewal that finds the key
// gone, or no renewal before the local deadline): [lock.Lease.Done] is closed and
// [lock.Lease.Context] cancelled with a cause wrapping [lock.ErrLockLost], and Lock returns an
// error until Unlock is called. Each hold's [lock.Token] is {Seq: n}, above every earlier hold's.
// How it waits, renews and mints tokens: docs/lock.md ("Redis").
//
// Mutex is safe for concurrent use by multiple goroutines (they share its hold).
type Mutex struct {
	m *mutex
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.m.name }

// Lock blocks until the lock is held or ctx ends and returns the hold's Lease; ctx scopes only the
// wait. See [Mutex].
func (m *Mutex) Lock(ctx context.Context) (lock.Lease, error) { return m.m.Lock(ctx) }

// TryLock takes the lock if it is free and returns at once; an error wrapping [lock.ErrLocked]
// when another owner holds it. ctx bounds the round trip.
func (m *Mutex) TryLock(ctx context.Context) (lock.Lease, error) { return m.m.TryLock(ctx) }

// Unlock releases one hold; the last one ends the Lease and deletes the key if it still holds
// this hold's value (compare-and-delete, never a newer holder's key), then publishes the release.
// It uses a context derived from ctx without its cancellation, bounded to a second, so a
// cancelled ctx does not leave the key behind; if Redis does not answer, the error says so and
// the key expires with its TTL. Unlock of a Mutex that holds nothing returns nil; after
// [Client.Close] (which released the keys) Unlock only forgets the hold.
func (m *Mutex) Unlock(ctx context.Context) error { return m.m.Unlock(ctx) }

// RedlockMutex is a lock on one name on the instances of a [Redlock]. It keeps the contract of
// [Mutex] with majorities: Lock sends SET NX PX to every instance in parallel (each bounded by an
// instance timeout of a tenth of the TTL, at most 1 s) and holds the lock when a majority took it
// and the validity (TTL − elapsed − drift) is positive; it stops waiting for the others as soon
// as a majority has answered either way. Otherwise it releases on all and tries again when a
// release message comes, when the keys of another owner's majority expire, or, when contenders
// split the instances, at once if it took the first instance to answer and after a random pause
// of 5–50 ms if not. The watchdog renews on all instances, and the hold is lost when a majority no
// longer confirms it before the local deadline, or at once when so many instances say the key is
// gone that no majority can hold it. Unlock releases on all and returns once every instance
// answered (or the instance timeout, at least 1 s, passed); it fails only when no majority did.
// The token is the highest of the fencing counters of the majority that granted the hold, written
// back to a majority of the instances before Lock returns, so that it rises from holder to holder
// even when one instance's counter ran ahead (see docs/lock.md, "Redis"). TryLock
// with too few instances answering returns their errors (not [lock.ErrLocked]).
//
// RedlockMutex is safe for concurrent use by multiple goroutines (they share its hold).
type RedlockMutex struct {
	m *mutex
}

// Name returns the lock's name.
func (m *RedlockMutex) Name() string { return m.m.name }

// Lock blocks until a majority of the instances grant the lock or ctx ends; see [RedlockMutex]
// and [Mutex.Lock].
func (m *RedlockMutex) Lock(ctx context.Context) (lock.Lease, error) { return m.m.Lock(ctx) }

// TryLock makes one attempt on every instance; an error wrapping [lock.ErrLocked] when another
// owner holds the lock.
func (m *RedlockMutex) TryLock(ctx context.Context) (lock.Lease, error) { return m.m.TryLock(ctx) }

// Unlock releases one hold; the last one deletes the key on every instance where it still holds
// this hold's value; see [Mutex.Unlock]. It returns an error only when fewer than a majority of
// the instances answered (the lock may then stay taken until the TTL); the keys left on the
// others expire with their TTL, and are logged.
func (m *RedlockMutex) Unlock(ctx context.Context) error { return m.m.Unlock(ctx) }

var (
	_ lock.Locker = (*Mutex)(nil)
	_ lock.Locker = (*RedlockMutex)(nil)
)
