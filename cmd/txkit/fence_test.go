package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/fence"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
)

// TestIntegrationFenceReset: the fence epoch is the lock path's ZooKeeper creation id. An ensemble
// rebuilt from empty data numbers its zxids from zero again, so the tokens recorded from the old
// one are above every token the new one hands out, and the new leader is fenced for ever. One
// ensemble cannot be rebuilt here; the test gets the same situation from two lock paths: the
// "rebuilt" path is created first (lower zxid), the "old ensemble's" path after it, and the old
// leader writes first. `txkit fence show -path` names the resource as ahead, `txkit fence reset`
// forgets its token, and the new leader writes. Deleting and re-creating a path on the same
// ensemble, by contrast, needs no reset.
func TestIntegrationFenceReset(t *testing.T) {
	servers := testenv.ZK(t)
	root := testenv.ZKRoot(t)
	pg := testenv.PG(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	fence, err := fence.New(pg.Pool, fence.WithTable(pg.Name, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	sess, err := zklock.NewSession(ctx, servers, zklock.WithSessionTimeout(3*time.Second), zklock.WithLogger(testenv.Logger(t)), zkenv.Auth(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	const resource = "core:orders.txkit_global"
	rebuilt, old := root+"/rebuilt/leader", root+"/old/leader"
	hold := func(path string) (lock.Token, func()) {
		t.Helper()
		m, err := zklock.NewMutex(sess, path)
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return l.Token(), func() {
			if err := m.Unlock(ctx); err != nil {
				t.Error(err)
			}
		}
	}
	write := func(tok lock.Token) error {
		return pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error { return fence.Check(ctx, tx, resource, tok) })
	}

	_, release := hold(rebuilt) // creates the path: the lower epoch
	release()
	oldTok, release := hold(old)
	if err := write(oldTok); err != nil {
		t.Fatalf("the old ensemble's leader: %v", err)
	}
	release()
	newTok, release := hold(rebuilt)
	if !newTok.Less(oldTok) {
		t.Fatalf("setup: token %s of the rebuilt path is not below %s", newTok, oldTok)
	}
	if err := write(newTok); !errors.Is(err, lock.ErrFenced) {
		t.Fatalf("the new leader's write before the reset = %v, want ErrFenced", err)
	}

	env := map[string]string{"TXKIT_PG_URL": pg.URL, "TXKIT_ZK": strings.Join(servers, ",")}
	code, out, errOut := txkit(t, env, "fence", "show", "-schema", pg.Name, "-path", rebuilt)
	if code != exitOK || !strings.Contains(out, resource) || !strings.Contains(out, oldTok.String()) || !strings.Contains(out, "AHEAD") {
		t.Fatalf("fence show: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("txkit fence show -path %s:\n%s", rebuilt, out)
	// Against the path the token came from, it is not ahead: nothing to reset.
	code, out, errOut = txkit(t, env, "fence", "reset", "-schema", pg.Name, "-resource", resource, "-path", old)
	if code != exitFail || !strings.Contains(errOut, "nothing to reset") {
		t.Fatalf("fence reset against the token's own path: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = txkit(t, env, "fence", "reset", "-schema", pg.Name, "-resource", resource, "-path", rebuilt)
	if code != exitOK || !strings.Contains(out, "forgot token "+oldTok.String()) {
		t.Fatalf("fence reset: exit %d\n%s%s", code, out, errOut)
	}
	if err := write(newTok); err != nil {
		t.Fatalf("the new leader's write after the reset: %v", err)
	}
	code, out, errOut = txkit(t, env, "fence", "show", "-schema", pg.Name, "-resource", resource, "-path", rebuilt)
	if code != exitOK || !strings.Contains(out, newTok.String()) || strings.Contains(out, "AHEAD") {
		t.Fatalf("fence show after the reset: exit %d\n%s%s", code, out, errOut)
	}
	// The new leader's own token is never forgotten: that would let a deposed holder write again.
	code, out, errOut = txkit(t, env, "fence", "reset", "-schema", pg.Name, "-resource", resource, "-path", rebuilt)
	if code != exitFail || !strings.Contains(errOut, "nothing to reset") {
		t.Fatalf("second fence reset: exit %d\n%s%s", code, out, errOut)
	}
	release()

	// Deleting and re-creating the lock path on the same ensemble raises the epoch: no reset needed.
	if err := testenv.DeleteTree(sess.Conn(), rebuilt); err != nil {
		t.Fatal(err)
	}
	again, release := hold(rebuilt)
	defer release()
	if !newTok.Less(again) {
		t.Fatalf("token %s of the re-created path is not above %s", again, newTok)
	}
	if err := write(again); err != nil {
		t.Fatalf("write after re-creating the path: %v", err)
	}

	for _, args := range [][]string{
		{"fence", "reset", "-resource", resource},
		{"fence", "reset", "-path", rebuilt},
		{"fence", "purge"},
		{"fence"},
	} {
		if code, _, errOut := txkit(t, env, args...); code != exitUsage {
			t.Errorf("%q: exit %d, %s; want a usage error", args, code, errOut)
		}
	}
}
