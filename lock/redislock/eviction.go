package redislock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// evictionCheck is what one instance told of its maxmemory-policy.
type evictionCheck struct {
	mu   sync.Mutex
	done bool   // noeviction, or CONFIG GET refused (warned): not asked again
	bad  string // the last policy read that is not noeviction: asked again, so that a fix heals
}

// checkEviction reads maxmemory-policy (CONFIG GET) on the instances not checked yet, in
// parallel, waiting at most the instance timeout, and returns an error wrapping
// [ErrEvictionPolicy] when one's is not noeviction. An instance that refuses CONFIG GET (an ACL,
// a renamed command, a managed service) is warned about once and taken as it is; one that does
// not answer is asked again at the next acquisition; one with another policy is asked again every
// time, so that an operator's CONFIG SET heals it without a restart.
func (g *group) checkEviction(ctx context.Context) error {
	if !slices.ContainsFunc(g.inst, func(in *instance) bool { return !in.evictionChecked() }) {
		return nil
	}
	g.fanout(ctx, g.o.instanceTimeout(), func(ctx context.Context, in *instance) reply {
		return in.checkEviction(ctx, g.o.log, slices.Index(g.inst, in))
	}, nil, nil)
	var errs []error
	for i, in := range g.inst {
		in.ev.mu.Lock()
		if p := in.ev.bad; p != "" {
			if len(g.inst) == 1 {
				errs = append(errs, fmt.Errorf("the server's is %s", p))
			} else {
				errs = append(errs, fmt.Errorf("instance %d's is %s", i, p))
			}
		}
		in.ev.mu.Unlock()
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w (%w): set maxmemory-policy noeviction", ErrEvictionPolicy, errors.Join(errs...))
	}
	return nil
}

func (in *instance) evictionChecked() bool {
	in.ev.mu.Lock()
	defer in.ev.mu.Unlock()
	return in.ev.done
}

// checkEviction asks the instance (number i, for the log) for its maxmemory-policy unless it
// answered before.
func (in *instance) checkEviction(ctx context.Context, log *slog.Logger, i int) reply {
	if in.evictionChecked() {
		return reply{answered: true, ok: true}
	}
	v, err := in.rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	policy, known := v["maxmemory-policy"]
	if err != nil && !refused(err) {
		return reply{err: err} // not answered: asked again next time
	}
	in.ev.mu.Lock()
	defer in.ev.mu.Unlock()
	switch {
	case in.ev.done:
	case err != nil || !known:
		in.ev.done = true
		log.Warn("lock: cannot read maxmemory-policy (CONFIG GET refused); it must be noeviction, or a held lock's key can be evicted",
			"instance", i, "err", err)
	case policy == "noeviction":
		in.ev.done, in.ev.bad = true, ""
	default:
		in.ev.bad = policy
	}
	return reply{answered: true, ok: true}
}

// refused reports whether err is the server's refusal of a command (no permission, unknown or
// renamed command), not a state that passes (loading, failover, too many clients) or a network
// error.
func refused(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && !redis.IsLoadingError(err) && !redis.IsTryAgainError(err) &&
		!redis.IsClusterDownError(err) && !redis.IsMasterDownError(err) && !redis.IsMaxClientsError(err) &&
		!redis.IsAuthError(err)
}
