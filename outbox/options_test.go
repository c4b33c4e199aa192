package outbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/lock"
)

func TestNewOptions(t *testing.T) {
	tests := []struct {
		name        string
		opts        []Option
		wantErr     bool
		wantTable   string
		wantChannel string
	}{
		{"defaults", nil, false, "txkit_outbox", "txkit_outbox"},
		{"schema", []Option{WithTable("Orders", "")}, false, "Orders.txkit_outbox", "Orders.txkit_outbox"},
		{"table with quote", []Option{WithTable("", `we"ird`)}, false, `we"ird`, `we"ird`},
		{"own channel", []Option{ChannelForTest("wake_up")}, false, "txkit_outbox", "wake_up"},
		{"long schema: channel shortened with a hash", []Option{WithTable(strings.Repeat("s", 60), "")}, false,
			strings.Repeat("s", 60) + ".txkit_outbox", pgutil.Channel(strings.Repeat("s", 60), "txkit_outbox")},
		{"table too long", []Option{WithTable("", strings.Repeat("t", 52))}, true, "", ""},
		{"longest table", []Option{WithTable("", strings.Repeat("t", 51))}, false, strings.Repeat("t", 51), strings.Repeat("t", 51)},
		{"schema with NUL", []Option{WithTable("a\x00b", "")}, true, "", ""},
		{"table not UTF-8", []Option{WithTable("", "\xff")}, true, "", ""},
		{"channel too long", []Option{ChannelForTest(strings.Repeat("c", 64))}, true, "", ""},
		{"zero body limit", []Option{MaxBodySizeForTest(0)}, true, "", ""},
		{"12 partitions", []Option{WithPartitions(12)}, false, "txkit_outbox", "txkit_outbox"},
		{"most partitions", []Option{WithPartitions(MaxPartitions)}, false, "txkit_outbox", "txkit_outbox"},
		{"0 partitions", []Option{WithPartitions(0)}, true, "", ""},
		{"too many partitions", []Option{WithPartitions(MaxPartitions + 1)}, true, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ob, err := New(&pgxpool.Pool{}, tc.opts...)
			if tc.wantErr {
				if !errors.Is(err, ErrInvalidOption) {
					t.Fatalf("New() error = %v, want ErrInvalidOption", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New() error = %v", err)
			}
			if ob.Table() != tc.wantTable || ob.Channel() != tc.wantChannel {
				t.Fatalf("table, channel = %q, %q; want %q, %q", ob.Table(), ob.Channel(), tc.wantTable, tc.wantChannel)
			}
		})
	}
}

func TestRelayOptions(t *testing.T) {
	tests := []struct {
		name    string
		opts    []RelayOption
		wantErr bool
	}{
		{"defaults", nil, false},
		{"batch 1", []RelayOption{WithSchedule("@every 1s", 1)}, false},
		{"batch 0", []RelayOption{WithSchedule("@every 1s", 0)}, true},
		{"batch too large", []RelayOption{WithSchedule("@every 1s", maxBatch+1)}, true},
		{"batch bytes 1 KiB", []RelayOption{BatchBytesForTest(1 << 10)}, false},
		{"batch bytes below 1 KiB", []RelayOption{BatchBytesForTest(1<<10 - 1)}, true},
		{"batch bytes above 1 GiB", []RelayOption{BatchBytesForTest(1<<30 + 1)}, true},
		{"concurrency 0", []RelayOption{ConcurrencyForTest(0)}, true},
		{"max attempts 1", []RelayOption{WithRetry(1, time.Second, time.Minute)}, false},
		{"max attempts 0", []RelayOption{WithRetry(0, time.Second, time.Minute)}, true},
		{"backoff base below 1ms", []RelayOption{WithRetry(16, time.Microsecond, time.Second)}, true},
		{"backoff cap below base", []RelayOption{WithRetry(16, time.Second, time.Millisecond)}, true},
		{"backoff cap equals base", []RelayOption{WithRetry(16, time.Second, time.Second)}, false},
		{"publish timeout 0", []RelayOption{PublishTimeoutForTest(0)}, true},
		{"schedule with seconds", []RelayOption{WithSchedule("*/2 * * * * *", 128)}, false},
		{"schedule standard", []RelayOption{WithSchedule("*/5 * * * *", 128)}, false},
		{"schedule descriptor", []RelayOption{WithSchedule("@every 250ms", 128)}, false},
		{"schedule garbage", []RelayOption{WithSchedule("every second", 128)}, true},
		{"nil logger keeps the default", []RelayOption{WithLogger(nil)}, false},
		{"max in flight one batch", []RelayOption{WithSchedule("@every 1s", 16), MaxInFlightForTest(16)}, false},
		{"max in flight below a batch", []RelayOption{WithSchedule("@every 1s", 16), MaxInFlightForTest(15)}, true},
		{"max in flight negative", []RelayOption{MaxInFlightForTest(-1)}, true},
		{"electors", []RelayOption{WithElectors(noElector, nil)}, false},
		{"elector and electors", []RelayOption{WithElector(&lock.Election{}), WithElectors(noElector, nil)}, true},
		{"electors with a count", []RelayOption{WithElectors(noElector, ContenderCount(noInspector{}, "/e/p0"))}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := defaultRelayOptions()
			for _, opt := range tc.opts {
				opt(&o)
			}
			err := o.validate()
			if tc.wantErr != (err != nil) {
				t.Fatalf("validate() = %v, want error: %v", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrInvalidOption) {
				t.Fatalf("validate() = %v, want it to wrap ErrInvalidOption", err)
			}
			if o.log == nil {
				t.Fatal("logger is nil")
			}
		})
	}
}

func noElector(int) (lock.Elector, error) { return &lock.Election{}, nil }

type noInspector struct{}

func (noInspector) Contenders(context.Context, string) ([]lock.Contender, bool, error) {
	return nil, false, nil
}

func TestInFlightDefault(t *testing.T) {
	o := defaultRelayOptions()
	WithSchedule("@every 1s", 128)(&o)
	if got := o.maxInFlight(); got != 2*128+2*16 {
		t.Fatalf("default max in flight at batch 128, concurrency 16 = %d, want %d", got, 2*128+2*16)
	}
	MaxInFlightForTest(500)(&o)
	if got := o.maxInFlight(); got != 500 {
		t.Fatalf("max in flight = %d, want 500", got)
	}
}

func TestNewRelayNilArguments(t *testing.T) {
	_, err := NewRelay(nil, nil)
	if !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("NewRelay(nil, nil) = %v, want ErrInvalidOption", err)
	}
	if _, err := New(nil); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("New(nil) = %v, want ErrInvalidOption", err)
	}
	ob, err := New(&pgxpool.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewRelay(ob, fakePublisher{}, WithElector(nil)); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("NewRelay(WithElector(nil)) = %v, want ErrInvalidOption", err)
	}
	r, err := NewRelay(ob, fakePublisher{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(t.Context()); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("Run without an elector = %v, want ErrInvalidOption", err)
	}
}

