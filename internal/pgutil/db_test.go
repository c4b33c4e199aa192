package pgutil

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

func TestErrorText(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "broker up", "broker up"},
		{"NUL removed", "a\x00b", "ab"},
		{"invalid UTF-8 replaced", "a\xffb", "a\uFFFDb"},
		{"bounded", strings.Repeat("x", 20), strings.Repeat("x", 10)},
		{"not cut inside a character", "xxxxxxxxxé", "xxxxxxxxx"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ErrorText(errors.New(tc.in), 10); got != tc.want {
				t.Fatalf("ErrorText(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestIsNil(t *testing.T) {
	var pool *pgxpool.Pool
	var db DBTX = pool
	var m map[string]int
	for _, tc := range []struct {
		name string
		x    any
		want bool
	}{
		{"nil", nil, true},
		{"nil pool in a DBTX", db, true},
		{"nil map", m, true},
		{"value", 3, false},
		{"non-nil map", map[string]int{}, false},
	} {
		if got := IsNil(tc.x); got != tc.want {
			t.Errorf("%s: IsNil = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMigrateLockKey(t *testing.T) {
	a1, a2, b := MigrateLockKey("txkit/outbox/migrate:a"), MigrateLockKey("txkit/outbox/migrate:a"), MigrateLockKey("txkit/outbox/migrate:b")
	if a1 != a2 || a1 == b {
		t.Fatalf("keys %d, %d (one name), %d (another): want the first two equal, the third different", a1, a2, b)
	}
}
