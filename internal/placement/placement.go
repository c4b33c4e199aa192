// Package placement says which partition a key belongs to: the outbox places a message by its
// key (or id), the notifier a receiver by its name, and a partitioned coordinator log a
// transaction by its gid, all with [Partition] in Go and [PartitionSQL] in PostgreSQL — the same
// number, stable across processes, versions and machines, so rows already stored keep their
// partition. [StorePartitions] keeps the number of partitions with the tables, because a key's
// partition depends on it. Who leads a partition is package leader's concern.
package placement

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/pgutil"
)

// MaxPartitions bounds the partitions of a set of tables (and of the components that lead them):
// each partition is an election, a fence row and, while led, a term of work on some instance.
const MaxPartitions = 1024

// Partition returns the partition of key among parts partitions: the first four bytes of key's
// MD5 digest, read as a big-endian unsigned integer, modulo parts. [PartitionSQL] computes the
// same number in PostgreSQL, so a query can select a partition's rows without a stored column.
// parts below 2 gives 0.
func Partition(key string, parts int) int {
	if parts < 2 {
		return 0
	}
	sum := md5.Sum([]byte(key))
	return int(binary.BigEndian.Uint32(sum[:4]) % uint32(parts))
}

// PartitionSQL returns a PostgreSQL expression computing [Partition] of the text expression expr
// among parts partitions (a bigint), such as
//
//	PartitionSQL("gid", 12) = "(('x' || substr(md5(gid), 1, 8))::bit(32)::bigint % 12)"
//
// expr is inserted as it is: pass a column name or a placeholder, never user input.
func PartitionSQL(expr string, parts int) string {
	if parts < 2 {
		return "0"
	}
	return "(('x' || substr(md5(" + expr + "), 1, 8))::bit(32)::bigint % " + strconv.Itoa(parts) + ")"
}

// StorePartitions records parts as the number of partitions of a set of tables, in the one-row
// table (a quoted, schema-qualified name) that it creates if need be, unless a number is stored
// already; it returns the stored number, which the caller compares with its own: components
// refuse to run with another number, since a key's partition would differ between instances.
// It is one transaction, serialized with others on the same table by an advisory lock (create
// table if not exists races without it). ctx scopes the call. A schema that does not exist
// returns PostgreSQL's error.
func StorePartitions(ctx context.Context, pool *pgxpool.Pool, table string, parts int) (int, error) {
	var stored int
	err := storeOnce(ctx, pool, table, `partitions integer not null check (partitions between 1 and `+strconv.Itoa(MaxPartitions)+`)`,
		"partitions", []any{parts}, &stored)
	if err != nil {
		return 0, fmt.Errorf("placement: partitions in %s: %w", table, err)
	}
	return stored, nil
}

// StoreShard records that a set of tables is shard index (0-based) of shards, as [StorePartitions]
// records a number of partitions, and returns the stored pair, which the caller compares with its
// own: a key's shard depends on the number of shards, and each database must stay the shard it was.
func StoreShard(ctx context.Context, pool *pgxpool.Pool, table string, index, shards int) (storedIndex, storedShards int, err error) {
	err = storeOnce(ctx, pool, table, `shard integer not null check (shard >= 0),
			shards integer not null check (shard < shards and shards <= `+strconv.Itoa(MaxPartitions)+`)`,
		"shard, shards", []any{index, shards}, &storedIndex, &storedShards)
	if err != nil {
		return 0, 0, fmt.Errorf("placement: shard in %s: %w", table, err)
	}
	return storedIndex, storedShards, nil
}

// storeOnce inserts vals as the columns names (declared by cols) of the one-row table, created if
// need be, unless the row exists, and scans the stored row into dst.
func storeOnce(ctx context.Context, pool *pgxpool.Pool, table, cols, names string, vals []any, dst ...any) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock($1)`, pgutil.MigrateLockKey("txkit/partitions:"+table)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `create table if not exists `+table+` (
			one        boolean     primary key default true check (one),
			`+cols+`,
			set_at     timestamptz not null default now())`); err != nil {
			return err
		}
		params := make([]string, len(vals))
		for i := range vals {
			params[i] = "$" + strconv.Itoa(i+1)
		}
		if _, err := tx.Exec(ctx, `insert into `+table+` (`+names+`) values (`+strings.Join(params, ", ")+`) on conflict do nothing`, vals...); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `select `+names+` from `+table).Scan(dst...)
	})
}
