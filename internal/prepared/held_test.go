package prepared_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/prepared"
)

func TestHeldConn(t *testing.T) {
	east := new(pgxpool.Conn) // never used: only its identity is compared
	ctx := prepared.WithHeld(t.Context(), "g1", map[string]*pgxpool.Conn{"east": east})
	for _, tc := range []struct {
		name        string
		ctx         context.Context
		gid, branch string
		want        *pgxpool.Conn
	}{
		{"held", ctx, "g1", "east", east},
		{"other branch", ctx, "g1", "west", nil},
		{"other gid", ctx, "g2", "east", nil},
		{"none held", t.Context(), "g1", "east", nil},
		{"empty map", prepared.WithHeld(t.Context(), "g1", nil), "g1", "east", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := prepared.HeldConn(tc.ctx, tc.gid, tc.branch); got != tc.want {
				t.Fatalf("HeldConn(%s, %s) = %p, want %p", tc.gid, tc.branch, got, tc.want)
			}
		})
	}
}
