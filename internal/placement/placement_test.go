package placement_test

import (
	"fmt"
	"testing"

	"github.com/txkit/txkit/internal/placement"
	"github.com/txkit/txkit/internal/testkit/testenv"
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
		if err := db.Pool.QueryRow(t.Context(), `select array_agg(`+placement.PartitionSQL("k", parts)+`::int order by n)
			from unnest($1::text[]) with ordinality as u(k, n)`, keys).Scan(&got); err != nil {
			t.Fatal(err)
		}
		counts := make([]int, parts)
		for i, k := range keys {
			want := placement.Partition(k, parts)
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

// TestPartition pins known keys to their partitions: rows already stored (an outbox message's
// partition column, a notification's receiver, a partitioned log's gid) keep theirs only while
// the hash stays exactly this one.
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
		{"abc", 1024, 152},
		{"", 12, 1},         // md5("") starts d41d8cd9 = 3558706393
		{"order-42", 12, 8}, // 1329687308
		{"order-42", 1024, 780},
		{"0195f8a2-7c3e-7000-8000-000000000000", 12, 5}, // a message id (UUIDv7): 959672561
		{"user-1", 12, 3}, // 3604443219
		{"ключ", 12, 2},   // UTF-8 bytes: 3278207846
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/%d", tc.key, tc.parts), func(t *testing.T) {
			if got := placement.Partition(tc.key, tc.parts); got != tc.want {
				t.Fatalf("Partition(%q, %d) = %d, want %d", tc.key, tc.parts, got, tc.want)
			}
		})
	}
}
