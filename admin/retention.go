package admin

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/txkit/txkit/internal/pgutil"
)

// purgeBatch is how many audit rows one purge statement deletes.
const purgeBatch = 1000

// PurgeAudit deletes the audit rows older than olderThan (by PostgreSQL's clock), in statements
// of at most 1000 rows, and returns how many it deleted, including those deleted before an error.
// olderThan must be longer than the HMAC window ([DefaultHMACWindow]), so that the nonce of a
// signature that still verifies is kept; a shorter one returns an error wrapping [ErrBadRequest].
// It blocks until done or ctx ends; ctx scopes only this call. Safe to run from several processes.
func (a *Admin) PurgeAudit(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan <= a.o.hmacWindow {
		return 0, fmt.Errorf("admin: purge audit rows older than %v: must be longer than the HMAC window %v: %w",
			olderThan, a.o.hmacWindow, ErrBadRequest)
	}
	// ctid = any(array(...)) plans as a TID scan; skip locked lets purges in several processes
	// and the row of a call in flight proceed without waiting for one another.
	purge := `delete from ` + a.audit + ` where ctid = any(array(select ctid from ` + a.audit +
		` where at < now() - interval '` + strconv.FormatInt(olderThan.Microseconds(), 10) + ` microseconds'` +
		` limit $1 for update skip locked))`
	var deleted int64
	for {
		tag, err := a.pool.Exec(ctx, purge, purgeBatch)
		if err != nil {
			return deleted, fmt.Errorf("admin: purge %s after %d rows: %w", a.auditN, deleted, err)
		}
		deleted += tag.RowsAffected()
		if tag.RowsAffected() < purgeBatch {
			return deleted, nil
		}
	}
}

// Run purges the audit rows older than the retention on its schedule ([WithAuditRetention],
// default 30 days, hourly) until ctx ends, logging each pass
// that deletes rows. It blocks; when ctx ends it cancels a purge in flight, waits for it and
// returns nil. Purging is idempotent, so every process serving the API may run it.
func (a *Admin) Run(ctx context.Context) error {
	err := pgutil.RunSchedule(ctx, a.o.purgeSpec, a.o.log, func(ctx context.Context) {
		n, err := a.PurgeAudit(ctx, a.o.retention)
		switch {
		case err != nil && ctx.Err() != nil:
		case err != nil:
			a.o.log.Error("admin: audit purge failed", slog.String("table", a.auditN), slog.Int64("deleted", n), slog.Any("err", err))
		case n > 0:
			a.o.log.Info("admin: purged old audit rows", slog.String("table", a.auditN), slog.Int64("deleted", n),
				slog.Duration("older_than", a.o.retention))
		}
	})
	if err != nil { // New checked the schedule, so this is not expected
		return fmt.Errorf("admin: audit purge %w: %w", err, ErrInvalidOption)
	}
	return nil
}
