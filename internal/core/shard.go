package core

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/placement"
)

// shardSalt is put before a gid to hash it to its log shard, so that a transaction's shard
// ([ShardOf]) and its recovery partition within the shard (placement.Partition of the gid itself)
// are independent: without it, with 2 shards of 4 partitions each, shard 0 would hold only
// partitions 0 and 2.
const shardSalt = "txkit/shard\x00"

// ShardOf returns the log shard (0..shards-1) of the transaction gid among shards: an MD5 hash
// (placement.Partition) of the salted gid, the same in every process, version and machine.
// shards below 2 gives 0.
func ShardOf(gid string, shards int) int { return placement.Partition(shardSalt+gid, shards) }

// shardID says which log shard a Base's log is ([Base.SetShard]).
type shardID struct{ index, count int }

// SetShards makes bases[i]'s log shard i (0-based) of len(bases), for a shard router
// (coordinator/shard) built once at start-up: each Base's Begin then makes only gids of its
// shard ([ShardOf]) and refuses a given gid of another shard, its in-doubt resolvers skip other
// shards' gids ([Base.Owns]), and its Migrate and Run store the pair with the log, refusing a log
// stored as another shard or with another count. No base, too many, a base given twice or one
// that is another shard already return an error wrapping [ErrInvalidOption], and then no Base
// is changed. It does not block.
func SetShards(bases []*Base) error {
	n := len(bases)
	if n < 1 || n > placement.MaxPartitions {
		return fmt.Errorf("%d shards: not in 1..%d: %w", n, placement.MaxPartitions, ErrInvalidOption)
	}
	seen := make(map[*Base]int, n)
	for i, b := range bases {
		if j, ok := seen[b]; ok {
			return fmt.Errorf("shards %d and %d are one coordinator: %w", j, i, ErrInvalidOption)
		}
		seen[b] = i
		if old := b.shard.Load(); old != nil && *old != (shardID{i, n}) {
			return b.Errorf("shard %d of %d: it is shard %d of %d already: %w", i, n, old.index, old.count, ErrInvalidOption)
		}
	}
	for i, b := range bases {
		b.shard.CompareAndSwap(nil, &shardID{i, n})
	}
	return nil
}

// Owns reports whether the transaction gid belongs to b's log: always, unless b is a shard
// ([Base.SetShard]) and gid hashes to another.
func (b *Base) Owns(gid string) bool {
	id := b.shard.Load()
	return id == nil || ShardOf(gid, id.count) == id.index
}

// shardGID returns gid when it belongs to b's shard, an error wrapping [ErrInvalidOption] when
// it was given (given) and belongs to another, and else a new UUIDv7 that belongs to it (count
// draws are needed on average: cheap next to the writes of a transaction).
func (b *Base) shardGID(gid string, given bool) (string, error) {
	for {
		if b.Owns(gid) {
			return gid, nil
		}
		if given {
			id := b.shard.Load()
			return "", b.Errorf("begin: gid %.64q: it belongs to log shard %d of %d, this is shard %d: %w",
				gid, ShardOf(gid, id.count), id.count, id.index, ErrInvalidOption)
		}
		u, err := uuid.NewV7()
		if err != nil {
			return "", b.Errorf("gid: %w", err)
		}
		gid = u.String()
	}
}

// checkShard stores b's shard with its log (the one-row table <prefix>shard), the first time,
// and refuses a shard the log is not: another index or another count of shards, which would
// route a gid elsewhere than the instances that wrote it. A Base that is no shard checks nothing.
//
// Changing the number of shards is refused rather than supported: every gid's shard would change,
// and the transactions already logged would be looked for (Status) on another shard.
func (b *Base) checkShard(ctx context.Context) error {
	id := b.shard.Load()
	if id == nil {
		return nil
	}
	l := b.Log
	table := pgx.Identifier{l.o.prefix + "shard"}.Sanitize()
	if l.o.schema != "" {
		table = pgx.Identifier{l.o.schema, l.o.prefix + "shard"}.Sanitize()
	}
	index, count, err := placement.StoreShard(ctx, l.pool, table, id.index, id.count)
	if err != nil {
		return fmt.Errorf("log shard of %s: %w", l.name, err)
	}
	if index != id.index || count != id.count {
		return fmt.Errorf("log %s is shard %d of %d (stored in %s), not shard %d of %d: the shards are given in "+
			"another order or number than when they were first used: %w", l.name, index, count, table, id.index, id.count, ErrInvalidOption)
	}
	return nil
}
