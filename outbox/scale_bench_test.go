package outbox_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
	"github.com/txkit/txkit/outbox"
)

// BenchmarkRelayScaleOut measures the relay spread over processes: relay worker processes (the
// test binary run again, each with its own ZooKeeper session, pool and RocketMQ publisher, as
// TestIntegrationPartitionedRelayFailover starts them) share an outbox split into 12 partitions,
// balanced (each leads at most ceil(12/N)); "P=1/relays=1" is the single leader without
// partitions, for comparison. Once the partitions are led and balanced, each iteration loads 6000
// messages (256-byte bodies, 1200 keys, with COPY: the benchmark measures the relays, not
// Enqueue), wakes the relays with a NOTIFY and times until the table is empty: msgs/s. The
// relays' own CPU time (user + system, from /proc) over the messages gives relay-cpu-ms/msg; the
// servers' (PostgreSQL, the broker) is not in it. On a 2-core machine shared with the servers,
// more relay processes cannot add throughput: read the CPU per message and the per-partition
// rate instead (docs/outbox.md argues scale-out from them).
//
//	go test -run '^$' -bench RelayScaleOut -benchtime 3x ./outbox/
func BenchmarkRelayScaleOut(b *testing.B) {
	for _, v := range []struct{ parts, relays int }{{1, 1}, {12, 1}, {12, 2}, {12, 3}} {
		b.Run(fmt.Sprintf("P=%d/relays=%d", v.parts, v.relays), func(b *testing.B) { relayScaleOut(b, v.parts, v.relays) })
	}
}

func relayScaleOut(b *testing.B, parts, relays int) {
	const (
		messages       = 6000
		keys           = 1200
		sessionTimeout = 4 * time.Second
	)
	ctx := context.Background()
	pg := testenv.PG(b)
	var obOpts []outbox.Option
	if parts > 1 {
		obOpts = append(obOpts, outbox.WithPartitions(parts))
	}
	ob, err := outbox.New(pg.Pool, append(obOpts, outbox.WithTable(pg.Name, ""))...)
	if err != nil {
		b.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	topic := testenv.Topic(b)
	election := testenv.ZKRoot(b) + "/relay"
	cfg := relayWorkerConfig{PG: pg.URL, Schema: pg.Name, Election: election, Batch: 128, SessionTimeout: sessionTimeout}
	paths := []string{election}
	if parts > 1 {
		cfg.Partitions = parts
		paths = partitionElections(election, parts)
	}
	var procs []*relayProc
	for range relays {
		procs = append(procs, startRelayWorker(b, cfg))
	}
	// Wait until every partition is led by a worker and none leads more than its share.
	sess, err := zklock.NewSession(ctx, testenv.ZK(b), zklock.WithSessionTimeout(sessionTimeout), zkenv.Auth(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sess.Close() })
	observers := make([]lock.Elector, len(paths))
	for p := range paths {
		if observers[p], err = zklock.NewElector(sess, paths[p], "observer"); err != nil {
			b.Fatal(err)
		}
	}
	share := (len(paths) + relays - 1) / relays
	testenv.Eventually(b, time.Minute, 50*time.Millisecond, func() bool {
		count := map[string]int{}
		for _, o := range observers {
			id, err := o.Leader(ctx)
			if err != nil {
				return false
			}
			count[id]++
		}
		for _, n := range count {
			if n > share {
				return false
			}
		}
		return true
	}, "every partition to be led, at most %d by one relay", share)

	body := make([]byte, 256)
	var took time.Duration
	var cpu time.Duration
	total := 0
	for b.Loop() {
		rows := make([][]any, messages)
		for i := range rows {
			id, _ := uuid.NewV7()
			msg := outbox.Message{ID: id, Topic: topic, Key: "user-" + strconv.Itoa(i%keys)}
			rows[i] = []any{id, topic, msg.Key, body, ob.Partition(msg)}
		}
		if _, err := pg.Pool.CopyFrom(ctx, pgx.Identifier{pg.Name, outbox.DefaultTable}, []string{"msg_id", "topic", "key", "body", "partition"},
			pgx.CopyFromRows(rows)); err != nil {
			b.Fatal(err)
		}
		before := relaysCPU(b, procs)
		start := time.Now()
		if _, err := pg.Pool.Exec(ctx, `select pg_notify($1, '')`, ob.Channel()); err != nil {
			b.Fatal(err)
		}
		testenv.Eventually(b, 5*time.Minute, 5*time.Millisecond, func() bool {
			p, _, err := ob.Backlog(ctx, pg.Pool)
			return err == nil && p == 0
		}, "the relays to empty the outbox")
		took += time.Since(start)
		cpu += relaysCPU(b, procs) - before
		total += messages
	}
	b.ReportMetric(float64(total)/took.Seconds(), "msgs/s")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(total), "relay-cpu-ms/msg")
	b.ReportMetric(float64(total)/took.Seconds()/float64(len(paths)), "msgs/s/partition")
}

// relaysCPU returns the CPU time (user + system) the processes used so far, read from /proc.
func relaysCPU(b *testing.B, procs []*relayProc) time.Duration {
	b.Helper()
	var sum time.Duration
	for _, p := range procs {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
		if err != nil {
			b.Fatal(err)
		}
		// The fields after the command name (which may hold spaces) in parentheses.
		f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
		utime, _ := strconv.ParseInt(f[11], 10, 64) // field 14 of proc(5)
		stime, _ := strconv.ParseInt(f[12], 10, 64) // field 15
		sum += time.Duration(utime+stime) * time.Second / clockTicks
	}
	return sum
}

// clockTicks is sysconf(_SC_CLK_TCK), the unit of /proc/<pid>/stat's times: 100 on Linux.
const clockTicks = 100
