package leader_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/placement"
	"github.com/txkit/txkit/lock"
)

// TestPartitionName: the name of a partition's election or fence resource.
func TestPartitionName(t *testing.T) {
	if got := leader.PartitionName("core:x", 7); got != "core:x/p7" {
		t.Fatalf("PartitionName = %q", got)
	}
}

// TestNewShardsRefusesUnusableArguments: NewShards checks the number of partitions, the elector
// func and what it returns, and the options, without touching a server.
func TestNewShardsRefusesUnusableArguments(t *testing.T) {
	pool := &pgxpool.Pool{}
	f, err := fence.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	work := func(context.Context, *leader.Term) error { return nil }
	ok := func(int) (lock.Elector, error) { return &lock.Election{}, nil }
	tests := []struct {
		name     string
		parts    int
		electors leader.ElectorFunc
		opts     []leader.Option
	}{
		{"zero partitions", 0, ok, nil},
		{"too many partitions", placement.MaxPartitions + 1, ok, nil},
		{"nil elector func", 2, nil, nil},
		{"elector error", 2, func(int) (lock.Elector, error) { return nil, errors.New("no") }, nil},
		{"nil elector", 2, func(int) (lock.Elector, error) { return nil, nil }, nil},
		{"zero balance interval", 2, ok, []leader.Option{leader.WithBalanceEvery(0)}},
		{"zero pause", 2, ok, []leader.Option{leader.WithPause(0)}},
		{"negative grace", 2, ok, []leader.Option{leader.WithGrace(-time.Second)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := leader.NewShards(tc.parts, tc.electors, pool, f, "r", work, tc.opts...); !errors.Is(err, leader.ErrInvalidOption) {
				t.Fatalf("NewShards = %v, want ErrInvalidOption", err)
			}
		})
	}
	s, err := leader.NewShards(3, ok, pool, f, "r", work, leader.WithChannel("c"), leader.WithBalanceEvery(1))
	if err != nil || s.Partitions() != 3 || len(s.Led()) != 0 || s.Fenced() != 0 {
		t.Fatalf("NewShards = %v, %v", s, err)
	}
}
