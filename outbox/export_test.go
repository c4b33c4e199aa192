package outbox

import (
	"time"

	"github.com/txkit/txkit/fence"
)

// Settings only tests change: seams of the package's tests, not options of its API.

// NotifyForTest turns the NOTIFY that Enqueue issues on or off (default on), for the benchmarks
// that compare the two.
func NotifyForTest(on bool) Option { return func(o *options) { o.notify = on } }

// HandOffForTest turns Do's hand-over after the commit on or off (default on): off, Do's
// process behaves as one that died between its commit and the hand-over.
func HandOffForTest(on bool) Option { return func(o *options) { o.handOff = on } }

// MaxBodySizeForTest sets the largest body Enqueue accepts (default MaxBodySize).
func MaxBodySizeForTest(n int) Option { return func(o *options) { o.maxBody = n } }

// ChannelForTest sets the LISTEN/NOTIFY channel instead of the one derived from schema and table.
func ChannelForTest(name string) Option { return func(o *options) { o.channel = name } }

// BatchBytesForTest sets the byte bound of one batch (default DefaultBatchBytes).
func BatchBytesForTest(n int) RelayOption { return func(o *relayOptions) { o.batchBytes = n } }

// MaxInFlightForTest sets the bound on the messages a relay holds at once (default 0: twice the
// batch size plus twice the concurrency).
func MaxInFlightForTest(n int) RelayOption { return func(o *relayOptions) { o.inFlight = n } }

// PublishTimeoutForTest sets the bound of each Publish call (default 30 s).
func PublishTimeoutForTest(d time.Duration) RelayOption {
	return func(o *relayOptions) { o.publishTimeout = d }
}

// FenceForTest sets the fence the relay passes (default: txkit_fence in the outbox's schema).
func FenceForTest(f *fence.Fence) RelayOption { return func(o *relayOptions) { o.fence = f } }

// ConcurrencyForTest sets how many keys of one batch are published at once (default 16).
func ConcurrencyForTest(n int) RelayOption { return func(o *relayOptions) { o.concurrency = n } }

// RecordLingerForTest sets how long a record waits for the publishes under way (default 2 ms).
func RecordLingerForTest(d time.Duration) RelayOption {
	return func(o *relayOptions) { o.recordLinger = d }
}
