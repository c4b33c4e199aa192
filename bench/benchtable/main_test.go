package main

import (
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string // lines the output must contain
		suffix   string   // what the output must end with, if set
		wantErr  bool
	}{
		{
			name: "rows per backend, restart rows per server",
			in: `BenchmarkLocks/uncontended/zk-2   100  2000 ns/op  480.0 acquires/s  3.000 rtt/acquire  2.000 writes/acquire
BenchmarkLocks/handoff16/zk-2   100  2000 ns/op  2.40 p50-ms  10.8 p99-ms  2.0 rtt/acquire
BenchmarkLocks/uncontended/pg-2   100  2000 ns/op  900.0 acquires/s  2.000 rtt/acquire  2.000 writes/acquire
BenchmarkLocksKill/zk-2 3 1 ns/op 3300 kill-to-next-ms
BenchmarkDisruptiveLocksRestart/redis-2 1 1 ns/op 300 restart-ms 1 holder-lost 900 lost-learned-ms 1 overlap
ok`,
			want: []string{
				"| zk | 480 | 3.0 | 2.0 | 2.4 | 10.8 | 2.0 | — | 3300 |",
				"| pg | 900 | 2.0 | 2.0 | — | — | — | — | — |",
				"| redis | 300 | 1.00 | 900 | 1.00 |",
			},
		},
		{
			name: "concurrency rows per recipe and client count, in the order they ran",
			in: `BenchmarkConcurrency/saga/clients=16-2   1  602125518 ns/op  3.202 bare-p50-ms  5.365 bare-p99-ms  3.000 bare-pg-commits/op  989.4 bare/s  12.06 p50-ms  88.12 p99-ms  1610 pg-ceiling/s  5.000 pg-commits/op  0.9293 ratio  919.5 txkit/s  0.66 go-cpu-ms/op  0.50 bare-go-cpu-ms/op  1.14 pg-cpu-ms/op  0.74 bare-pg-cpu-ms/op  0.92 busy  0.91 bare-busy
BenchmarkConcurrency/saga/clients=64   1  602125518 ns/op  1832 bare/s  0.5396 ratio  988.6 txkit/s
BenchmarkConcurrency/2pc/clients=1-2   1  1 ns/op  424.8 bare/s  129.8 txkit/s  0.3057 ratio  6 pg-commits/op
ok`,
			want: []string{
				"| recipe | clients | txkit/s | bare/s | ratio | p50 ms | p99 ms | PG commits/op (txkit / bare) | PG ceiling/s (pgbench) | CPU ms/op: Go (txkit / bare) | CPU ms/op: PostgreSQL | CPU ms/op: JVMs | machine busy |",
				"| saga | 16 | 920 | 989 | 0.93 | 12.1 | 88.1 | 5.0 / 3.0 | 1610 | 0.66 / 0.50 | 1.14 / 0.74 | — / — | 0.92 / 0.91 |\n| saga | 64 | 989 | 1832 | 0.54 | — | — | — / — | — | — / — | — / — | — / — | — / — |\n| 2pc | 1 | 130 | 425 | 0.31 | — | — | 6.0 / — | — | — / — | — / — | — / — | — / — |",
			},
		},
		{
			name: "the floor table has the rows with a floor side, and only those",
			in: `BenchmarkConcurrency/saga/clients=16-2   1  1 ns/op  1000 bare/s  800 txkit/s  0.8 ratio  880 floor/s  0.88 floor-ratio  0.909 txkit/floor  3.7 pg-commits/op  5.0 floor-pg-commits/op  0.84 go-cpu-ms/op  0.75 floor-go-cpu-ms/op  1.18 pg-cpu-ms/op  1.10 floor-pg-cpu-ms/op
BenchmarkConcurrency/claim/clients=16-2   1  1 ns/op  1000 bare/s  990 txkit/s  0.99 ratio
ok`,
			want: []string{
				"| recipe | clients | txkit/s | bare/s | floor/s | txkit/bare | floor/bare | txkit/floor | PG commits/op (txkit / floor) | CPU ms/op: Go (txkit / floor) | CPU ms/op: PostgreSQL (txkit / floor) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n| saga | 16 | 800 | 1000 | 880 | 0.80 | 0.88 | 0.91 | 3.7 / 5.0 | 0.84 / 0.75 | 1.18 / 1.10 |\n",
				"| claim | 16 | 990 | 1000 | 0.99 |",
			},
			suffix: "| saga | 16 | 800 | 1000 | 880 | 0.80 | 0.88 | 0.91 | 3.7 / 5.0 | 0.84 / 0.75 | 1.18 / 1.10 |\n", // no claim row after it
		},
		{name: "a failed benchmark gives no table", in: "--- FAIL: BenchmarkLocks\nFAIL", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			err := run(strings.NewReader(tc.in), &out)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			if !strings.HasSuffix(out.String(), tc.suffix) {
				t.Errorf("output does not end with %q:\n%s", tc.suffix, out.String())
			}
			if strings.Contains(out.String(), "| clients=") || strings.Contains(out.String(), "| zk | — | — | — |") {
				t.Errorf("a backend without restart figures has a restart row:\n%s", out.String())
			}
		})
	}
}
