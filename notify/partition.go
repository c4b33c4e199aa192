package notify

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/internal/placement"
	"github.com/txkit/txkit/lock"
)

// WithPartitions splits the receivers into parts partitions (1..1024) by a hash of their names,
// each with its own election and fencing token, so that several notifier instances share the
// deliveries: electors returns this instance's candidate in partition p's election, and count,
// when not nil, how many instances are live ([ContenderCount], [HeartbeatCount]), so that each
// leads about parts/N. Run then delivers under these elections instead of [WithElector]'s. The
// number is stored at the first Run; Run with another returns an error wrapping
// [ErrInvalidOption]; [New] refuses parts outside 1..1024, or more than one without electors, the
// same way. docs/notify.md ("Many leaders") has the rules and how to change the number.
func WithPartitions(parts int, electors func(p int) (lock.Elector, error), count func(ctx context.Context) (int, error)) Option {
	return func(o *options) {
		o.parts, o.partElectors, o.members = parts, electors, nil
		if count != nil {
			o.members = leader.MembersFunc(count)
		}
	}
}

// ContenderCount returns a count of the live notifier instances for [WithPartitions] on
// ZooKeeper: the distinct candidate ids among the contenders (leaders and waiters) of the
// elections at paths, read with insp (sess.Inspector()); an instance counts once its oldest node
// is two session timeouts old, so that a replacement is not counted beside the dead instance it
// replaces. Give every instance its own candidate id. It blocks for the round trips, bounded by
// its ctx.
func ContenderCount(insp lock.Inspector, paths ...string) func(ctx context.Context) (int, error) {
	return leader.ContenderMembership(insp, paths...).Members
}

// resource returns the fence resource of partition p's writes.
func (n *Notifier) resource(p int) string {
	if n.o.parts < 2 {
		return "notify:" + n.name
	}
	return leader.PartitionName("notify:"+n.name, p)
}

// checkPartitions stores the number of partitions with the tables the first time a notifier
// runs and refuses another number (see [WithPartitions]).
func (n *Notifier) checkPartitions(ctx context.Context) error {
	table, _ := pgutil.Table(n.o.schema, n.o.table+"_parts")
	stored, err := placement.StorePartitions(ctx, n.pool, table, n.o.parts)
	if err != nil {
		return fmt.Errorf("notify: run %s (was Migrate run?): %w", n.name, err)
	}
	if stored != n.o.parts {
		return fmt.Errorf("notify: run %s with %d partitions: it delivers with %d (stored in %s); "+
			"changing the number of partitions on a live system is refused: stop every notifier, "+
			"delete from %s, then start them all with the new number: %w", n.name, n.o.parts, stored, table, table, ErrInvalidOption)
	}
	return nil
}

// HeartbeatCount returns a count of the live notifier instances for [WithPartitions] on lock
// backends whose waiters are not listed (lock/pglock, lock/redislock): each instance keeps a row
// (group, id) in the PostgreSQL table schema.table (created on first use; schema "" for the
// search_path) and refreshes it each time it counts (every second), which it does only while its
// campaigns succeed; an instance counts for the others when seen within ttl and a member for
// ttl. Give it the lock's TTL: a dead instance, or one whose campaigns fail, stops counting within
// ttl. Pass group "": the group is then the notifier's fence resource, which every instance of
// one notifier shares and no other job does (a group named by the caller is kept as given). Use
// an id per instance. Unusable names or a ttl that is not positive return an error wrapping
// [ErrInvalidOption].
func HeartbeatCount(pool *pgxpool.Pool, schema, table, group, id string, ttl time.Duration) (func(ctx context.Context) (int, error), error) {
	h, err := leader.NewHeartbeat(pool, schema, table, group, id, ttl)
	if err != nil {
		return nil, fmt.Errorf("notify: %w: %w", err, ErrInvalidOption)
	}
	return h.Members, nil
}
