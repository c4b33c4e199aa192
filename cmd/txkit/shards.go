package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/admin"
)

// shardFiles is the repeatable -log-shard-file flag: files holding the URLs of a coordinator
// log's other shards (coordinator/shard), in shard order after -pg's, which is shard 0.
type shardFiles []string

func (s *shardFiles) String() string { return strings.Join(*s, ",") }

func (s *shardFiles) Set(v string) error {
	if v == "" {
		return fmt.Errorf("want a file name")
	}
	*s = append(*s, v)
	return nil
}

func registerShards(fs *flag.FlagSet, e *env) {
	fs.Var(&e.shards, "log-shard-file", "`file` holding the PostgreSQL URL of another shard of the coordinator logs\n"+
		"(repeatable, in shard order: -pg's database is shard 0); logs are then named tcc/0, tcc/1, ...")
}

// shardLogs returns the logs of every shard — each of logs on -pg's database (shard 0) and on the
// database of each -log-shard-file, on a pool of at most conns connections — named
// <log>/<shard>, and a func closing those pools; without -log-shard-file, logs as they are.
func (e *env) shardLogs(ctx context.Context, logs []admin.LogSource, conns int32) ([]admin.LogSource, func(), error) {
	if len(e.shards) == 0 {
		return logs, func() {}, nil
	}
	var pools []*pgxpool.Pool
	closeAll := func() {
		for _, p := range pools {
			p.Close()
		}
	}
	out := make([]admin.LogSource, 0, len(logs)*(len(e.shards)+1))
	for _, l := range logs {
		out = append(out, admin.LogSource{Name: l.Name + "/0", Prefix: l.Prefix})
	}
	for i, file := range e.shards {
		url, err := (&pgFlags{file: file}).resolve(e.getenv)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("-log-shard-file (shard %d): %w", i+1, err)
		}
		pool, err := newPoolOf(ctx, url, conns)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("log shard %d: %w", i+1, err)
		}
		pools = append(pools, pool)
		for _, l := range logs {
			out = append(out, admin.LogSource{Name: fmt.Sprintf("%s/%d", l.Name, i+1), Prefix: l.Prefix, Pool: pool})
		}
	}
	return out, closeAll, nil
}
