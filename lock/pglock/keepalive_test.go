package pglock

import (
	"strconv"
	"testing"
	"time"
)

// TestKeepalive: the server gives up on a silent advisory connection no sooner than 3 check
// intervals + 1 s after the last packet (keepalive: idle + 2 probes a second apart; unacknowledged
// data: the user timeout), so the holder, which gives up within 2 intervals, is told first.
func TestKeepalive(t *testing.T) {
	cases := []struct {
		check           time.Duration
		idle, userTimeo string
	}{
		{100 * time.Millisecond, "1", "2000"},
		{time.Second, "2", "4000"},
		{10 * time.Second / 3, "9", "11000"},
		{20 * time.Second, "59", "61000"},
	}
	for _, tc := range cases {
		t.Run(tc.check.String(), func(t *testing.T) {
			idle, ut := keepalive(tc.check)
			if idle != tc.idle || ut != tc.userTimeo {
				t.Fatalf("keepalive(%v) = %s, %s; want %s, %s", tc.check, idle, ut, tc.idle, tc.userTimeo)
			}
			i, _ := strconv.Atoi(idle)
			u, _ := strconv.Atoi(ut)
			floor := 3*tc.check + time.Second
			if time.Duration(i+2)*time.Second < floor || time.Duration(u)*time.Millisecond < floor {
				t.Fatalf("keepalive(%v): the server could give up before %v", tc.check, floor)
			}
		})
	}
}
