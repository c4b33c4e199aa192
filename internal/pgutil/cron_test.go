package pgutil

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestCronParser(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 300_000_000, time.UTC)
	for _, c := range []struct {
		spec string
		next time.Time // zero: refused
	}{
		{"@every 200ms", at.Add(200 * time.Millisecond)},
		{"@every 1.5s", at.Add(1500 * time.Millisecond)},
		{"@every 1s", at.Add(time.Second)},
		{"*/2 * * * * *", time.Date(2026, 11, 22, 10, 0, 2, 0, time.UTC)},
		{"0 * * * *", time.Date(2026, 11, 22, 11, 0, 0, 0, time.UTC)},
		{"@hourly", time.Date(2026, 11, 22, 11, 0, 0, 0, time.UTC)},
		{"@every 0s", time.Time{}},
		{"@every -1s", time.Time{}},
		{"@every soon", time.Time{}},
		{"* * *", time.Time{}},
	} {
		s, err := CronParser().Parse(c.spec)
		if c.next.IsZero() {
			if err == nil || CheckCron(c.spec) == nil {
				t.Errorf("%q accepted, want refused", c.spec)
			}
			continue
		}
		if err != nil || CheckCron(c.spec) != nil {
			t.Errorf("%q: %v", c.spec, err)
			continue
		}
		if got := s.Next(at); !got.Equal(c.next) {
			t.Errorf("%q: next after %v is %v, want %v", c.spec, at, got, c.next)
		}
	}
}

func TestChannel(t *testing.T) {
	long := "s" + strings.Repeat("é", 40) // 81 bytes
	for _, c := range []struct{ schema, table, want string }{
		{"", "txkit_notify", "txkit_notify"},
		{"app", "txkit_notify", "app.txkit_notify"},
	} {
		if got := Channel(c.schema, c.table); got != c.want {
			t.Errorf("Channel(%q, %q) = %q, want %q", c.schema, c.table, got, c.want)
		}
	}
	a, b := Channel(long, "txkit_notify"), Channel(long+"x", "txkit_notify")
	for _, ch := range []string{a, b} {
		if len(ch) > 63 || !utf8.ValidString(ch) {
			t.Errorf("Channel of a long name = %q (%d bytes): want valid UTF-8 of at most 63 bytes", ch, len(ch))
		}
	}
	if a == b {
		t.Errorf("two long names share the channel %q", a)
	}
	if a != Channel(long, "txkit_notify") {
		t.Error("Channel is not stable")
	}
}
