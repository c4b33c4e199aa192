package core_test

import (
	"strings"
	"testing"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

// The project's plain PostgreSQL has no standby: SyncStandbys says 0 and why; the HA PostgreSQL
// (Patroni, synchronous_mode) has one. A coordinator's Run logs the first as a warning.
func TestIntegrationSyncStandbys(t *testing.T) {
	t.Parallel()
	plain := testenv.PG(t)
	n, why, db, err := core.SyncStandbys(t.Context(), plain.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 || !strings.Contains(why, "synchronous_standby_names is empty") || db == "" {
		t.Fatalf("plain PostgreSQL: %d synchronous standbys, why %q, database %q; want 0, synchronous_standby_names is empty", n, why, db)
	}
	ha := testenv.PGHA(t)
	n, why, _, err = core.SyncStandbys(t.Context(), ha.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if n < 1 || why != "" {
		t.Fatalf("HA PostgreSQL: %d synchronous standbys (%s), want at least 1", n, why)
	}
}
