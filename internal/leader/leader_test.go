package leader_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/lock"
)

// TestNewRefusesUnusableArguments: New checks every argument and option without touching a
// server, and refuses what it cannot use with ErrInvalidOption.
func TestNewRefusesUnusableArguments(t *testing.T) {
	el := &lock.Election{} // never campaigns here
	pool := &pgxpool.Pool{}
	f, err := fence.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	work := func(context.Context, *leader.Term) error { return nil }
	cronFn := func(context.Context, lock.Token) error { return nil }
	tests := []struct {
		name     string
		el       lock.Elector
		pool     *pgxpool.Pool
		f        *fence.Fence
		resource string
		work     leader.Work
		opts     []leader.Option
	}{
		{"nil elector", nil, pool, f, "r", work, nil},
		{"nil pool", el, nil, f, "r", work, nil},
		{"nil fence", el, pool, nil, "r", work, nil},
		{"nil work", el, pool, f, "r", nil, nil},
		{"empty resource", el, pool, f, "", work, nil},
		{"long resource", el, pool, f, strings.Repeat("r", fence.MaxResourceLen+1), work, nil},
		{"bad schedule", el, pool, f, "r", work, []leader.Option{leader.WithSchedule("every second")}},
		{"bad channel", el, pool, f, "r", work, []leader.Option{leader.WithChannel(strings.Repeat("c", 64))}},
		{"zero pause", el, pool, f, "r", work, []leader.Option{leader.WithPause(0)}},
		{"nil logger", el, pool, f, "r", work, []leader.Option{leader.WithLogger(nil)}},
		{"bad cron spec", el, pool, f, "r", work, []leader.Option{leader.WithCron("j", "sometimes", cronFn)}},
		{"nil cron func", el, pool, f, "r", work, []leader.Option{leader.WithCron("j", "@every 1s", nil)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := leader.New(tc.el, tc.pool, tc.f, tc.resource, tc.work, tc.opts...); !errors.Is(err, leader.ErrInvalidOption) {
				t.Fatalf("New = %v, want ErrInvalidOption", err)
			}
		})
	}
	job, err := leader.New(el, pool, f, "r", work, leader.WithSchedule("@every 200ms"), leader.WithChannel("c"),
		leader.WithPause(time.Millisecond), leader.WithCron("j", "@every 1s", cronFn), leader.WithName("test"))
	if err != nil || job.Fenced() != 0 {
		t.Fatalf("New = %v, %v", job, err)
	}
}
