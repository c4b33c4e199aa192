package prepared_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txkit/txkit/internal/prepared"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

func TestNewDBRefuses(t *testing.T) {
	for _, tc := range []struct{ name, db, err string }{
		{"empty name", "", "empty database name"},
		{"backslash", `ea\st`, "contains a backslash"},
		{"nil pool", "east", "nil pool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d, err := prepared.NewDB(tc.db, nil, 2); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("NewDB(%q, nil, 2) = %v, %v; want an error with %q", tc.db, d, err, tc.err)
			}
		})
	}
}

// TestIntegrationFinishScan prepares transactions on the real server — one of a namespace, one
// of another namespace, one in the namespace that no coordinator made — and checks that Scan
// finds only the first, with its gid and branch, and that Finish commits it once and then finds
// nothing to do.
func TestIntegrationFinishScan(t *testing.T) {
	s := testenv.PG(t) // skips under -short, fails when PostgreSQL is missing
	ctx := t.Context()
	if _, err := s.Pool.Exec(ctx, `create table items (id text primary key)`); err != nil {
		t.Fatal(err)
	}
	ns, err := prepared.NewNamespace(s.Name, "txkit_test_")
	if err != nil {
		t.Fatal(err)
	}
	other, err := prepared.NewNamespace(s.Name, "txkit_other_")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prepared.NewDB("east", s.Pool, 0); err == nil {
		t.Fatal("NewDB with 0 phase-two connections: no error")
	}
	d, err := prepared.NewDB("east", s.Pool, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Name != "east" || d.Pool != s.Pool || d.P2 == s.Pool || d.P2.Config().MaxConns != 2 {
		t.Fatalf("NewDB = %+v, want east on the caller's pool with a phase-two pool of 2", d)
	}

	const gid, branch = "g:1'x", "east"
	mine, theirs, odd := ns.ID(gid, branch), other.ID(gid, branch), ns.Prefix()+"not-made-here"
	// Runs before the schema is dropped (cleanups run in reverse): a prepared transaction left by
	// a failed test holds its locks and would block the drop.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, id := range []string{mine, theirs, odd} {
			if err := prepared.Finish(ctx, s.Pool, prepared.Rollback, id); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	for _, id := range []string{mine, theirs, odd} {
		tx, err := s.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `insert into items values ($1)`, id); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "PREPARE TRANSACTION "+prepared.Quote(id)); err != nil {
			t.Fatalf("prepare %s: %v", id, err)
		}
		if err := tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) { // ends pgx's view of the tx
			t.Fatal(err)
		}
	}

	if found, err := prepared.Scan(ctx, d.P2, ns, time.Hour); err != nil || len(found) != 0 {
		t.Fatalf("Scan older than an hour = %+v, %v; want none", found, err)
	}
	var found []prepared.Prepared
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() bool {
		found, err = prepared.Scan(ctx, d.P2, ns, 0)
		return err != nil || len(found) > 0
	}, "Scan finds the prepared transaction")
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].ID != mine || found[0].GID != gid || found[0].Branch != branch ||
		found[0].At.IsZero() || time.Since(found[0].At) > time.Minute {
		t.Fatalf("Scan = %+v, want only %s (gid %q, branch %q, prepared just now)", found, mine, gid, branch)
	}

	// Inside a transaction block COMMIT PREPARED fails: the error is returned and names it.
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = prepared.Finish(ctx, tx, prepared.Commit, mine)
	_ = tx.Rollback(ctx)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "COMMIT PREPARED "+mine) {
		t.Fatalf("Finish in a transaction block = %v, want the server's error naming %s", err, mine)
	}

	if err := prepared.Finish(ctx, d.P2, prepared.Commit, mine); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	var n int
	if err := s.Pool.QueryRow(ctx, `select count(*) from items where id = $1`, mine).Scan(&n); err != nil || n != 1 {
		t.Fatalf("committed rows = %d, %v; want 1", n, err)
	}
	if err := prepared.Finish(ctx, d.P2, prepared.Commit, mine); err != nil {
		t.Fatalf("second Finish: %v, want nil", err)
	}
	if err := prepared.Finish(ctx, d.P2, prepared.Rollback, mine); err != nil {
		t.Fatalf("Rollback of a committed one: %v, want nil", err)
	}
	if found, err := prepared.Scan(ctx, d.P2, ns, 0); err != nil || len(found) != 0 {
		t.Fatalf("Scan after Finish = %+v, %v; want none", found, err)
	}
}
