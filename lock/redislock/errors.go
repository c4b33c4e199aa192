package redislock

import "errors"

// ErrEvictionPolicy: a Redis server's maxmemory-policy is not noeviction. Lock keys carry a TTL,
// so every other policy, the volatile-* ones included, may evict a held lock's key under memory
// pressure and hand the lock to a second holder. Lock and TryLock return it, wrapped with the
// server's policy, at once (they do not wait or retry).
var ErrEvictionPolicy = errors.New("redislock: maxmemory-policy is not noeviction")
