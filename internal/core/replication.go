package core

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/pgutil"
)

// A database that holds a coordinator's log, or takes the votes of two-phase commit (its prepared
// transactions), loses what its primary acknowledged last when it fails over to a standby that
// had not received it — a decision, a vote — unless a synchronous standby had confirmed each
// commit first. The coordinators check this once when their Run starts: a primary with no
// synchronous standby is a warning (logged, and txkit_postgres_synchronous_standbys at 0), not an
// error — a development database has none.

// syncQuery reads, in one round trip, whether the server is a primary, its synchronous_commit and
// synchronous_standby_names, and how many standbys are synchronous now (pg_stat_replication
// shows sync_state to superusers and pg_read_all_stats only: counted as null otherwise).
const syncQuery = `select current_database(), pg_is_in_recovery(), current_setting('synchronous_commit'), current_setting('synchronous_standby_names'),
	(select count(*) from pg_stat_replication where sync_state in ('sync', 'quorum')),
	(select count(*) from pg_stat_replication where sync_state is null)`

// SyncStandbys returns how many synchronous standbys confirm db's commits now (0 when none), and
// when none, why, in words; and the database's name.
func SyncStandbys(ctx context.Context, db pgutil.DBTX) (n int, why, name string, err error) {
	var standby bool
	var commit, names string
	var hidden int
	if err := db.QueryRow(ctx, syncQuery).Scan(&name, &standby, &commit, &names, &n, &hidden); err != nil {
		return 0, "", "", fmt.Errorf("synchronous standbys: %w", err)
	}
	n, why = judge(standby, commit, names, n, hidden)
	return n, why, name, nil
}

// judge says why a server has no synchronous standby (n 0), from syncQuery's answer.
func judge(standby bool, commit, names string, n, hidden int) (int, string) {
	switch {
	case standby:
		return 0, "it is a standby (read-only)"
	case names == "":
		return 0, "synchronous_standby_names is empty: commits are acknowledged before any standby has them"
	case commit == "off" || commit == "local":
		return 0, "synchronous_commit is " + commit + ": commits do not wait for the standby"
	case n == 0 && hidden > 0:
		return 0, "pg_stat_replication's sync_state is hidden from this role (grant pg_read_all_stats)"
	case n == 0:
		return 0, "synchronous_standby_names is " + names + " but no synchronous standby is connected"
	}
	return n, ""
}

// syncGauge is txkit_postgres_synchronous_standbys{protocol, role}: role "log" for a coordinator's
// log, "votes" for a database taking two-phase commit's votes.
func syncGauge(reg prometheus.Registerer) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: obs.Namespace, Subsystem: "postgres", Name: "synchronous_standbys",
		Help: "Synchronous standbys of the database (log: a coordinator's log; votes: a two-phase commit database) when the coordinator's Run started; 0: a failover may lose acknowledged commits."},
		[]string{"protocol", "role"})
	if got, err := obs.Register(reg, g); err == nil {
		return got
	}
	return g // not exposed: a collector of another kind has its name
}

// CheckSyncStandby checks db (role: "log" or "votes") as [SyncStandbys] does, sets the gauge and
// logs a warning when it has none. An error of the check is logged at debug level only: the check
// must never keep a coordinator from running.
func (b *Base) CheckSyncStandby(ctx context.Context, db pgutil.DBTX, role string) {
	n, why, name, err := SyncStandbys(ctx, db)
	lg := b.Cfg.Logger
	if lg == nil {
		return
	}
	if err != nil {
		lg.Debug("txkit: could not check the database's synchronous standbys", "coordinator", b.name, "role", role, "err", err)
		return
	}
	b.syncStandbys.WithLabelValues(b.kind.String(), role).Set(float64(n))
	if n == 0 {
		lg.Warn("txkit: the database has no synchronous standby: a failover may lose commits it acknowledged",
			slog.String("coordinator", b.name), slog.String("role", role), slog.String("database", name), slog.String("why", why))
	}
}
