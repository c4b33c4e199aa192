package redislock_test

import (
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/redislock"
)

// TestIntegrationDisruptiveRedisFailoverTwoHolders reproduces the failure the documents describe:
// holder A takes the lock on a primary whose replica no longer receives its writes (the
// replication link runs through a proxy, which is cut), the primary is stopped (SIGSTOP), the
// replica is promoted, and holder B takes the same lock on it — two holders at once, A's lease
// still running. The fencing token saves the store: B's token is above A's (the counter is a
// hybrid logical clock, so the promoted replica hands out more than the increment it missed), and
// a PostgreSQL fence accepts B's write and refuses A's late one.
//
// It stops the pair's primary, so it runs in the serial phase (Disruptive); its cleanup resumes
// the primary and runs deploy/local/redis reset-pair.
func TestIntegrationDisruptiveRedisFailoverTwoHolders(t *testing.T) {
	primary, replica := testenv.RedisPair(t)
	db := testenv.PG(t)
	ctx := t.Context()
	script := deployScript(t, "redis", "reset-pair") // its cleanup runs last: the pair as it was

	// The replica replicates the primary through a proxy.
	p := testenv.NewRawProxy(t, primary)
	port := portOf(p.Addr())
	rep := newRedis(t, replica)
	if err := rep.ReplicaOf(ctx, "127.0.0.1", port).Err(); err != nil {
		t.Fatal(err)
	}
	waitLink(t, rep, "up", port)

	const ttl = 10 * time.Second
	rdbA, rdbB := newRedis(t, primary), newRedis(t, replica)
	ca := newClient(t, rdbA, redislock.WithTTL(ttl))
	cb := newClient(t, rdbB, redislock.WithTTL(ttl))
	name := lockName(t)

	// An earlier hold, replicated: the replica's counter is not empty.
	holdReplicated(t, ca, rep, name)

	// Replication stops; A takes the lock on the primary.
	p.Down()
	waitLink(t, rep, "down", port)
	a := newMutex(t, ca, name)
	la, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := rep.Exists(ctx, key(name)).Result(); err != nil || n != 0 {
		t.Fatalf("the replica has A's key (%d, %v): replication was not stopped", n, err)
	}

	// The primary stops; the replica is promoted; B takes the same lock on it.
	pid := scriptPID(t, script, "primary")
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) // before the clients close and reset-pair
	if err := rep.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	b := newMutex(t, cb, name)
	lb, err := b.TryLock(ctx)
	if err != nil {
		t.Fatalf("B on the promoted replica: %v", err)
	}
	if err := la.Err(); err != nil {
		t.Fatalf("A's lease ended (%v): the test wanted two holders at once", err)
	}
	t.Logf("two holders at once: A with token %s on the stopped primary, B with token %s on the promoted replica", la.Token(), lb.Token())
	if !la.Token().Less(lb.Token()) {
		t.Fatalf("B's token %s is not above A's %s: the fence could not tell them apart", lb.Token(), la.Token())
	}

	// The store refuses A's late write.
	checkFenced(t, db, "redis-failover", la.Token(), lb.Token())
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitLink waits until the replica reports master_link_status state for the primary at port.
func waitLink(t *testing.T, rep *redis.Client, state, port string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		info, err := rep.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "master_port:"+port+"\r\n") &&
			strings.Contains(info, "master_link_status:"+state+"\r\n")
	}, "the replica's link to 127.0.0.1:%s to be %s", port, state)
}

// deployScript returns the absolute path of deploy/local/name; when the test ends (after the
// cleanups registered later), it runs the script with cleanupArgs, which put its servers back.
func deployScript(t *testing.T, name string, cleanupArgs ...string) string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "..", "deploy", "local", name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(script, cleanupArgs...).CombinedOutput(); err != nil {
			t.Errorf("%s %s: %v\n%s", script, strings.Join(cleanupArgs, " "), err, out)
		}
	})
	return script
}

// scriptPID returns the pid that `script pid arg` prints: a deploy/local server's process.
func scriptPID(t *testing.T, script, arg string) int {
	t.Helper()
	out, err := exec.Command(script, "pid", arg).Output()
	if err != nil {
		t.Fatalf("%s pid %s: %v", script, arg, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("%s pid %s: %q: %v", script, arg, out, err)
	}
	return pid
}

// holdReplicated takes and releases the lock name once through c and waits until the replica rep
// has that hold's fencing counter and no lock key: an earlier hold, replicated, so that the
// replica's counter is not empty when it is promoted.
func holdReplicated(t *testing.T, c *redislock.Client, rep *redis.Client, name string) {
	t.Helper()
	ctx := t.Context()
	m := newMutex(t, c, name)
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		n, err := rep.Get(ctx, key(name)+":fence").Int64()
		gone, gerr := rep.Exists(ctx, key(name)).Result()
		return err == nil && n == l.Token().Seq && gerr == nil && gone == 0
	}, "the replica to have the counter of the first hold, and its release")
}

// checkFenced writes through a PostgreSQL fence on resource in db's schema as the two holders:
// B's write (token b) first, then A's late one (token a). It fails the test unless B's is
// accepted, A's refused with an error wrapping lock.ErrFenced, and only B's row stored.
func checkFenced(t *testing.T, db *testenv.Schema, resource string, a, b lock.Token) {
	t.Helper()
	ctx := t.Context()
	f, err := fence.New(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "create table writes(holder text not null)"); err != nil {
		t.Fatal(err)
	}
	write := func(holder string, tok lock.Token) error {
		return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			if err := f.Check(ctx, tx, resource, tok); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "insert into writes(holder) values ($1)", holder)
			return err
		})
	}
	if err := write("B", b); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	err = write("A", a)
	if !errors.Is(err, lock.ErrFenced) {
		t.Fatalf("A's late write: %v, want an error wrapping lock.ErrFenced", err)
	}
	t.Logf("A's late write refused: %v", err)
	var holders []string
	rows, err := db.Pool.Query(ctx, "select holder from writes")
	if err == nil {
		holders, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil || len(holders) != 1 || holders[0] != "B" {
		t.Fatalf("writes = %v (%v), want [B]", holders, err)
	}
}

// portOf is the port of addr (host:port).
func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
