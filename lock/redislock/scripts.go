package redislock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts. Redis runs a script atomically, so each is one step of the recipe that no other
// client can interleave with. KEYS[1] is the lock key, KEYS[2] its fencing counter (the same hash
// slot: see [group.keys]).

// acquireScript takes the lock with SET NX PX and, only when the SET succeeded, advances the
// fencing counter: n = max(counter + 1, the server's TIME in microseconds), a hybrid logical
// clock that rises on every acquisition and keeps rising when a failover loses the last
// increments (see docs/lock.md, "Redis"). It returns {1, n} when it took the lock, and
// {0, PTTL, value} when someone holds it (value: the holder's, so that Redlock can tell one holder
// of a majority from contenders that split the instances). The counter has no TTL.
//
// A key that already holds our value means this is a repeat of a run whose reply was lost (go-redis
// retries a command when its connection drops): the script answers as the first run did, with
// the counter that run set (nobody else can have advanced it while the key was ours).
//
// Redis replicates a script by its effects (the SETs), so TIME is allowed before a write.
var acquireScript = redis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	local holder = redis.call('GET', KEYS[1])
	if holder == ARGV[1] then
		return {1, tonumber(redis.call('GET', KEYS[2]))}
	end
	return {0, redis.call('PTTL', KEYS[1]), holder or ''}
end
local t = redis.call('TIME')
local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
if n < us then n = us end
redis.call('SET', KEYS[2], string.format('%d', n))
return {1, n}
`)

// raiseScript raises the fencing counter (KEYS[1]) to ARGV[1] if it is below, and returns 1.
// Redlock writes a hold's token back to the instances with it before the hold counts (see
// [group.writeBack]); a counter is never lowered, so running it again, or late, does no harm.
var raiseScript = redis.NewScript(`
if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then
	redis.call('SET', KEYS[1], ARGV[1])
end
return 1
`)

// extendScript sets the TTL of the lock key again if it still holds our value: 1 if it did, 0
// when the key is gone or holds another value.
var extendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// releaseScript deletes the lock key only if it holds our value, and then publishes the lock's
// name on the release channel (ARGV[2], unless it is empty) so that waiters try again at once. 1 if
// it deleted, 0 when the key was gone or held another value (nothing is published then).
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('DEL', KEYS[1])
	if ARGV[2] ~= '' then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
	return 1
end
return 0
`)

// valueSep separates the hold's uuid from the holder data in the lock key's value. A uuid never
// contains it, so the first one ends the uuid and everything after it is the data.
const valueSep = " "

// newValue returns the value of one hold: a random uuid (so that only this hold's release and
// renewals touch the key), then the holder data.
func newValue(id, data string) string { return id + valueSep + data }

// holderData returns the holder data of a lock key's value.
func holderData(value string) string {
	_, data, _ := strings.Cut(value, valueSep)
	return data
}

// reply is one instance's answer to one step.
type reply struct {
	answered bool   // false: no answer within the instance timeout, or the call failed (err)
	ok       bool   // acquired, extended, released
	n        int64  // acquire: the fencing counter when ok, the key's PTTL (ms) when not
	data     string // get: the key's value when ok; acquire: the holder's value when not ok
	err      error
}

// in reports whether the reply is in: answered, or failed.
func (r reply) in() bool { return r.answered || r.err != nil }

// instance is one Redis server of a [Client] (one) or a [Redlock] (several), with its release
// subscription.
type instance struct {
	rdb redis.UniversalClient
	sub *subscription
	ev  evictionCheck
}

func (in *instance) acquire(ctx context.Context, key, counter, value string, ttl time.Duration) reply {
	v, err := acquireScript.Run(ctx, in.rdb, []string{key, counter}, value, ttl.Milliseconds()).Slice()
	if err != nil {
		return reply{err: err}
	}
	bad := reply{err: fmt.Errorf("acquire script returned %v", v)}
	if len(v) < 2 {
		return bad
	}
	ok, okType := v[0].(int64)
	n, nType := v[1].(int64)
	if !okType || !nType {
		return bad
	}
	r := reply{answered: true, ok: ok == 1, n: n}
	if !r.ok {
		if len(v) != 3 {
			return bad
		}
		r.data, _ = v[2].(string)
	}
	return r
}

func (in *instance) raise(ctx context.Context, counter string, n int64) reply {
	if err := raiseScript.Run(ctx, in.rdb, []string{counter}, n).Err(); err != nil {
		return reply{err: err}
	}
	return reply{answered: true, ok: true}
}

func (in *instance) extend(ctx context.Context, key, value string, ttl time.Duration) reply {
	n, err := extendScript.Run(ctx, in.rdb, []string{key}, value, ttl.Milliseconds()).Int64()
	if err != nil {
		return reply{err: err}
	}
	return reply{answered: true, ok: n == 1}
}

func (in *instance) release(ctx context.Context, key, value, channel, name string) reply {
	n, err := releaseScript.Run(ctx, in.rdb, []string{key}, value, channel, name).Int64()
	if err != nil {
		return reply{err: err}
	}
	return reply{answered: true, ok: n == 1}
}
