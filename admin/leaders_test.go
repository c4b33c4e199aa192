package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock/zklock"
)

func session(t *testing.T) *zklock.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	s, err := zklock.NewSession(ctx, testenv.ZK(t), zklock.WithSessionTimeout(3*time.Second), zklock.WithLogger(testenv.Logger(t)), zkenv.Auth(t))
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// The leader of a real ZooKeeper election, and the holder and waiter of a real lock, as the API
// reports them: the ids and fencing tokens the lock package handed out.
func TestIntegrationLeadersLocks(t *testing.T) {
	s := testenv.PG(t)
	root := testenv.ZKRoot(t)
	ctx := t.Context()

	el := zkenv.Elector(t, root+"/tcc-leader", "coordinator-7")
	lead, err := el.Campaign(ctx)
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	t.Cleanup(func() { _ = lead.Resign(context.WithoutCancel(ctx)) })

	holder, err := zklock.NewMutex(session(t), root+"/jobs", zklock.WithData([]byte("worker-1")))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := holder.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	t.Cleanup(func() { _ = holder.Unlock(context.WithoutCancel(ctx)) })
	waiter, err := zklock.NewMutex(session(t), root+"/jobs", zklock.WithData([]byte("worker-2")))
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(wctx)
		waited <- err
	}()
	t.Cleanup(func() {
		stopWaiting()
		if err := <-waited; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("waiter's Lock: %v", err)
		}
	})

	insp := session(t).Inspector()
	w := &world{s: s}
	c := serve(t, w.newAdmin(t,
		admin.WithInspected([]admin.Election{
			{Name: "tcc recovery", Path: root + "/tcc-leader", Inspector: insp},
			{Name: "nobody", Path: root + "/empty", Inspector: insp}},
			[]admin.Lock{{Name: "jobs", Path: root + "/jobs", Inspector: insp}}))).with(bearer...)

	var leaders []admin.Leader
	r := c.do("GET", "/api/leaders")
	c.want(r, 200)
	r.decode(t, &leaders)
	if len(leaders) != 2 || leaders[0].ID != "coordinator-7" || leaders[0].Token != lead.Token() || !leaders[0].Leading ||
		leaders[0].Since.IsZero() || leaders[1].Leading || leaders[1].ID != "" || leaders[1].Error != "" {
		t.Fatalf("leaders: %+v; want coordinator-7 with %v, then nobody", leaders, lead.Token())
	}

	var locks []admin.LockState
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		r := c.do("GET", "/api/locks")
		c.want(r, 200)
		r.decode(t, &locks)
		return len(locks) == 1 && len(locks[0].Waiters) == 1
	}, "the waiter is not listed")
	l := locks[0]
	if l.Holder == nil || l.Holder.ID != "worker-1" || l.Holder.Token != lease.Token() || !l.WaitersKnown ||
		l.Waiters[0].ID != "worker-2" || !lease.Token().Less(l.Waiters[0].Token) {
		t.Fatalf("lock: %+v (holder %+v); want worker-1 with %v, then worker-2", l, l.Holder, lease.Token())
	}

	// The overview carries the leaders too.
	var ov admin.Overview
	r = c.do("GET", "/api/overview")
	c.want(r, 200)
	r.decode(t, &ov)
	if len(ov.Leaders) != 2 || ov.Leaders[0].ID != "coordinator-7" {
		t.Fatalf("overview leaders: %+v", ov.Leaders)
	}
}
