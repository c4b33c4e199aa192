package obs

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// LogInterval is how often a [LogLimiter] of txkit's components writes a line of one key: a
// failure repeated for every message during an outage is written about once per LogInterval,
// with the count of those not written.
const LogInterval = 5 * time.Second

// maxLogKeys bounds the keys a LogLimiter remembers; lines of keys beyond it share one key.
const maxLogKeys = 1024

// overflowKey is the key shared by the lines of keys beyond maxLogKeys.
const overflowKey = "\x00overflow"

// LogLimiter bounds the log lines of failures that repeat — a publish failing for every message
// while the broker is away, a handler failing for every message while PostgreSQL restarts — to
// about one line per key per interval. [LogLimiter.Log] writes a line of a key when none of that
// key was written in the last interval and otherwise holds it back and counts it;
// [LogLimiter.Flush] writes the last line held back of each key whose interval has ended. Every
// line written carries "suppressed"=N when N > 0: the lines of its key held back, not written,
// since the previous line of that key. So no count is lost, and an outage of any length costs a
// line per key per interval.
//
// Keys are the caller's: a topic, a receiver, a log message; at most 1024 are remembered at once
// (the lines of further keys share one). A LogLimiter is safe for concurrent use by multiple
// goroutines.
type LogLimiter struct {
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	keys map[string]*logKey
	due  atomic.Int64 // unix ns of the earliest interval end of a key with lines held back; MaxInt64: none
}

type logKey struct {
	next time.Time // a line of the key is written from then on
	held int       // lines held back since the last one written
	last heldLine  // the last of them
}

// heldLine is a line held back, written by Flush when its key's interval ends.
type heldLine struct {
	ctx   context.Context
	l     *slog.Logger
	level slog.Level
	msg   string
	attrs []slog.Attr
}

// NewLogLimiter returns a LogLimiter that writes a line of a key at most once per every (plus
// the lines Flush writes), reading the time from now (nil: time.Now).
func NewLogLimiter(every time.Duration, now func() time.Time) *LogLimiter {
	if now == nil {
		now = time.Now
	}
	ll := &LogLimiter{every: every, now: now, keys: map[string]*logKey{}}
	ll.due.Store(math.MaxInt64)
	return ll
}

// Log writes msg with attrs at level to l, in ctx, unless a line of key was written less than an
// interval ago: then it holds the line back and counts it (see [LogLimiter]). A line that l does
// not enable is neither written nor counted.
func (ll *LogLimiter) Log(ctx context.Context, l *slog.Logger, key string, level slog.Level, msg string, attrs ...slog.Attr) {
	if !l.Enabled(ctx, level) {
		return
	}
	now := ll.now()
	ll.mu.Lock()
	k := ll.key(key, now)
	if now.Before(k.next) {
		k.held++
		k.last = heldLine{ctx: ctx, l: l, level: level, msg: msg, attrs: slices.Clone(attrs)}
		if n := k.next.UnixNano(); n < ll.due.Load() {
			ll.due.Store(n)
		}
		ll.mu.Unlock()
		return
	}
	held := k.held
	k.next, k.held, k.last = now.Add(ll.every), 0, heldLine{}
	ll.mu.Unlock()
	if held > 0 {
		attrs = append(attrs[:len(attrs):len(attrs)], slog.Int("suppressed", held))
	}
	l.LogAttrs(ctx, level, msg, attrs...)
}

// key returns key's state, made when missing; called with mu held.
func (ll *LogLimiter) key(key string, now time.Time) *logKey {
	if k := ll.keys[key]; k != nil {
		return k
	}
	if len(ll.keys) >= maxLogKeys {
		for kk, k := range ll.keys { // forget the keys that are quiet
			if k.held == 0 && !now.Before(k.next) {
				delete(ll.keys, kk)
			}
		}
		if len(ll.keys) >= maxLogKeys {
			key = overflowKey
			if k := ll.keys[key]; k != nil {
				return k
			}
		}
	}
	k := &logKey{}
	ll.keys[key] = k
	return k
}

// Flush writes, for each key whose interval has ended with lines held back, the last of them
// (with "suppressed"=the others), which starts the key's next interval; and forgets the keys that
// are quiet. It costs an atomic load when no interval with lines held back has ended: call it
// often (after each unit of work, or on a ticker).
func (ll *LogLimiter) Flush() { ll.flush(false) }

// FlushAll writes, as Flush does, the last line held back of every key, whether its interval has
// ended or not: for when the work whose failures are limited stops.
func (ll *LogLimiter) FlushAll() { ll.flush(true) }

func (ll *LogLimiter) flush(all bool) {
	now := ll.now()
	if !all && now.UnixNano() < ll.due.Load() {
		return
	}
	var lines []heldLine
	ll.mu.Lock()
	due := int64(math.MaxInt64)
	for key, k := range ll.keys {
		switch {
		case now.Before(k.next) && (!all || k.held == 0):
			if k.held > 0 {
				due = min(due, k.next.UnixNano())
			}
		case k.held == 0:
			delete(ll.keys, key)
		default:
			h := k.last
			if k.held > 1 {
				h.attrs = append(h.attrs, slog.Int("suppressed", k.held-1))
			}
			lines = append(lines, h)
			k.next, k.held, k.last = now.Add(ll.every), 0, heldLine{}
		}
	}
	ll.due.Store(due)
	ll.mu.Unlock()
	for _, h := range lines {
		h.l.LogAttrs(h.ctx, h.level, h.msg, h.attrs...)
	}
}
