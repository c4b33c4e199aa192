package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
)

// fenceCmd runs `txkit fence show|reset`: the tokens a fence.Fence recorded, and forgetting one
// that fences every holder because it came from an ensemble since rebuilt (see fence.Fence.Reset).
func fenceCmd(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	var pg pgFlags
	schema, table, zkAddrs := "", "txkit_fence", getenv("TXKIT_ZK")
	register := func(fs *flag.FlagSet) {
		pg.register(fs)
		fs.StringVar(&schema, "schema", schema, "schema of the fence table")
		fs.StringVar(&table, "table", table, "fence table")
		fs.StringVar(&zkAddrs, "zk", zkAddrs, "ZooKeeper servers, host:port,...")
	}
	verb, vs, rest, err := subcommand("fence", args, register, "show, reset")
	if err != nil {
		return err
	}
	var resource, lockPath string
	switch verb {
	case "show", "reset":
		vs.StringVar(&resource, "resource", "", "the fenced resource")
		vs.StringVar(&lockPath, "path", "", "the ZooKeeper lock path whose holders write to the resource")
	default:
		return usageErr("fence: unknown verb %q", verb)
	}
	if err := parse(vs, rest); err != nil {
		return err
	}
	if len(vs.Args()) > 0 {
		return usageErr("fence %s: unexpected arguments %q", verb, vs.Args())
	}
	if verb == "reset" && (resource == "" || lockPath == "") {
		return usageErr("fence reset: give -resource and -path")
	}
	if lockPath != "" && zkAddrs == "" {
		return usageErr("fence %s: -path needs ZooKeeper: set -zk or TXKIT_ZK", verb)
	}
	opts := []fence.Option{fence.WithTable(table)}
	if schema != "" {
		opts = append(opts, fence.WithSchema(schema))
	}
	pgURL, err := pg.resolve(getenv)
	if err != nil {
		return err
	}
	pool, err := newPool(ctx, pgURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	f, err := fence.New(pool, opts...)
	if err != nil {
		return usageErr("%v", err)
	}

	// The lock path's epoch first: it decides what reset may forget.
	var epoch int64
	if lockPath != "" {
		auth, ok := zkAuth(getenv)
		if !ok {
			auth = zklock.WithInsecureWorldACL() // it creates nothing, and reading the epoch needs no permission
		}
		if epoch, err = lockEpoch(ctx, strings.Split(zkAddrs, ","), lockPath, auth); err != nil {
			return err
		}
	}
	if err := connect(ctx, pool); err != nil {
		return err
	}
	conn := pool

	if verb == "reset" {
		e, ok, err := f.Reset(ctx, conn, resource, epoch)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("fence reset: %q has no token with an epoch above %s's (%d): nothing to reset (see txkit fence show)",
				resource, lockPath, epoch)
		}
		_, err = fmt.Fprintf(stdout, "reset %s: forgot token %s (epoch above %s's %d); its next holder's write records its own\n",
			printable(resource), e.Token, lockPath, epoch)
		return err
	}
	es, err := f.Entries(ctx, conn, resource)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if lockPath != "" {
		fmt.Fprintf(tw, "lock path %s: epoch %d\n\n", lockPath, epoch)
	}
	if len(es) == 0 {
		fmt.Fprintln(tw, "no fenced resources")
		return tw.Flush()
	}
	fmt.Fprintln(tw, "RESOURCE\tTOKEN\tUPDATED\tSTATE")
	for _, e := range es {
		state := "-"
		if lockPath != "" {
			state = "ok"
			if e.Token.Epoch > epoch {
				state = "AHEAD: every holder of the lock path is fenced (txkit fence reset)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", oneLine(e.Resource, 80), e.Token, e.UpdatedAt.UTC().Format(time.RFC3339), state)
	}
	return tw.Flush()
}

// zkAuth returns the option that authenticates a ZooKeeper session as the digest user of
// $TXKIT_ZK_AUTH ("user:password"; from the environment, since a flag would show the password in
// the process list), and whether the variable is set.
func zkAuth(getenv func(string) string) (zklock.SessionOption, bool) {
	v := getenv("TXKIT_ZK_AUTH")
	return zklock.WithAuth("digest", []byte(v)), v != ""
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
