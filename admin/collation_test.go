package admin_test

import (
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/testenv"
)

// The transaction list pages through every row in byte order whatever the gid column's collation:
// here ICU's en-US (as in a database created with locale_provider icu), which sorts a1 < B2 <
// b3 < C4 where bytes sort B2 < C4 < a1 < b3. Before, the database paged in its collation and
// Admin merged and cut the pages in byte order: rows were skipped (a1 and b3 never listed).
func TestIntegrationTransactionsICUCollation(t *testing.T) {
	ctx := t.Context()
	s := testenv.PG(t)
	gids := map[string][]string{
		"txkit_":      {"a1", "B2", "b3", "C4", "c5", "A6", "é7", "E8"},
		"txkit_saga_": {"a9", "B10", "d11", "D12"},
	}
	for prefix, gs := range gids {
		l, err := core.New(s.Pool, core.WithSchema(s.Name), core.WithTablePrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		table := pgx.Identifier{s.Name, prefix + "global"}.Sanitize()
		if _, err := s.Pool.Exec(ctx, `alter table `+table+` alter column gid type text collate "en-US-x-icu"`); err != nil {
			t.Fatal(err)
		}
		for _, gid := range gs {
			if err := l.Create(ctx, gid, core.KindTCC, time.Hour, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	a, err := admin.New(s.Pool, admin.WithSchema(s.Name), admin.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(gids["txkit_"]), gids["txkit_saga_"]...)
	slices.Sort(want)
	for _, limit := range []int{1, 2, 3, 5} {
		var got []string
		f := admin.TxFilter{Limit: limit}
		for range len(want) + 1 {
			p, err := a.Transactions(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, tx := range p.Items {
				got = append(got, tx.GID)
			}
			if p.Next == "" {
				break
			}
			f.After = p.Next
		}
		if !slices.Equal(got, want) {
			t.Fatalf("pages of %d: %q, want %q", limit, got, want)
		}
	}
}
