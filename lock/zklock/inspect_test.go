package zklock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/zklock"
)

// TestIntegrationInspectorStrangers: under the lock path, a stranger's persistent node named like
// the first contender is not listed (the recipe skips it too), and a live contender's node whose
// ACL lets us not read it is listed, in its place, with an empty ID.
func TestIntegrationInspectorStrangers(t *testing.T) {
	t.Parallel()
	servers, path, stranger := openPath(t, "lock")
	if _, err := stranger.Create(path+"/_c_"+uuid.NewString()+"-lock-0000000000", []byte("intruder"), zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	s := session(t, servers)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	m := mutex(t, s, path, zklock.WithData([]byte("ours")))
	held, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Another application's contender, readable only by its own user, queued behind ours.
	if _, err := stranger.Create(path+"/_c_"+uuid.NewString()+"-lock-", []byte("secret"), zk.FlagEphemeral|zk.FlagSequence,
		zk.DigestACL(zk.PermAll, "other", "secret")); err != nil {
		t.Fatal(err)
	}
	cs, known, err := s.Inspector().Contenders(ctx, path)
	if err != nil {
		t.Fatalf("Contenders: %v", err)
	}
	if !known || len(cs) != 2 {
		t.Fatalf("Contenders = %+v, %v; want ours and the unreadable one, waiters known", cs, known)
	}
	if !cs[0].Holder || cs[0].ID != "ours" || cs[0].Token != held.Token() {
		t.Errorf("holder %+v, want ours with token %s", cs[0], held.Token())
	}
	if cs[1].Holder || cs[1].ID != "" || !held.Token().Less(cs[1].Token) {
		t.Errorf("waiter %+v, want the unreadable node with an empty ID and a token above %s", cs[1], held.Token())
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationInspectorUnfair: an Inspector made without WithUnfair still finds the holder of
// an unfair lock (its one node), with the hold's token; waiters are then not known.
func TestIntegrationInspectorUnfair(t *testing.T) {
	t.Parallel()
	s := session(t, testenv.ZK(t))
	path := testenv.ZKRoot(t) + "/lock"
	m := mutex(t, s, path, zklock.WithUnfair(), zklock.WithData([]byte("unfair-1")))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	held, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs, known, err := s.Inspector().Contenders(ctx, path)
	if err != nil || known || len(cs) != 1 || cs[0].ID != "unfair-1" || cs[0].Token != held.Token() || !cs[0].Holder {
		t.Fatalf("Contenders = %+v, %v, %v; want the unfair holder with token %s, waiters not known", cs, known, err, held.Token())
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if cs, known, err := s.Inspector().Contenders(ctx, path); err != nil || !known || len(cs) != 0 {
		t.Fatalf("Contenders of the free lock = %+v, %v, %v; want nobody", cs, known, err)
	}
}

// TestIntegrationInspectorClosedSession: after Close, Contenders returns an error wrapping
// ErrClosed; a path that does not exist lists nobody.
func TestIntegrationInspectorClosedSession(t *testing.T) {
	t.Parallel()
	s := session(t, testenv.ZK(t))
	in := s.Inspector()
	if cs, known, err := in.Contenders(t.Context(), (testenv.ZKRoot(t)+"/lock")+"/never-created"); err != nil || !known || len(cs) != 0 {
		t.Fatalf("Contenders of a path that does not exist = %+v, %v, %v; want nobody", cs, known, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := in.Contenders(t.Context(), (testenv.ZKRoot(t) + "/lock")); !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("Contenders after Close = %v, want an error wrapping lock.ErrClosed", err)
	}
}
