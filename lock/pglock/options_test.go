package pglock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/pglock"
)

// TestBadInput needs no server: every constructor refuses what it cannot use with an error
// wrapping lock.ErrInvalidOption.
func TestBadInput(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // lazy: never connects
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c, err := pglock.New(pool)
	if err != nil {
		t.Fatalf("New with defaults: %v", err)
	}
	defer c.Close()
	long := strings.Repeat("x", pglock.MaxNameLen+1)
	cases := []struct {
		name string
		call func() error
	}{
		{"nil pool", func() error { _, err := pglock.New(nil); return err }},
		{"zero TTL", func() error { _, err := pglock.New(pool, pglock.WithTTL(0)); return err }},
		{"negative TTL", func() error { _, err := pglock.New(pool, pglock.WithTTL(-time.Second)); return err }},
		{"TTL under 1ms", func() error { _, err := pglock.New(pool, pglock.WithTTL(time.Microsecond)); return err }},
		{"renew equal to TTL", func() error {
			_, err := pglock.New(pool, pglock.WithTTL(time.Second), pglock.RenewEveryForTest(time.Second))
			return err
		}},
		{"renew above TTL", func() error {
			_, err := pglock.New(pool, pglock.WithTTL(time.Second), pglock.RenewEveryForTest(2*time.Second))
			return err
		}},
		{"renew inside the safety margin", func() error {
			_, err := pglock.New(pool, pglock.WithTTL(time.Second), pglock.RenewEveryForTest(950*time.Millisecond))
			return err
		}},
		{"renew zero", func() error { _, err := pglock.New(pool, pglock.RenewEveryForTest(0)); return err }},
		{"renew negative", func() error { _, err := pglock.New(pool, pglock.RenewEveryForTest(-time.Second)); return err }},
		{"fallback zero", func() error { _, err := pglock.New(pool, pglock.FallbackCheckForTest(0)); return err }},
		{"schema with NUL", func() error { _, err := pglock.New(pool, pglock.WithSchema("a\x00b")); return err }},
		{"schema too long", func() error { _, err := pglock.New(pool, pglock.WithSchema(strings.Repeat("s", 64))); return err }},
		{"empty name", func() error { _, err := c.NewMutex(""); return err }},
		{"name over MaxNameLen", func() error { _, err := c.NewMutex(long); return err }},
		{"name not UTF-8", func() error { _, err := c.NewMutex("\xff"); return err }},
		{"data over MaxNameLen", func() error { _, err := c.NewMutex("n", pglock.WithData(long)); return err }},
		{"advisory empty name", func() error { _, err := c.NewAdvisoryMutex(""); return err }},
		{"advisory name over MaxNameLen", func() error { _, err := c.NewAdvisoryMutex(long); return err }},
		{"elector empty id", func() error { _, err := c.NewElector("election", ""); return err }},
		{"elector empty name", func() error { _, err := c.NewElector("", "id"); return err }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, lock.ErrInvalidOption) {
				t.Fatalf("err = %v, want one wrapping lock.ErrInvalidOption", err)
			}
			if !strings.HasPrefix(err.Error(), "pglock: ") && !strings.HasPrefix(err.Error(), "lock: ") {
				t.Errorf("err = %q: want the package's prefix", err)
			}
		})
	}
	// The limits themselves are accepted.
	if _, err := c.NewMutex(strings.Repeat("x", pglock.MaxNameLen)); err != nil {
		t.Errorf("name of MaxNameLen bytes: %v", err)
	}
	if _, err := pglock.New(pool, pglock.WithTTL(time.Second), pglock.RenewEveryForTest(899*time.Millisecond)); err != nil {
		t.Errorf("renew just under 9/10 of the TTL: %v", err)
	}
}
