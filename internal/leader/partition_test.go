package leader_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/leader"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
)

// TestIntegrationPartitionSameInPostgreSQL: PartitionSQL computes in PostgreSQL the partition
// Partition computes in Go, for keys of every kind, so a query selects exactly a partition's rows.
func TestIntegrationPartitionSameInPostgreSQL(t *testing.T) {
	db := testenv.PG(t)
	keys := []string{"", "a", "order-42", "0195f8a2-7c3e-7000-8000-000000000000", "ключ", "\x01é", "long " + fmt.Sprint(make([]int, 50))}
	for i := range 500 {
		keys = append(keys, fmt.Sprintf("g%05d", i))
	}
	for _, parts := range []int{1, 2, 3, 12, 1024} {
		var got []int
		if err := db.Pool.QueryRow(t.Context(), `select array_agg(`+leader.PartitionSQL("k", parts)+`::int order by n)
			from unnest($1::text[]) with ordinality as u(k, n)`, keys).Scan(&got); err != nil {
			t.Fatal(err)
		}
		counts := make([]int, parts)
		for i, k := range keys {
			want := leader.Partition(k, parts)
			if got[i] != want {
				t.Fatalf("%d partitions: key %q: PostgreSQL says %d, Go %d", parts, k, got[i], want)
			}
			counts[want]++
		}
		if parts == 12 {
			t.Logf("%d keys over 12 partitions: %v", len(keys), counts)
		}
	}
}

// TestPartition: stable values, within range, and names.
func TestPartition(t *testing.T) {
	tests := []struct {
		key   string
		parts int
		want  int
	}{
		{"abc", 1, 0},
		{"abc", 0, 0},
		{"abc", 2, 0},  // md5("abc") starts 900150983 = 2416005272
		{"abc", 12, 8}, // 2416005272 % 12
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/%d", tc.key, tc.parts), func(t *testing.T) {
			if got := leader.Partition(tc.key, tc.parts); got != tc.want {
				t.Fatalf("Partition(%q, %d) = %d, want %d", tc.key, tc.parts, got, tc.want)
			}
		})
	}
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
		{"too many partitions", leader.MaxPartitions + 1, ok, nil},
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
