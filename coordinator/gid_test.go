package coordinator_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/saga"
	"github.com/txkit/txkit/tcc"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/twopc"
)

// begins returns every coordinator's Begin, by package name, on coordinators over pool (closed
// when the test ends).
func begins(t *testing.T, pool *pgxpool.Pool) map[string]func(context.Context, ...coordinator.BeginOption) error {
	t.Helper()
	tc, err := tcc.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.Migrate(t.Context()); err != nil { // tcc's Begin records a gid given
		t.Fatal(err)
	}
	sc, err := saga.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	two, err := twopc.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = two.Close() })
	three, err := threepc.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = three.Close() })
	return map[string]func(context.Context, ...coordinator.BeginOption) error{
		"tcc": func(ctx context.Context, o ...coordinator.BeginOption) error {
			_, err := tc.Begin(ctx, o...)
			return err
		},
		"saga": func(ctx context.Context, o ...coordinator.BeginOption) error {
			_, err := sc.Begin(ctx, o...)
			return err
		},
		"twopc": func(ctx context.Context, o ...coordinator.BeginOption) error {
			_, err := two.Begin(ctx, o...)
			return err
		},
		"threepc": func(ctx context.Context, o ...coordinator.BeginOption) error {
			_, err := three.Begin(ctx, o...)
			return err
		},
	}
}

// Every coordinator refuses the same gids at Begin, with ErrInvalidOption and before any write:
// ones PostgreSQL cannot store (NUL, invalid UTF-8), cannot index (2.7 kB), and ones an operator's
// console would show with their effect (bidirectional overrides, other control and format
// characters). Before, tcc's failed inside PostgreSQL, saga and 3PC took them all, 2PC took the
// bidirectional override.
func TestIntegrationBeginRefusesBadGIDs(t *testing.T) {
	pool := testenv.PG(t).Pool
	for name, begin := range begins(t, pool) {
		for _, tc := range []struct{ what, gid string }{
			{"NUL", "order-\x001"},
			{"invalid UTF-8", "order-\xff"},
			{"too long", strings.Repeat("g", 2700)},
			{"just too long", strings.Repeat("g", 200)},
			{"right-to-left override", "order-\u202e1gnp.exe"},
			{"left-to-right isolate", "order-\u20661"},
			{"zero-width space", "order\u200b-1"},
			{"newline", "order-1\nforged log line"},
			{"escape", "order-\x1b[31m1"},
			{"C1 control", "order-\u00851"},
			{"line separator", "order-\u20281"},
		} {
			t.Run(name+"/"+tc.what, func(t *testing.T) {
				if err := begin(t.Context(), coordinator.WithGID(tc.gid)); !errors.Is(err, coordinator.ErrInvalidOption) {
					t.Fatalf("Begin(WithGID(%.40q)) = %v, want ErrInvalidOption", tc.gid, err)
				}
			})
		}
		for _, gid := range []string{"order-1", "заказ 1", "注文-1", strings.Repeat("g", 199), "a.b:c/d@e"} {
			if err := begin(t.Context(), coordinator.WithGID(gid)); err != nil {
				t.Fatalf("%s: Begin(WithGID(%.40q)) = %v, want nil", name, gid, err)
			}
		}
	}
}
