package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
)

// fenceFlags are the flags of every fence command: the tokens a fence.Fence recorded, and
// forgetting one that fences every holder because it came from an ensemble since rebuilt (see
// fence.Fence.Reset).
func fenceFlags(fs *flag.FlagSet, e *env) {
	e.registerPG(fs, "the fence table")
	fs.StringVar(&e.table, "table", "txkit_fence", "fence `table`")
	fs.StringVar(&e.zk, "zk", e.getenv("TXKIT_ZK"), "ZooKeeper `servers`, host:port,... (default $TXKIT_ZK; $TXKIT_ZK_AUTH: the\n"+
		"digest user:password)")
}

func fenceVerbFlags(fs *flag.FlagSet, e *env) {
	fs.StringVar(&e.resource, "resource", "", "the fenced `resource`")
	fs.StringVar(&e.path, "path", "", "the ZooKeeper lock `path` whose holders write to the resource")
}

// openFence checks a fence command's flags and returns the fence, its pool (the caller closes it),
// connected, and the epoch of the lock path of -path (0 without).
func openFence(ctx context.Context, e *env, verb string) (*fence.Fence, *pgxpool.Pool, int64, error) {
	if err := e.noArgs("fence " + verb); err != nil {
		return nil, nil, 0, err
	}
	if verb == "reset" && (e.resource == "" || e.path == "") {
		return nil, nil, 0, usageErr("fence reset: give -resource and -path")
	}
	if e.path != "" && e.zk == "" {
		return nil, nil, 0, usageErr("fence %s: -path needs ZooKeeper: set -zk or TXKIT_ZK", verb)
	}
	opts := []fence.Option{fence.WithTable(e.schema, e.table)}
	pgURL, err := e.pg.resolve(e.getenv)
	if err != nil {
		return nil, nil, 0, err
	}
	pool, err := newPool(ctx, pgURL)
	if err != nil {
		return nil, nil, 0, err
	}
	f, err := fence.New(pool, opts...)
	if err != nil {
		pool.Close()
		return nil, nil, 0, usageErr("%v", err)
	}
	// The lock path's epoch first: it decides what reset may forget.
	var epoch int64
	if e.path != "" {
		auth, ok := zkAuth(e.getenv)
		if !ok {
			auth = zklock.WithInsecureWorldACL() // it creates nothing, and reading the epoch needs no permission
		}
		if epoch, err = lockEpoch(ctx, strings.Split(e.zk, ","), e.path, auth); err != nil {
			pool.Close()
			return nil, nil, 0, err
		}
	}
	if err := connect(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, 0, err
	}
	return f, pool, epoch, nil
}

// fenceReset runs `txkit fence reset -resource R -path P`.
func fenceReset(ctx context.Context, e *env) error {
	f, pool, epoch, err := openFence(ctx, e, "reset")
	if err != nil {
		return err
	}
	defer pool.Close()
	en, ok, err := f.Reset(ctx, pool, e.resource, epoch)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("fence reset: %q has no token with an epoch above %s's (%d): nothing to reset (see txkit fence show)",
			e.resource, e.path, epoch)
	}
	_, err = fmt.Fprintf(e.stdout, "reset %s: forgot token %s (epoch above %s's %d); its next holder's write records its own\n",
		printable(e.resource), en.Token, e.path, epoch)
	return err
}

// fenceShow runs `txkit fence show`.
func fenceShow(ctx context.Context, e *env) error {
	f, pool, epoch, err := openFence(ctx, e, "show")
	if err != nil {
		return err
	}
	defer pool.Close()
	es, err := f.Entries(ctx, pool, e.resource)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if e.path != "" {
		fmt.Fprintf(tw, "lock path %s: epoch %d\n\n", e.path, epoch)
	}
	if len(es) == 0 {
		fmt.Fprintln(tw, "no fenced resources")
		return tw.Flush()
	}
	fmt.Fprintln(tw, "RESOURCE\tTOKEN\tUPDATED\tSTATE")
	for _, en := range es {
		state := "-"
		if e.path != "" {
			state = "ok"
			if en.Token.Epoch > epoch {
				state = "AHEAD: every holder of the lock path is fenced (txkit fence reset)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", oneLine(en.Resource, 80), en.Token, en.UpdatedAt.UTC().Format(time.RFC3339), state)
	}
	return tw.Flush()
}

// zkAuth returns the option that authenticates a ZooKeeper session as the digest user of
// $TXKIT_ZK_AUTH ("user:password"; from the environment, since a flag would show the password in
// the process list), and whether the variable is set.
func zkAuth(getenv func(string) string) (zklock.SessionOption, bool) {
	v := getenv("TXKIT_ZK_AUTH")
	user, password, _ := strings.Cut(v, ":")
	return zklock.WithDigestAuth(user, password), v != ""
}

// lockEpoch reads lockPath's epoch through a ZooKeeper session of its own.
func lockEpoch(ctx context.Context, servers []string, lockPath string, auth zklock.SessionOption) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	s, err := zklock.NewSession(cctx, servers, auth)
	if err != nil {
		return 0, fmt.Errorf("connect to ZooKeeper: %w", err)
	}
	defer func() { _ = s.Close() }()
	epoch, err := s.LockEpoch(cctx, lockPath)
	if errors.Is(err, zk.ErrNoNode) {
		return 0, fmt.Errorf("lock path %s does not exist (it is created by the first lock or campaign on it): %w", lockPath, err)
	}
	if errors.Is(err, lock.ErrInvalidOption) {
		return 0, usageErr("%v", err)
	}
	return epoch, err
}
