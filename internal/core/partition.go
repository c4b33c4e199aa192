package core

import (
	"github.com/txkit/txkit/internal/leader"
)

// MaxPartitions bounds [WithPartitions].
const MaxPartitions = leader.MaxPartitions

// WithPartitions splits the log's recovery into parts partitions by a hash of the gid
// (leader.Partition): a [Recoverer] built on the log then leads each partition separately (its
// own election and fence), so that several instances share recovery. A leader's fenced write of a
// transaction ([Log.Record] with a token) passes the fence of the gid's partition. Default 1 (one
// leader recovers everything). Every recoverer of one log must use the same number: the number
// is stored with the log and a recoverer with another one is refused (see [Recoverer.Run]).
func WithPartitions(parts int) LogOption { return func(o *options) { o.partitions = parts } }

// Partitions returns the number of recovery partitions of the log ([WithPartitions]).
func (l *Log) Partitions() int { return l.o.partitions }

// resourceOf returns the fence resource guarding gid's recovery: the log's, or with partitions
// that of gid's partition.
func (l *Log) resourceOf(gid string) string {
	if l.o.partitions < 2 {
		return l.resource()
	}
	return leader.PartitionName(l.resource(), leader.Partition(gid, l.o.partitions))
}
