package core_test

import (
	"fmt"
	"testing"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/placement"
)

// TestShardOf pins gids to their log shards (a gid's shard must never change: its transaction is
// looked for there) and checks that a shard's gids are spread over every recovery partition: the
// shard's hash is salted, so it does not decide the partition.
func TestShardOf(t *testing.T) {
	tests := []struct {
		gid    string
		shards int
		want   int
	}{
		{"order-42", 1, 0},
		{"order-42", 0, 0},
		{"order-42", 2, 0}, // md5("txkit/shard\x00order-42") starts 0x508c277e = 1351362430
		{"order-42", 3, 1},
		{"order-42", 12, 10},
		{"abc", 3, 0}, // 401270253
		{"abc", 12, 9},
		{"0195f8a2-7c3e-7000-8000-000000000000", 3, 2}, // a made gid (UUIDv7): 1577254685
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/%d", tc.gid, tc.shards), func(t *testing.T) {
			if got := core.ShardOf(tc.gid, tc.shards); got != tc.want {
				t.Fatalf("ShardOf(%q, %d) = %d, want %d", tc.gid, tc.shards, got, tc.want)
			}
		})
	}
	// 2 shards of 4 partitions: each shard has gids in every partition.
	seen := map[[2]int]int{}
	for i := range 2000 {
		gid := fmt.Sprintf("g%05d", i)
		seen[[2]int{core.ShardOf(gid, 2), placement.Partition(gid, 4)}]++
	}
	for s := range 2 {
		for p := range 4 {
			if n := seen[[2]int{s, p}]; n < 150 {
				t.Errorf("shard %d, partition %d: %d of 2000 gids, want about 250 (%v)", s, p, n, seen)
			}
		}
	}
}
