// Command lockwatch holds leader elections on lock backends for a while, with no leader killed,
// and counts the leadership changes: a change is a false failover (a live leader's session or
// lease lost to a GC pause, a slow server or a loaded machine). For each backend of -locks it
// opens -candidates connections (a ZooKeeper session, a PostgreSQL pool, a Redis client each,
// every one with the session timeout or lease TTL -ttl) and runs one candidate on each in one
// election. It prints, per backend, the leadership changes and the terms, and exits 1 when a
// backend had a change.
//
//	go run ./drills/lockwatch -ttl 1s -for 10m     # zk, pg and redis-sentinel, 3 candidates each
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/txkit/txkit/examples/exapp"
	"github.com/txkit/txkit/lock"
)

func main() {
	kinds := flag.String("locks", "zk,pg,redis-sentinel", "lock backends, comma-separated (see exapp.LockKinds)")
	ttl := flag.Duration("ttl", time.Second, "ZooKeeper session timeout, or lease TTL of the other backends")
	dur := flag.Duration("for", 10*time.Minute, "how long to hold the elections")
	candidates := flag.Int("candidates", 3, "candidates (connections) per backend")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	run := "lockwatch-" + uuid.NewString()[:8]
	fmt.Printf("lockwatch %s: %s, ttl %v, %d candidates each, for %v\n", run, *kinds, *ttl, *candidates, *dur)

	type result struct {
		kind  string
		terms []string // "id@offset"
		err   error
	}
	var (
		mu  sync.Mutex
		res = map[string]*result{}
		wg  sync.WaitGroup
	)
	start := time.Now()
	for _, kind := range strings.Split(*kinds, ",") {
		r := &result{kind: kind}
		res[kind] = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.err = watch(ctx, kind, run, *ttl, *dur, *candidates, log, func(id string) {
				mu.Lock()
				r.terms = append(r.terms, fmt.Sprintf("%s@%v", id, time.Since(start).Round(time.Millisecond)))
				mu.Unlock()
				fmt.Printf("  %-15s %v elected %s\n", kind, time.Since(start).Round(time.Millisecond), id)
			})
		}()
	}
	wg.Wait()
	fmt.Printf("\nlockwatch report (ttl %v, %v, no leader killed)\n", *ttl, time.Since(start).Round(time.Second))
	failed := false
	for _, kind := range strings.Split(*kinds, ",") {
		r := res[kind]
		changes := max(len(r.terms)-1, 0)
		status := "ok  "
		if r.err != nil || changes > 0 || len(r.terms) == 0 {
			status, failed = "FAIL", true
		}
		fmt.Printf("  %s %-15s leadership changes: %d (terms: %s)", status, kind, changes, strings.Join(r.terms, ", "))
		if r.err != nil {
			fmt.Printf(" error: %v", r.err)
		}
		fmt.Println()
	}
	if failed {
		os.Exit(1)
	}
}

// watch runs n candidates of one election on kind for d, calling elected at each term's start.
func watch(ctx context.Context, kind, run string, ttl, d time.Duration, n int, log *slog.Logger, elected func(id string)) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		wg   sync.WaitGroup
		errs = make([]error, n)
	)
	for i := range n {
		l, err := exapp.OpenLocks(ctx, kind, log, exapp.WithLockTTL(ttl), exapp.WithZKRoot("/"+run))
		if err != nil {
			return err
		}
		defer func() {
			if i == 0 {
				_ = l.DeleteTree(context.Background(), "")
			}
			_ = l.Close()
		}()
		el, err := l.Elector("lockwatch/"+run, fmt.Sprintf("%s-%d", kind, i))
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = el.RunWhileLeader(ctx, func(ctx context.Context, _ lock.Leadership) error {
				elected(el.ID())
				<-ctx.Done()
				return nil
			})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}
