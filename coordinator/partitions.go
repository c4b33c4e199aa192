package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/lock"
)

// WithPartitions splits the recovery into parts partitions (1..1024) by a hash of the gid, each
// with its own election and fencing token, so that several instances share it: electors returns
// this instance's candidate in partition p's election, and count, when not nil, how many
// instances are live ([ContenderCount], [HeartbeatCount]), so that each leads about parts/N. Run
// then recovers under these elections instead of [WithElector]'s. The number is stored at the
// first Run; Run with another returns an error wrapping [ErrInvalidOption]; New refuses parts
// outside 1..1024 or nil electors the same way. docs/coordinators.md ("Partitioned recovery")
// has the rules and how to change the number.
func WithPartitions(parts int, electors func(p int) (lock.Elector, error), count func(ctx context.Context) (int, error)) Option {
	return func(c *core.Config) {
		c.Partitions = core.Partitioning{Parts: parts, Electors: electors}
		if count != nil {
			c.Partitions.Members = leader.MembersFunc(count)
		}
	}
}

// ContenderCount returns a count of the live instances for [WithPartitions] on ZooKeeper: the
// distinct candidate ids among the contenders (leaders and waiters) of the elections at paths,
// read with insp (sess.Inspector()); an instance counts once its oldest node is two session
// timeouts old, so that a replacement is not counted beside the dead instance it replaces. Give
// every instance its own candidate id. It blocks for the round trips, bounded by its ctx. For
// backends whose waiters are not listed (lock/pglock, lock/redislock) use [HeartbeatCount].
func ContenderCount(insp lock.Inspector, paths ...string) func(ctx context.Context) (int, error) {
	return leader.ContenderMembership(insp, paths...).Members
}

// HeartbeatCount returns a count of the live instances for [WithPartitions] on lock backends
// whose waiters are not listed (lock/pglock, lock/redislock): each instance keeps a row (group,
// id) in the PostgreSQL table schema.table (created on first use; schema "" for the search_path)
// and refreshes it each time it counts (every second), which it does only while its campaigns
// succeed; an instance counts for the others when seen within ttl and a member for ttl. Give it
// the lock's TTL: a dead instance, or one whose campaigns fail, stops counting within ttl. Pass
// group "": the group is then the recovery's fence resource, which every instance of one
// recovery shares and no other job does (a group named by the caller is kept as given). Use an
// id per instance. Unusable names or a ttl that is not positive return an error wrapping
// [ErrInvalidOption].
func HeartbeatCount(pool *pgxpool.Pool, schema, table, group, id string, ttl time.Duration) (func(ctx context.Context) (int, error), error) {
	h, err := leader.NewHeartbeat(pool, schema, table, group, id, ttl)
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w: %w", err, ErrInvalidOption)
	}
	return h.Members, nil
}
