package idempotency

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/txkit/txkit/internal/pgutil"
)

// Purge deletes the keys that expired (see [WithRetention]) in one full pass: statements of at most
// 1000 rows each, repeated until one deletes fewer. It returns how many keys it
// deleted, including those deleted before an error. Pass a pool, so that each statement commits on
// its own and holds its row locks briefly; rows locked by other transactions are skipped, so
// purges running in several processes do not wait for one another.
//
// Purge blocks until the pass is done or ctx ends; ctx scopes only this call. It is safe for
// concurrent use.
func (s *Store) Purge(ctx context.Context, db DBTX) (deleted int64, err error) {
	if pgutil.IsNil(db) {
		return 0, fmt.Errorf("idempotency: purge %s: %w", s.table, ErrNilTx)
	}
	for {
		tag, err := db.Exec(ctx, s.purge, s.o.batch)
		if err != nil {
			return deleted, fmt.Errorf("idempotency: purge %s after %d keys: %w", s.table, deleted, err)
		}
		n := tag.RowsAffected()
		deleted += n
		if n < int64(s.o.batch) {
			return deleted, nil
		}
	}
}

// Run purges expired keys on the schedule set by [WithRetention] (default every minute) until
// ctx ends, with a robfig/cron scheduler that skips a run while the previous one is still going
// and recovers from panics. It logs each pass's count through the [WithLogger] logger.
//
// Run blocks. When ctx ends it cancels a purge in flight (ctx also scopes the work), waits for the
// scheduler to stop, and returns nil. Purging is idempotent, so every replica of a service may run
// it; no leadership is needed. It purges through the pool given to [New].
func (s *Store) Run(ctx context.Context) error {
	if err := pgutil.RunSchedule(ctx, s.o.schedule, s.o.log, func(ctx context.Context) { s.purgeJob(ctx, s.pool) }); err != nil {
		// New validated the spec, so this is not expected.
		return fmt.Errorf("idempotency: purge %w: %w", err, ErrInvalidOption)
	}
	return nil
}

func (s *Store) purgeJob(ctx context.Context, db DBTX) {
	n, err := s.Purge(ctx, db)
	switch {
	case err != nil && ctx.Err() != nil:
		s.o.log.Debug("idempotency: purge interrupted by shutdown", s.logAttr, slog.Int64("deleted", n))
	case err != nil:
		s.o.log.Error("idempotency: purge failed", s.logAttr, slog.Int64("deleted", n), slog.Any("err", err))
	case n > 0:
		s.o.log.Info("idempotency: purged expired keys", s.logAttr, slog.Int64("deleted", n))
	default:
		s.o.log.Debug("idempotency: no expired keys", s.logAttr)
	}
}
