package shard

import (
	"context"
	"fmt"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/saga"
	"github.com/txkit/txkit/tcc"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/twopc"
)

// Coordinator is what a [Router] routes to: a *tcc.Coordinator (G is *tcc.Global), a
// *saga.Coordinator (*saga.Saga), a *twopc.Coordinator (*twopc.Global) or a *threepc.Coordinator
// (*threepc.Global). Only these implement it.
type Coordinator[G any] interface {
	coordinator.Base
	Begin(ctx context.Context, opts ...coordinator.BeginOption) (G, error)
	Run(ctx context.Context) error
	Stats() coordinator.Stats
}

// Router spreads the transactions of one protocol over the logs of several coordinators, its
// shards: a transaction lives on the shard its gid hashes to. It implements [coordinator.Base].
//
// Router is safe for concurrent use by multiple goroutines.
type Router[G any, C Coordinator[G]] struct {
	shards []C
	next   atomic.Uint64 // round robin of the gids the router makes
}

// New returns a Router over shards, given in the same order by every instance: shard i is the
// coordinator over the i-th log database. Each is built by the caller as usual — over its own
// pool, with its own elector (an election of its own: another path or resource name per shard) —
// and from then on belongs to the Router: New makes it shard i of len(shards), so that its Begin
// makes only gids of its shard, and its Migrate and Run store that with its log and refuse a log
// stored as another shard or with another number of shards (an error wrapping
// [coordinator.ErrInvalidOption]). New refuses, the same way, no shard, a nil one, one given
// twice or to another Router at another place, and then changes none. It does not block.
//
//	r, err := shard.New(c0, c1, c2)
func New[G any, C Coordinator[G]](shards ...C) (*Router[G, C], error) {
	bases := make([]*core.Base, len(shards))
	for i, c := range shards {
		if bases[i] = baseOf(c); bases[i] == nil {
			return nil, fmt.Errorf("shard: shard %d: %T is not a coordinator of this module: %w", i, c, coordinator.ErrInvalidOption)
		}
	}
	if err := core.SetShards(bases); err != nil {
		return nil, fmt.Errorf("shard: %w", err)
	}
	return &Router[G, C]{shards: append([]C(nil), shards...)}, nil
}

// baseOf returns the core of one of the four coordinators, nil for anything else.
func baseOf(c any) *core.Base {
	var b coordinator.Base
	switch c := c.(type) {
	case *tcc.Coordinator:
		b = c.Base
	case *saga.Coordinator:
		b = c.Base
	case *twopc.Coordinator:
		b = c.Base
	case *threepc.Coordinator:
		b = c.Base
	}
	cb, _ := b.(*core.Base)
	return cb
}

// Shards returns the shards in their order, for what is set on each (twopc's RegisterDB, Close).
func (r *Router[G, C]) Shards() []C { return append([]C(nil), r.shards...) }

// For returns the shard that holds (or will hold) the transaction gid. It does not block.
func (r *Router[G, C]) For(gid string) C { return r.shards[core.ShardOf(gid, len(r.shards))] }

// Begin begins a transaction on its shard and returns it, with the Begin of that shard's
// coordinator (its blocking and errors): given [coordinator.WithGID], on the shard the gid hashes
// to; else on the shards in turn, each making a gid of its own.
func (r *Router[G, C]) Begin(ctx context.Context, opts ...coordinator.BeginOption) (G, error) {
	var given core.BeginConfig
	for _, opt := range opts {
		opt(&given)
	}
	if given.GID != "" {
		return r.For(given.GID).Begin(ctx, opts...)
	}
	return r.shards[(r.next.Add(1)-1)%uint64(len(r.shards))].Begin(ctx, opts...)
}

// Migrate migrates every shard's log in turn, and stores which shard it is ([New]). It stops at
// the first error, which names the shard.
func (r *Router[G, C]) Migrate(ctx context.Context) error {
	for i, c := range r.shards {
		if err := c.Migrate(ctx); err != nil {
			return fmt.Errorf("shard: shard %d: %w", i, err)
		}
	}
	return nil
}

// Register registers p as name with every shard (any of them may recover a transaction of it)
// and returns the participant to put in branches of any shard. An error names the shard; the
// shards before it keep the registration.
func (r *Router[G, C]) Register(name string, p participant.Participant) (participant.Participant, error) {
	var h participant.Participant
	for i, c := range r.shards {
		hi, err := c.Register(name, p)
		if err != nil {
			return nil, fmt.Errorf("shard: shard %d: %w", i, err)
		}
		if i == 0 {
			h = hi
		}
	}
	return h, nil
}

// Status returns the status of gid from its shard ([coordinator.Base.Status]).
func (r *Router[G, C]) Status(ctx context.Context, gid string) (coordinator.Status, error) {
	return r.For(gid).Status(ctx, gid)
}

// Flush flushes every shard at once ([coordinator.Base.Flush]); the first error, naming its
// shard, ends the others' waits and is returned.
func (r *Router[G, C]) Flush(ctx context.Context) error {
	return r.each(ctx, func(ctx context.Context, c C) error { return c.Flush(ctx) })
}

// Run runs every shard's Run at once — each recovers its own log under its own election and
// fence — until ctx ends, then returns nil once all have returned. The first shard whose Run
// fails ends the others, and its error (naming the shard) is returned.
func (r *Router[G, C]) Run(ctx context.Context) error {
	return r.each(ctx, func(ctx context.Context, c C) error { return c.Run(ctx) })
}

func (r *Router[G, C]) each(ctx context.Context, f func(context.Context, C) error) error {
	g, ctx := errgroup.WithContext(ctx)
	for i, c := range r.shards {
		g.Go(func() error {
			if err := f(ctx, c); err != nil {
				return fmt.Errorf("shard: shard %d: %w", i, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// Stats returns the sum of the shards' counters.
func (r *Router[G, C]) Stats() coordinator.Stats {
	var s coordinator.Stats
	for _, c := range r.shards {
		t := c.Stats()
		s.Committed += t.Committed
		s.Aborted += t.Aborted
		s.Failures += t.Failures
		s.Violations += t.Violations
		s.Resolved += t.Resolved
		s.AgentAborts += t.AgentAborts
	}
	return s
}
