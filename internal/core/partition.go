package core

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/placement"
	"github.com/txkit/txkit/lock"
)

// MaxPartitions bounds [WithPartitions].
const MaxPartitions = placement.MaxPartitions

// WithPartitions splits the log's recovery into parts partitions by a hash of the gid
// (placement.Partition): a [Recoverer] built on the log then leads each partition separately (its
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
	return leader.PartitionName(l.resource(), placement.Partition(gid, l.o.partitions))
}

// NewPartitionedRecoverer returns a [Recoverer] of a partitioned log ([WithPartitions]): each
// partition p has its own election (electors(p), called once per partition here) and fence
// resource, and its leader claims and drives only the transactions whose gid falls in p
// (placement.Partition). members counts the instances so that each leads about P/N partitions
// (leader.Shards); nil leaves the partitions to whoever wins them. Partition 0's leader also
// runs the retention job and the leader jobs ([WithLeaderJob]) and sets the backlog gauges.
// [WithConcurrency] bounds the drives of all the partitions it leads together, and
// [WithBatchSize] each partition's claim. It
// does not touch the database or the lock backend. It returns an error wrapping
// [ErrInvalidOption] when an argument or option is unusable.
func NewPartitionedRecoverer(l *Log, electors func(p int) (lock.Elector, error), members leader.Membership,
	drivers map[Kind]Driver, opts ...RecoverOption) (*Recoverer, error) {
	if electors == nil {
		return nil, fmt.Errorf("core: recoverer: nil elector func: %w", ErrInvalidOption)
	}
	return newRecoverer(l, drivers, opts, func(r *Recoverer, lopts []leader.Option) (recoveryJob, error) {
		if members != nil {
			lopts = append(lopts, leader.WithMembership(members))
		}
		if r.o.metrics.reg != nil {
			lopts = append(lopts, leader.WithRegisterer(r.o.metrics.reg))
		}
		return leader.NewShards(l.Partitions(), electors, l.pool, l.fence, l.resource(), r.recoverLoop, lopts...)
	})
}

// claimAnchor is the condition of the claim (queries.sql) after which a partitioned claim adds
// its partition's.
const claimAnchor = "and next_retry_at <= now()"

// partitionedClaim returns the claim restricted to the partition given as $4: its gid's
// placement.Partition computed by PostgreSQL. The claim still walks the due index in due order; the
// hash is computed for the due rows it reads, and rows of other partitions are skipped.
func partitionedClaim(claim string, parts int) (string, error) {
	if strings.Count(claim, claimAnchor) != 1 {
		return "", fmt.Errorf("core: claim query: no single %q to add the partition to: %w", claimAnchor, ErrInvalidState)
	}
	return strings.Replace(claim, claimAnchor, claimAnchor+" and "+placement.PartitionSQL("gid", parts)+" = $4::int", 1), nil
}

// partitionsTable returns the schema-qualified name of the table storing the log's number of
// recovery partitions: <prefix>partitions, one row.
func (l *Log) partitionsTable() string {
	if l.o.schema != "" {
		return pgx.Identifier{l.o.schema, l.o.prefix + "partitions"}.Sanitize()
	}
	return pgx.Identifier{l.o.prefix + "partitions"}.Sanitize()
}

// checkPartitions stores the log's number of recovery partitions, the first time a recoverer runs
// (creating the one-row table <prefix>partitions), and refuses a recoverer configured with
// another number with an error wrapping [ErrInvalidOption].
//
// Changing the number on a live system is refused rather than supported: a gid's partition is its
// hash modulo P, so recoverers with different P would guard one transaction with different fence
// resources and elections — two leaders could drive it at once, each passing its own fence. To
// change P, stop every recoverer of the log, delete the row (delete from <prefix>partitions),
// and start them with the new P: nothing else depends on P (starters do not record it).
func (l *Log) checkPartitions(ctx context.Context) error {
	table := l.partitionsTable()
	stored, err := placement.StorePartitions(ctx, l.pool, table, l.o.partitions)
	if err != nil {
		return fmt.Errorf("core: recovery of %s (was Migrate run?): %w", l.name, err)
	}
	if stored != l.o.partitions {
		return fmt.Errorf("core: recovery of %s with %d partitions: it is recovered with %d (stored in %s); "+
			"changing the number of partitions on a live system is refused: stop every recoverer, "+
			"delete from %s, then start them all with the new number: %w",
			l.name, l.o.partitions, stored, table, table, ErrInvalidOption)
	}
	return nil
}

// Partitioning is how a coordinator's recovery is split ([Config.Partitions]): Parts
// partitions, this instance's candidate in partition p's election from Electors, and Members
// counting the instances for balancing (nil: no balancing).
type Partitioning struct {
	Parts    int
	Electors func(p int) (lock.Elector, error)
	Members  leader.Membership
}

// validate returns an error wrapping [ErrInvalidOption] for an unusable Partitioning; the zero
// value is one partition.
func (pc Partitioning) validate() error {
	switch {
	case pc.Parts == 0 && pc.Electors == nil && pc.Members == nil:
		return nil
	case pc.Parts < 1 || pc.Parts > MaxPartitions:
		return fmt.Errorf("%d partitions: not in 1..%d: %w", pc.Parts, MaxPartitions, ErrInvalidOption)
	case pc.Parts > 1 && pc.Electors == nil:
		return fmt.Errorf("%d partitions without electors: %w", pc.Parts, ErrInvalidOption)
	}
	return nil
}
