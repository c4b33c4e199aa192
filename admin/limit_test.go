package admin

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	type step struct {
		advance time.Duration
		addr    string
		want    bool
	}
	for _, tc := range []struct {
		name  string
		rate  float64
		burst int
		steps []step
	}{
		{"burst, then refused", 1, 2, []step{{0, "10.0.0.1:1", true}, {0, "10.0.0.1:2", true}, {0, "10.0.0.1:3", false}}},
		{"refills at the rate", 2, 1, []step{{0, "10.0.0.1:1", true}, {0, "10.0.0.1:1", false},
			{400 * time.Millisecond, "10.0.0.1:1", false}, {100 * time.Millisecond, "10.0.0.1:1", true}}},
		{"per address, port ignored", 1, 1, []step{{0, "10.0.0.1:1", true}, {0, "10.0.0.2:1", true},
			{0, "10.0.0.1:9", false}, {0, "[::1]:5", true}, {0, "[::1]:6", false}}},
		{"never above the burst", 10, 2, []step{{time.Hour, "a:1", true}, {0, "a:1", true}, {0, "a:1", false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1_800_000_000, 0)
			l := newLimiter(tc.rate, tc.burst, func() time.Time { return now })
			for i, s := range tc.steps {
				now = now.Add(s.advance)
				if got := l.allow(s.addr); got != s.want {
					t.Fatalf("step %d (%s after %v): allow = %v, want %v", i, s.addr, s.advance, got, s.want)
				}
			}
		})
	}
}

// Past maxAddrs addresses, buckets that refilled are forgotten; while none has, new addresses
// share one bucket, so the table never grows past the bound.
func TestLimiterBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := newLimiter(1, 1, func() time.Time { return now })
	for i := range maxAddrs {
		if !l.allow("10.1." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":1") {
			t.Fatalf("address %d refused on its first request", i)
		}
	}
	if !l.allow("10.9.9.9:1") || l.allow("10.9.9.8:1") {
		t.Fatal("past the bound, new addresses do not share one bucket")
	}
	if len(l.buckets) > maxAddrs+1 {
		t.Fatalf("%d buckets, bound %d", len(l.buckets), maxAddrs)
	}
	now = now.Add(time.Second) // every bucket refills: the next new address finds room
	if !l.allow("10.9.9.7:1") || len(l.buckets) > 2 {
		t.Fatalf("full buckets not forgotten: %d left", len(l.buckets))
	}
}

// Refusals are logged once per logEvery; the next line says how many were left out.
func TestRefusalsSampled(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var buf bytes.Buffer
	f, err := newRefusals(nil, slog.New(slog.NewTextHandler(&buf, nil)), func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/api/outbox/dead/x/requeue", nil)
	for range 5 {
		f.add(r, refusedUnauthorized, errors.New("no credentials"))
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines for 5 refusals within %v:\n%s", n, logEvery, &buf)
	}
	now = now.Add(logEvery)
	f.add(r, refusedRateLimited, nil)
	if lines := strings.Split(strings.TrimSpace(buf.String()), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "refused_since_last_line=4") {
		t.Fatalf("after %v: %q", logEvery, lines)
	}
}
