package redislock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txkit/txkit/internal/testkit/testenv"
)

// TestIntegrationAcquireScript runs the acquisition script on the server: a repeat with the same
// value (go-redis repeats a command whose connection dropped before the reply) answers as the
// first run did; another value is refused with the key's PTTL and its holder's value.
func TestIntegrationAcquireScript(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	in := &instance{rdb: rdb}
	key := "txkit:test:{" + testenv.Name(t) + "}"
	counter := key + ":fence"
	ctx := t.Context()
	t.Cleanup(func() { rdb.Del(context.Background(), key, counter) })

	first := in.acquire(ctx, key, counter, newValue("id-1", "a"), 10*time.Second)
	again := in.acquire(ctx, key, counter, newValue("id-1", "a"), 10*time.Second)
	other := in.acquire(ctx, key, counter, newValue("id-2", "b"), 10*time.Second)
	for _, r := range []reply{first, again, other} {
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	if !first.ok || first.n <= 0 {
		t.Fatalf("first run: %+v, want ok with a counter", first)
	}
	if !again.ok || again.n != first.n {
		t.Fatalf("repeated run: %+v, want ok with the first run's counter %d", again, first.n)
	}
	if other.ok || other.n <= 0 || other.n > 10000 || holderData(other.data) != "a" {
		t.Fatalf("another value: %+v, want refused with a PTTL in (0, 10000] and holder data \"a\"", other)
	}
	if now, err := rdb.Time(ctx).Result(); err != nil || first.n < now.Add(-time.Minute).UnixMicro() {
		t.Errorf("counter %d is not the server's time in µs (TIME %v, %v): the hybrid clock is off", first.n, now, err)
	}
}
