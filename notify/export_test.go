package notify

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/txkit/txkit/lock"
)

// Post makes one post of d to the receiver called name, as a delivery attempt does, and returns
// whether it was acknowledged and the error text when not.
func (n *Notifier) Post(ctx context.Context, name string, d Delivery) (bool, string) {
	r, ok := n.receivers[name]
	if !ok {
		return false, "no receiver " + name
	}
	res := n.post(ctx, r, d)
	return res.ok, res.err
}

// MetricReceiversForTest sets how many receivers get a circuit gauge series of their own
// (default 50); a seam of the tests, not an option of the API.
func MetricReceiversForTest(n int) Option { return func(o *options) { o.metricReceivers = n } }

// CallTimeoutForTest bounds each delivery's HTTP call (default 10s, or the Timeout of
// WithHTTPClient's client).
func CallTimeoutForTest(d time.Duration) Option { return func(o *options) { o.callTimeout = d } }

// WakeForTest wakes the leader as a NOTIFY on the notifier's channel does (Enqueue no longer
// sends one): the benchmark of the leader's path times a block from then.
func (n *Notifier) WakeForTest(ctx context.Context) error {
	_, err := n.pool.Exec(ctx, `select pg_notify($1, '')`, n.channel)
	return err
}

// PostAfterCommitForTest turns Do's posts after the commit on or off (default on): off, Do's
// process behaves as one that died between its commit and its posts.
func PostAfterCommitForTest(on bool) Option { return func(o *options) { o.postAfterCommit = on } }

// RecordForTest records an acknowledged attempt of each of ids as the leader of partition part
// with tok records its results (fenced), and returns the record's error.
func (n *Notifier) RecordForTest(ctx context.Context, tok lock.Token, part int, ids []uuid.UUID) error {
	batch := make([]result, len(ids))
	for i, id := range ids {
		batch[i] = result{id: id, ok: true, code: 200}
	}
	return n.record(ctx, fenceKey{tok: tok, resource: n.resource(part)}, batch, n.o.log)
}

// FenceResourceForTest returns the fence resource of partition part's writes.
func (n *Notifier) FenceResourceForTest(part int) string { return n.resource(part) }
