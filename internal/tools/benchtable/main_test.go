package main

import (
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string // lines the output must contain
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
			if strings.Contains(out.String(), "| zk | — | — | — |") {
				t.Errorf("a backend without restart figures has a restart row:\n%s", out.String())
			}
		})
	}
}
