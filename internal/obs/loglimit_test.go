package obs_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/obs"
	"github.com/txkit/txkit/internal/obs/obstest"
)

// The limiter writes a line per key per interval, each carrying the count of the lines held back
// before it, and Flush writes the last line held back once its interval has ended: every line is
// written or counted.
func TestLogLimiter(t *testing.T) {
	type step struct {
		after time.Duration // the clock moves by after before the step
		key   string        // a line of key; a Flush when "", a FlushAll when "!"
	}
	type want struct{ key, n, suppressed string } // a written line: its key, its number, its count
	for _, tc := range []struct {
		name  string
		steps []step
		want  []want
	}{
		{
			name:  "one line of a key is written",
			steps: []step{{0, "a"}},
			want:  []want{{"a", "1", ""}},
		},
		{
			name:  "repeats within the interval are held back, the next line after it carries their count",
			steps: []step{{0, "a"}, {time.Second, "a"}, {time.Second, "a"}, {4 * time.Second, "a"}},
			want:  []want{{"a", "1", ""}, {"a", "4", "2"}},
		},
		{
			name:  "keys are limited apart",
			steps: []step{{0, "a"}, {0, "b"}, {0, "a"}, {0, "b"}},
			want:  []want{{"a", "1", ""}, {"b", "2", ""}},
		},
		{
			name:  "flush before the interval ends writes nothing",
			steps: []step{{0, "a"}, {time.Second, "a"}, {time.Second, ""}},
			want:  []want{{"a", "1", ""}},
		},
		{
			name:  "flush after the interval writes the last line held back, counting the others",
			steps: []step{{0, "a"}, {time.Second, "a"}, {0, "a"}, {0, "a"}, {5 * time.Second, ""}, {0, ""}},
			want:  []want{{"a", "1", ""}, {"a", "4", "2"}},
		},
		{
			name:  "a flushed line starts the key's next interval",
			steps: []step{{0, "a"}, {time.Second, "a"}, {5 * time.Second, ""}, {time.Second, "a"}, {5 * time.Second, "a"}},
			want:  []want{{"a", "1", ""}, {"a", "2", ""}, {"a", "4", "1"}},
		},
		{
			name:  "flush all writes the last line held back before the interval ends",
			steps: []step{{0, "a"}, {0, "b"}, {time.Second, "a"}, {0, "a"}, {0, "!"}, {0, ""}, {0, "!"}},
			want:  []want{{"a", "1", ""}, {"b", "2", ""}, {"a", "4", "1"}},
		},
		{
			name:  "a key quiet for an interval is written at once",
			steps: []step{{0, "a"}, {5 * time.Second, ""}, {time.Second, "a"}},
			want:  []want{{"a", "1", ""}, {"a", "2", ""}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := obstest.NewClock(time.Unix(1000, 0))
			ll := obs.NewLogLimiter(5*time.Second, clock.Now)
			log, logs := obstest.NewLogs()
			n := 0
			for _, s := range tc.steps {
				clock.Add(s.after)
				switch s.key {
				case "":
					ll.Flush()
					continue
				case "!":
					ll.FlushAll()
					continue
				}
				n++
				ll.Log(context.Background(), log, s.key, slog.LevelWarn, "failed", slog.String("key", s.key), slog.Int("n", n))
			}
			lines := logs.Lines("")
			if len(lines) != len(tc.want) {
				t.Fatalf("%d lines written, want %d: %v", len(lines), len(tc.want), lines)
			}
			for i, w := range tc.want {
				got := want{lines[i].Attrs["key"], lines[i].Attrs["n"], lines[i].Attrs["suppressed"]}
				if got != w || lines[i].Level != slog.LevelWarn || lines[i].Msg != "failed" {
					t.Errorf("line %d = %v %q %+v, want WARN \"failed\" %+v", i, lines[i].Level, lines[i].Msg, got, w)
				}
			}
		})
	}
}

// However many keys come, the limiter remembers a bounded number: the lines of keys beyond the
// bound share one interval, so that a flood of distinct keys is limited too.
func TestLogLimiterBoundsKeys(t *testing.T) {
	clock := obstest.NewClock(time.Unix(1000, 0))
	ll := obs.NewLogLimiter(5*time.Second, clock.Now)
	log, logs := obstest.NewLogs()
	for i := range 5000 {
		ll.Log(context.Background(), log, "k"+strconv.Itoa(i), slog.LevelWarn, "failed")
	}
	if n := len(logs.Lines("")); n < 1000 || n > 1100 {
		t.Fatalf("%d lines for 5000 keys, want about 1024", n)
	}
	clock.Add(6 * time.Second)
	ll.Flush() // writes the overflow's last line, forgets the quiet keys
	before := len(logs.Lines(""))
	ll.Log(context.Background(), log, "new", slog.LevelWarn, "failed")
	if len(logs.Lines("")) != before+1 {
		t.Fatal("a new key after the quiet ones were forgotten was not written")
	}
}

// A level the logger does not enable is neither written nor counted.
func TestLogLimiterDisabledLevel(t *testing.T) {
	ll := obs.NewLogLimiter(5*time.Second, nil)
	log := slog.New(slog.DiscardHandler)
	ll.Log(context.Background(), log, "a", slog.LevelWarn, "failed")
	l2, logs := obstest.NewLogs()
	ll.Log(context.Background(), l2, "a", slog.LevelWarn, "failed")
	if got := logs.Lines(""); len(got) != 1 || got[0].Attrs["suppressed"] != "" {
		t.Fatalf("after a discarded line, lines = %v; want one without a count", got)
	}
}

// Lines logged and flushed from many goroutines at once are each written or counted, once.
func TestLogLimiterConcurrent(t *testing.T) {
	ll := obs.NewLogLimiter(time.Millisecond, nil)
	log, logs := obstest.NewLogs()
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				ll.Log(context.Background(), log, "k"+strconv.Itoa(i%3), slog.LevelWarn, "failed")
				if i%50 == g {
					ll.Flush()
				}
			}
		}()
	}
	wg.Wait()
	ll.FlushAll()
	total := 0
	for _, l := range logs.Lines("") {
		n, _ := strconv.Atoi(l.Attrs["suppressed"])
		total += 1 + n
	}
	if total != goroutines*each {
		t.Fatalf("lines and counts add up to %d, want %d", total, goroutines*each)
	}
}
