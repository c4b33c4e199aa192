// Package zkenv gives integration tests their ZooKeeper sessions and electors (package
// lock/zklock) on the ensemble of package testenv, as the ensemble's digest user. It is apart
// from testenv so that testenv — and the conformance suite lock/locktest, which uses it — links
// no lock backend.
package zkenv

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
)

// Auth returns the option that makes a Session authenticate as the ensemble's digest user
// (TXKIT_ZK_AUTH), so that the nodes it creates are its own (zklock.CreatorACL).
func Auth(t testing.TB) zklock.SessionOption {
	t.Helper()
	u, p, _ := strings.Cut(testenv.Lookup(t, testenv.EnvZKAuth), ":")
	return zklock.WithDigestAuth(u, p)
}

// Digest returns the user and password of the ensemble's digest user (TXKIT_ZK_AUTH,
// "user:password"), for zklock.WithDigestAuth where no test is at hand (empty when unset).
func Digest() (user, password string) {
	user, password, _ = strings.Cut(os.Getenv(testenv.EnvZKAuth), ":")
	return user, password
}

// Session returns a ZooKeeper session of its own (timeout 3 s, the digest user of [Auth]),
// closed when the test ends: one per "process" of a test.
func Session(t testing.TB) *zklock.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := zklock.NewSession(ctx, testenv.ZK(t), zklock.WithSessionTimeout(3*time.Second), zklock.WithLogger(testenv.Logger(t)), Auth(t))
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Elector returns a candidate called id in the election at path, on a session of its own
// ([Session]): one per coordinator "process" of a test.
func Elector(t testing.TB, path, id string) lock.Elector {
	t.Helper()
	el, err := zklock.NewElector(Session(t), path, id)
	if err != nil {
		t.Fatalf("NewElector: %v", err)
	}
	return el
}

// WorkerConns opens what a worker process of a ZooKeeper test works with: its logger (warnings
// and errors on stderr, with its pid), a pool on url and a ZooKeeper session (the servers of
// TXKIT_ZK, the digest user of TXKIT_ZK_AUTH) with sessionTimeout. close closes the session, then the pool.
func WorkerConns(ctx context.Context, url string, sessionTimeout time.Duration) (log *slog.Logger, pool *pgxpool.Pool, sess *zklock.Session, close func(), err error) {
	log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("pid", os.Getpid())
	if pool, err = pgxpool.New(ctx, url); err != nil {
		return nil, nil, nil, nil, err
	}
	sess, err = zklock.NewSession(ctx, strings.Split(os.Getenv(testenv.EnvZK), ","), zklock.WithSessionTimeout(sessionTimeout), zklock.WithLogger(log),
		zklock.WithDigestAuth(Digest()))
	if err != nil {
		pool.Close()
		return nil, nil, nil, nil, err
	}
	return log, pool, sess, func() {
		_ = sess.Close()
		pool.Close()
	}, nil
}
