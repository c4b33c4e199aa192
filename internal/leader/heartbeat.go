package leader

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/pgutil"
)

// Heartbeat is a [Membership] for lock backends that do not list their waiters (lock/pglock's
// leases, lock/redislock): each instance keeps a row (group, id, since, seen_at) in a PostgreSQL
// table, refreshed each time it counts, and the live instances are those seen within the TTL, by
// PostgreSQL's clock. The table lives with the data the partitions guard (the pool every sharded
// component has anyway), so it needs no other server and no clock agreement between instances.
//
// A member is an instance able to campaign: a [Shards] counts (and so refreshes its row) only
// while its campaigns succeed, and deletes its row while they fail, so an instance that cannot
// campaign is not given a share it would leave unled. An instance counts for the others once it
// has been a member for a TTL (since ≤ now − TTL): a dead instance stops counting within a TTL of
// its death, so an instance that replaces it is never counted beside it, and nobody gives up a
// partition for a newcomer while the dead one's partitions still wait for its leases to expire.
//
// Give it the TTL of the lock's leases, and balance more often than that ([WithBalanceEvery]).
// [Shards.Run] runs [Heartbeat.Run], which deletes the row when the instance stops, so a graceful
// leave counts at once.
//
// Heartbeat is safe for concurrent use by multiple goroutines.
type Heartbeat struct {
	pool         *pgxpool.Pool
	table, plain string // quoted; unquoted for messages
	group, id    string // group "": the counting Shards' fence resource
	ttl          time.Duration

	mu      sync.Mutex
	created bool
}

// NewHeartbeat returns the [Heartbeat] of instance id, in the table called table of schema (""
// for the search_path), which it creates on first use. Its group — a table may hold several — is
// the fence resource of the [Shards] that counts with it when group is "" (the way to use it);
// a non-empty group is kept for the callers that named one. It touches nothing. Empty or
// over-long names, or a TTL that is not positive, return an error wrapping [ErrInvalidOption].
func NewHeartbeat(pool *pgxpool.Pool, schema, table, group, id string, ttl time.Duration) (*Heartbeat, error) {
	names := []string{table, id}
	if schema != "" {
		names = append(names, schema)
	}
	if group != "" {
		names = append(names, group)
	}
	for _, s := range names {
		if err := pgutil.CheckText(s, 63); err != nil {
			return nil, fmt.Errorf("leader: heartbeat name %q: %w: %w", s, err, ErrInvalidOption)
		}
	}
	if pool == nil || ttl <= 0 {
		return nil, fmt.Errorf("leader: heartbeat: nil pool or TTL %v: %w", ttl, ErrInvalidOption)
	}
	quoted, plain := pgutil.Table(schema, table)
	return &Heartbeat{pool: pool, table: quoted, plain: plain, group: group, id: id, ttl: ttl}, nil
}

// groupKey carries the counting Shards' fence resource to a Heartbeat without a group of its own.
type groupKey struct{}

func withGroup(ctx context.Context, group string) context.Context {
	return context.WithValue(ctx, groupKey{}, group)
}

// groupOf returns the heartbeat's group: its own, or the counting Shards' fence resource.
func (h *Heartbeat) groupOf(ctx context.Context) (string, error) {
	if h.group != "" {
		return h.group, nil
	}
	if g, _ := ctx.Value(groupKey{}).(string); g != "" {
		return g, nil
	}
	return "", fmt.Errorf("leader: heartbeat in %s: no group (counted outside a Shards): %w", h.plain, ErrInvalidOption)
}

// Members refreshes this instance's row and returns how many instances of the group count: this
// one, and the others seen within the TTL that have been members for a TTL. A row older than the
// TTL is a new member again. The first call creates the table if need be. ctx bounds the round
// trips.
func (h *Heartbeat) Members(ctx context.Context) (int, error) {
	group, err := h.groupOf(ctx)
	if err != nil {
		return 0, err
	}
	if err := h.create(ctx); err != nil {
		return 0, err
	}
	var n int
	err = h.pool.QueryRow(ctx, `with beat as (
	insert into `+h.table+` as t (grp, id, since, seen_at) values ($1, $2, now(), now())
	on conflict (grp, id) do update set seen_at = now(),
		since = case when t.seen_at > now() - make_interval(secs => $3) then t.since else now() end)
select 1 + count(*) from `+h.table+` where grp = $1 and id <> $2
	and seen_at > now() - make_interval(secs => $3) and since <= now() - make_interval(secs => $3)`,
		group, h.id, h.ttl.Seconds()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("leader: heartbeat in %s: %w", h.plain, err)
	}
	return n, nil
}

// lease returns the TTL: how long a dead instance keeps counting.
func (h *Heartbeat) lease() time.Duration { return h.ttl }

// withdraw deletes this instance's row: it no longer counts (its campaigns fail).
func (h *Heartbeat) withdraw(ctx context.Context) error {
	h.mu.Lock()
	created := h.created
	h.mu.Unlock()
	group, err := h.groupOf(ctx)
	if err != nil || !created {
		return err
	}
	if _, err := h.pool.Exec(ctx, `delete from `+h.table+` where grp = $1 and id = $2`, group, h.id); err != nil {
		return fmt.Errorf("leader: heartbeat in %s: %w", h.plain, err)
	}
	return nil
}

func (h *Heartbeat) create(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.created {
		return nil
	}
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock($1)`, pgutil.MigrateLockKey("txkit/heartbeat:"+h.table)); err != nil {
			return err
		}
		// since came with the campaigning members (issue 27): tables of older versions get it.
		_, err := tx.Exec(ctx, `create table if not exists `+h.table+` (
	grp     text        not null,
	id      text        not null,
	since   timestamptz not null default now(),
	seen_at timestamptz not null,
	primary key (grp, id))`)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `alter table `+h.table+` add column if not exists since timestamptz not null default now()`)
		return err
	})
	if err != nil {
		return fmt.Errorf("leader: heartbeat table %s: %w", h.plain, err)
	}
	h.created = true
	return nil
}

// Run blocks until ctx ends, then deletes this instance's row (with a fresh context bounded by
// 5 s), so that the others stop counting it at once. It returns nil.
func (h *Heartbeat) Run(ctx context.Context) error {
	<-ctx.Done()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = h.withdraw(cctx)
	return nil
}