func TestBackoffBounds(t *testing.T) {
	const base, cap = time.Second, time.Minute
	tests := []struct {
		name   string
		n      int
		lo, hi time.Duration
	}{
		{"first failure", 1, 500 * time.Millisecond, time.Second},
		{"second failure", 2, time.Second, 2 * time.Second},
		{"sixth failure", 6, 16 * time.Second, 32 * time.Second},
		{"capped", 7, 30 * time.Second, time.Minute},
		{"far beyond the cap", 1000, 30 * time.Second, time.Minute},
		{"zero treated as first", 0, 500 * time.Millisecond, time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lo, hi := backoffBounds(base, cap, tc.n)
			if lo != tc.lo || hi != tc.hi {
				t.Fatalf("backoffBounds(%v, %v, %d) = [%v, %v], want [%v, %v]", base, cap, tc.n, lo, hi, tc.lo, tc.hi)
			}
		})
	}
	// The bounds never shrink from one failure to the next, and never pass the cap.
	prevHi := time.Duration(0)
	for n := 1; n <= 100; n++ {
		lo, hi := backoffBounds(time.Millisecond, 10*time.Minute, n)
		if hi < prevHi || hi > 10*time.Minute || lo != hi/2 {
			t.Fatalf("n=%d: [%v, %v] after hi %v", n, lo, hi, prevHi)
		}
		prevHi = hi
	}
}

// fakePublisher is a Publisher that is never called.
type fakePublisher struct{}

func (fakePublisher) Publish(context.Context, Message) error { return nil }
