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
// leases, lock/redislock): each instance keeps a row (group, id, seen_at) in a PostgreSQL table,
// refreshed each time it counts, and the live instances are those seen within the TTL, by
// PostgreSQL's clock. The table lives with the data the partitions guard (the pool every sharded
// component has anyway), so it needs no other server and no clock agreement between instances.
//
// Give it the TTL of the lock's leases, and balance more often than that ([WithBalanceEvery]): a
// dead instance stops counting when its row is older than the TTL, about when its leases expire
// and its partitions move; until then the others count it, lead at most their share, and the
// partitions it held may wait a TTL more. [Shards.Run] runs [Heartbeat.Run], which deletes the row
// when the instance stops, so a graceful leave counts at once.
//
// Heartbeat is safe for concurrent use by multiple goroutines.
type Heartbeat struct {
	pool         *pgxpool.Pool
	table, plain string // quoted; unquoted for messages
	group, id    string
	ttl          time.Duration

	mu      sync.Mutex
	created bool
}

// NewHeartbeat returns the [Heartbeat] of instance id in group (the sharded job's name: a table
// may hold several groups), in the table called table of schema ("" for the search_path), which
// it creates on first use. It touches nothing. Empty or over-long names, or a TTL that is not
// positive, return an error wrapping [ErrInvalidOption].
func NewHeartbeat(pool *pgxpool.Pool, schema, table, group, id string, ttl time.Duration) (*Heartbeat, error) {
	names := []string{table, group, id}
	if schema != "" {
		names = append(names, schema)
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

// Members refreshes this instance's row and returns how many instances of the group were seen
// within the TTL (this one included), in one statement. The first call creates the table if need
// be. ctx bounds the round trips.
func (h *Heartbeat) Members(ctx context.Context) (int, error) {
	if err := h.create(ctx); err != nil {
		return 0, err
	}
	var n int
	err := h.pool.QueryRow(ctx, `with beat as (
	insert into `+h.table+` (grp, id, seen_at) values ($1, $2, now())
	on conflict (grp, id) do update set seen_at = now())
select 1 + count(*) from `+h.table+` where grp = $1 and id <> $2 and seen_at > now() - make_interval(secs => $3)`,
		h.group, h.id, h.ttl.Seconds()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("leader: heartbeat in %s: %w", h.plain, err)
	}
	return n, nil
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
		_, err := tx.Exec(ctx, `create table if not exists `+h.table+` (
	grp     text        not null,
	id      text        not null,
	seen_at timestamptz not null,
	primary key (grp, id))`)
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
	h.mu.Lock()
	created := h.created
	h.mu.Unlock()
	if created {
		_, _ = h.pool.Exec(cctx, `delete from `+h.table+` where grp = $1 and id = $2`, h.group, h.id)
	}
	return nil
}
