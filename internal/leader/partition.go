package leader

import (
	"crypto/md5"
	"encoding/binary"
	"strconv"
)

// MaxPartitions bounds the partitions of a [Shards] (and of the components built on it): each
// partition is an election, a fence row and, while led, a term of work on some instance.
const MaxPartitions = 1024

// Partition returns the partition of key among parts partitions: the first four bytes of key's
// MD5 digest, read as a big-endian unsigned integer, modulo parts. It is stable across
// processes, versions and machines, and [PartitionSQL] computes the same number in PostgreSQL,
// so a query can select a partition's rows without a stored column. parts below 2 gives 0.
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

// PartitionName returns the name of partition p under base: base + "/p" + p. [Shards] names each
// partition's election and fence resource this way.
func PartitionName(base string, p int) string { return base + "/p" + strconv.Itoa(p) }
