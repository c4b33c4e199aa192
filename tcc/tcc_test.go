package tcc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/saga"
	"github.com/txkit/txkit/tcc"
	"github.com/txkit/txkit/twopc"
)

var errDown = errors.New("participant down")

func TestIntegrationCommit(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	c := e.coordinator()
	stock, account := newParty(nil), newParty(nil)
	hs, ha := register(t, c, "stock", stock), register(t, c, "account", account)

	g, err := c.Begin(ctx, coordinator.WithGID("order-1"))
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if err := g.Try(ctx, tcc.Branch{Name: "stock", Participant: hs, Payload: json.RawMessage(`{"sku":"A","n":2}`)}); err != nil {
		t.Fatalf("Try stock: %v", err)
	}
	if err := g.Try(ctx, tcc.Branch{Name: "account", Participant: ha}); err != nil {
		t.Fatalf("Try account: %v", err)
	}
	if err := g.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if s := status(t, c, "order-1"); s != tcc.StatusConfirmed {
		t.Fatalf("status %s, want confirmed", s)
	}
	for _, p := range []*party{stock, account} {
		if p.count("try") != 1 || p.count("confirm") != 1 || p.count("cancel") != 0 {
			t.Fatalf("calls %v", p.calls)
		}
	}
	if err := g.Commit(ctx); err != nil {
		t.Fatalf("second Commit: %v", err)
	}
	if stock.count("confirm") != 1 {
		t.Fatalf("a second Commit confirmed again: %v", stock.calls)
	}
	if err := g.Rollback(ctx); !errors.Is(err, coordinator.ErrInvalidState) {
		t.Fatalf("Rollback after Commit = %v, want ErrInvalidState", err)
	}
}

// A refused try rolls the transaction back: every branch, the refused one included, is cancelled.
func TestIntegrationTryRefused(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	c := e.coordinator()
	stock := newParty(nil)
	account := newParty(func(req participant.Request) error {
		if req.Op == participant.OpTry {
			return fmt.Errorf("insufficient funds: %w", participant.ErrRefused)
		}
		return nil
	})
	hs, ha := register(t, c, "stock", stock), register(t, c, "account", account)
	g, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Try(ctx, tcc.Branch{Name: "stock", Participant: hs}); err != nil {
		t.Fatal(err)
	}
	err = g.Try(ctx, tcc.Branch{Name: "account", Participant: ha})
	var be *coordinator.BranchError
	if !errors.Is(err, participant.ErrRefused) || !errors.As(err, &be) || be.Branch != "account" || be.Op != participant.OpTry || be.GID != g.GID() {
		t.Fatalf("Try refused = %v, want a BranchError wrapping participant.ErrRefused", err)
	}
	if err := g.Commit(ctx); !errors.Is(err, coordinator.ErrInvalidState) {
		t.Fatalf("Commit after a refusal = %v, want ErrInvalidState", err)
	}
	if err := g.Try(ctx, tcc.Branch{Name: "late", Participant: hs}); !errors.Is(err, coordinator.ErrInvalidState) {
		t.Fatalf("Try after a refusal = %v, want ErrInvalidState", err)
	}
	if err := g.Rollback(ctx); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	if s := status(t, c, g.GID()); s != tcc.StatusCancelled {
		t.Fatalf("status %s", s)
	}
	if stock.count("cancel") != 1 || account.count("cancel") != 1 || stock.count("confirm")+account.count("confirm") != 0 ||
		stock.count("try/late") != 0 {
		t.Fatalf("calls: stock %v account %v", stock.calls, account.calls)
	}
}

// A coordinator crashes after recording its decision and before any confirm: the leader, another
// coordinator on the same database, confirms every branch. A second transaction's confirm fails
// at its starter; the leader finishes it, calling only the branch not yet confirmed.
func TestIntegrationRecoverAfterCrash(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	starter := e.coordinator(coordinator.WithLease(200 * time.Millisecond))
	stock, account := newParty(nil), newParty(nil)
	hs, ha := register(t, starter, "stock", stock), register(t, starter, "account", account)

	crashed, err := starter.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []tcc.Branch{{Name: "stock", Participant: hs}, {Name: "account", Participant: ha}} {
		if err := crashed.Try(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	// The decision as Commit records it, and then the starter is gone: no confirm was called.
	l, err := core.New(e.Schema.Pool, core.WithSchema(e.Schema.Name), core.WithLease(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Decide(ctx, crashed.GID(), core.StatusTrying, core.StatusConfirming); err != nil {
		t.Fatal(err)
	}

	// A second transaction whose account confirm fails at the starter.
	account.setAnswer(func(req participant.Request) error {
		if req.Op == participant.OpConfirm {
			return errDown
		}
		return nil
	})
	partial, err := starter.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []tcc.Branch{{Name: "stock", Participant: hs}, {Name: "account", Participant: ha}} {
		if err := partial.Try(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	err = partial.Commit(ctx)
	var be *coordinator.BranchError
	if !errors.Is(err, coordinator.ErrIncomplete) || !errors.Is(err, errDown) || !errors.As(err, &be) || be.Branch != "account" {
		t.Fatalf("Commit with a failing confirm = %v, want ErrIncomplete from branch account", err)
	}
	account.setAnswer(nil)

	// The recovering coordinator: another instance, the same participants registered by name.
	leader := e.coordinator(coordinator.WithElector(e.Elector("leader")))
	register(t, leader, "stock", stock)
	register(t, leader, "account", account)
	run(t, leader)
	for _, gid := range []string{crashed.GID(), partial.GID()} {
		testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
			return status(t, leader, gid) == tcc.StatusConfirmed
		}, "%s is confirmed by the leader", gid)
	}
	if n := stock.count("confirm/stock"); n != 2 { // once per transaction
		t.Fatalf("stock confirmed %d times, want 2", n)
	}
	if n := account.count("confirm/account"); n != 3 { // crashed: 1; partial: failed, then 1
		t.Fatalf("account confirmed %d times, want 3", n)
	}
	if stock.count("cancel")+account.count("cancel") != 0 {
		t.Fatal("a confirmed transaction was cancelled")
	}
}

// A transaction left trying past its timeout is cancelled by the leader; its starter can no
// longer commit it.
func TestIntegrationTimeout(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	c := e.coordinator(coordinator.WithElector(e.Elector("only")))
	stock, account := newParty(nil), newParty(nil)
	hs, ha := register(t, c, "stock", stock), register(t, c, "account", account)
	run(t, c)

	g, err := c.Begin(ctx, coordinator.WithTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []tcc.Branch{{Name: "stock", Participant: hs}, {Name: "account", Participant: ha}} {
		if err := g.Try(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	other, err := c.Begin(ctx, coordinator.WithTimeout(time.Hour)) // not timed out: left alone
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Try(ctx, tcc.Branch{Name: "account", Participant: ha}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		return status(t, c, g.GID()) == tcc.StatusCancelled
	}, "the timed-out transaction is cancelled")
	if stock.count("cancel") != 1 || account.count("cancel") != 1 {
		t.Fatalf("cancels: stock %v account %v", stock.calls, account.calls)
	}
	if err := g.Commit(ctx); !errors.Is(err, coordinator.ErrInvalidState) {
		t.Fatalf("Commit after the timeout = %v, want ErrInvalidState", err)
	}
	if s := status(t, c, other.GID()); s != tcc.StatusTrying {
		t.Fatalf("the transaction within its timeout is %s", s)
	}
	if stock.count("confirm") != 0 {
		t.Fatal("confirmed after the timeout")
	}
}

// A participant that refuses a confirm breaks the protocol: it is counted, logged and retried
// until it confirms.
func TestIntegrationConfirmRefusedIsRetried(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	var mu sync.Mutex
	refusals := 3
	p := newParty(func(req participant.Request) error {
		mu.Lock()
		defer mu.Unlock()
		if req.Op == participant.OpConfirm && refusals > 0 {
			refusals--
			return participant.ErrRefused
		}
		return nil
	})
	c := e.coordinator(coordinator.WithElector(e.Elector("only")), coordinator.WithLease(100*time.Millisecond))
	h := register(t, c, "p", p)
	run(t, c)
	g, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Try(ctx, tcc.Branch{Name: "p", Participant: h}); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(ctx); !errors.Is(err, coordinator.ErrIncomplete) || !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Commit = %v, want ErrIncomplete wrapping the refusal", err)
	}
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		return status(t, c, g.GID()) == tcc.StatusConfirmed
	}, "the confirm is retried until it succeeds")
	if st := c.Stats(); st.Violations != 3 || p.count("confirm") != 4 {
		t.Fatalf("stats %+v, confirms %d", st, p.count("confirm"))
	}
}

// HTTP participants: 409 on try is a refusal (rollback), 500 on confirm is retried by the
// leader, which finds the participant by its stored URL.
func TestIntegrationHTTP(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	var mu sync.Mutex
	calls := map[string]int{}
	failConfirms := 1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req participant.Request
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		calls[req.Op.String()+"/"+req.GID]++
		switch {
		case req.Op == participant.OpTry && string(req.Payload) == `{"n":1000}`:
			http.Error(w, "insufficient stock", participant.StatusRefused)
		case req.Op == participant.OpConfirm && failConfirms > 0:
			failConfirms--
			http.Error(w, "database down", http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	t.Cleanup(srv.Close)
	count := func(k string) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[k]
	}
	hp := participant.HTTP{URL: srv.URL}
	starter := e.coordinator(coordinator.WithLease(100 * time.Millisecond))

	refused, err := starter.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = refused.Try(ctx, tcc.Branch{Name: "stock", Participant: hp, Payload: json.RawMessage(`{"n":1000}`)})
	if !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Try answered 409 = %v, want participant.ErrRefused", err)
	}
	if err := refused.Rollback(ctx); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	if count("cancel/"+refused.GID()) != 1 {
		t.Fatalf("calls %v", calls)
	}

	g, err := starter.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Try(ctx, tcc.Branch{Name: "stock", Participant: &hp, Payload: json.RawMessage(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(ctx); !errors.Is(err, coordinator.ErrIncomplete) {
		t.Fatalf("Commit answered 500 = %v, want ErrIncomplete", err)
	}
	leader := e.coordinator(coordinator.WithElector(e.Elector("leader")), coordinator.WithHTTPClient(srv.Client()))
	run(t, leader)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		return status(t, leader, g.GID()) == tcc.StatusConfirmed
	}, "the leader confirms after the 500")
	if n := count("confirm/" + g.GID()); n != 2 {
		t.Fatalf("confirms %d, want 2 (a 500, then a 200)", n)
	}
}

func TestIntegrationBadInput(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	c := e.coordinator()
	h := register(t, c, "p", newParty(nil))
	if _, err := c.Register("p", newParty(nil)); !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Fatalf("Register twice = %v", err)
	}
	if _, err := c.Status(ctx, "no-such-gid"); !errors.Is(err, coordinator.ErrNotFound) {
		t.Fatalf("Status(unknown) = %v, want ErrNotFound", err)
	}
	if err := c.Run(ctx); !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Fatalf("Run without an elector = %v, want ErrInvalidOption", err)
	}
	g, err := c.Begin(ctx, coordinator.WithGID("dup"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Begin(ctx, coordinator.WithGID("dup")); !errors.Is(err, coordinator.ErrInvalidState) {
		t.Fatalf("Begin with a used gid = %v, want ErrInvalidState", err)
	}
	if _, err := c.Begin(ctx, coordinator.WithTimeout(-time.Second)); !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Fatalf("Begin with a negative timeout = %v", err)
	}
	tests := []struct {
		name string
		b    tcc.Branch
		want error
	}{
		{"empty name", tcc.Branch{Participant: h}, coordinator.ErrInvalidBranch},
		{"payload not JSON", tcc.Branch{Name: "b", Participant: h, Payload: json.RawMessage(`{`)}, coordinator.ErrInvalidBranch},
		{"unregistered participant", tcc.Branch{Name: "b", Participant: newParty(nil)}, coordinator.ErrInvalidBranch},
		{"nil participant", tcc.Branch{Name: "b"}, coordinator.ErrInvalidBranch},
		{"HTTP without URL", tcc.Branch{Name: "b", Participant: participant.HTTP{}}, coordinator.ErrInvalidBranch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := g.Try(ctx, tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("Try = %v, want %v", err, tc.want)
			}
		})
	}
	if err := g.Try(ctx, tcc.Branch{Name: "b", Participant: h}); err != nil {
		t.Fatal(err)
	}
	if err := g.Try(ctx, tcc.Branch{Name: "b", Participant: h}); !errors.Is(err, coordinator.ErrInvalidBranch) {
		t.Fatalf("Try with a used name = %v, want ErrInvalidBranch", err)
	}
	if err := g.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []coordinator.Option{coordinator.WithConcurrency(0), coordinator.WithRetry(0, time.Second, 5*time.Minute),
		coordinator.WithDefaultTimeout(0), coordinator.WithLogger(nil), coordinator.WithLease(0),
		coordinator.WithRetry(10*time.Second, time.Second, 0)} {
		if _, err := tcc.New(e.Schema.Pool, bad); !errors.Is(err, coordinator.ErrInvalidOption) {
			t.Fatalf("New with a bad option = %v, want ErrInvalidOption", err)
		}
	}
	// Another protocol's own options are refused, by name.
	_, err = tcc.New(e.Schema.Pool, saga.WithAttempts(2), twopc.WithPrepareTimeout(time.Second))
	if want := "tcc: option saga.WithAttempts, twopc.WithPrepareTimeout is not for this coordinator: coordinator: invalid option"; err == nil ||
		err.Error() != want || !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Fatalf("New with saga's and twopc's options = %v, want %s", err, want)
	}
}

// A try that times out has an unknown outcome; the branch was recorded before the call, so the
// rollback cancels it.
func TestIntegrationTryTimeoutIsCancelled(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	c := e.coordinator(coretest.CallTimeout(100 * time.Millisecond))
	slow := newParty(nil)
	h := register(t, c, "slow", participant.ParticipantFunc(func(ctx context.Context, req participant.Request) error {
		_ = slow.Do(ctx, req)
		if req.Op == participant.OpTry {
			<-ctx.Done() // the reservation may or may not have happened
			return ctx.Err()
		}
		return nil
	}))
	g, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = g.Try(ctx, tcc.Branch{Name: "slow", Participant: h})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Try = %v, want a deadline error", err)
	}
	if s := status(t, c, g.GID()); s != tcc.StatusTrying {
		t.Fatalf("status after a timed-out try: %s", s)
	}
	if err := g.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if slow.count("cancel/slow") != 1 || status(t, c, g.GID()) != tcc.StatusCancelled {
		t.Fatalf("calls %v", slow.calls)
	}
}

// Commit calls at most WithConcurrency confirms at once.
func TestIntegrationConcurrencyLimit(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	const limit, branches = 2, 8
	c := e.coordinator(coordinator.WithConcurrency(limit))
	hold := newHolder(participant.OpConfirm, newParty(nil))
	h := register(t, c, "p", hold)
	g, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range branches {
		if err := g.Try(ctx, tcc.Branch{Name: fmt.Sprint("b", i), Participant: h}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- g.Commit(ctx) }()
	if peak := hold.release(t, limit, done); peak != limit {
		t.Fatalf("peak concurrency %d, want %d", peak, limit)
	}
	if s := status(t, c, g.GID()); s != tcc.StatusConfirmed {
		t.Fatalf("status %s", s)
	}
}

// A Rollback while a Try is in flight cancels that branch too.
func TestIntegrationRollbackDuringTry(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	c := e.coordinator()
	calls := newParty(nil)
	entered, release := make(chan struct{}), make(chan struct{})
	h := register(t, c, "slow", participant.ParticipantFunc(func(ctx context.Context, req participant.Request) error {
		_ = calls.Do(ctx, req)
		if req.Op == participant.OpTry {
			close(entered)
			<-release
		}
		return nil
	}))
	g, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tried := make(chan error, 1)
	go func() { tried <- g.Try(ctx, tcc.Branch{Name: "slow", Participant: h}) }()
	<-entered
	if err := g.Rollback(ctx); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	close(release)
	if err := <-tried; err != nil {
		t.Fatalf("Try: %v", err)
	}
	if calls.count("cancel/slow") != 1 || status(t, c, g.GID()) != tcc.StatusCancelled {
		t.Fatalf("calls %v", calls.calls)
	}
}

// A transaction of N branches finished by its starter commits N+2 PostgreSQL transactions that
// write the log (docs/coordinators.md justifies each), 3 when one Try gives them all: counted by
// statement triggers on the two tables.
func TestIntegrationWritesPerTransaction(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	c := e.coordinator()
	const n = 3
	_, err := e.Schema.Pool.Exec(ctx, `
create table writes (xid xid8, tbl text, op text);
create function count_write() returns trigger language plpgsql as $$
begin insert into writes values (pg_current_xact_id(), tg_table_name, tg_op); return null; end $$;
create trigger w after insert or update or delete on txkit_global for each statement execute function count_write();
create trigger w after insert or update or delete on txkit_branch for each statement execute function count_write();`)
	if err != nil {
		t.Fatal(err)
	}
	h := register(t, c, "p", newParty(nil))
	for _, together := range []bool{false, true} {
		if _, err := e.Schema.Pool.Exec(ctx, `truncate writes`); err != nil {
			t.Fatal(err)
		}
		g, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		bs := make([]tcc.Branch, n)
		for i := range bs {
			bs[i] = tcc.Branch{Name: fmt.Sprint("b", i), Participant: h}
		}
		if together {
			if err := g.Try(ctx, bs[0], bs[1:]...); err != nil {
				t.Fatal(err)
			}
		} else {
			for _, b := range bs {
				if err := g.Try(ctx, b); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := g.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(ctx); err != nil { // the deferred finish: with nothing to ride on, alone
			t.Fatal(err)
		}
		var txs, stmts int
		if err := e.Schema.Pool.QueryRow(ctx, `select count(distinct xid), count(*) from writes`).Scan(&txs, &stmts); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d branches (together: %v): %d writing transactions, %d statements fired", n, together, txs, stmts)
		want := n + 2
		if together {
			want = 3
		}
		if txs != want {
			t.Fatalf("together: %v: %d writing transactions, want %d", together, txs, want)
		}
	}
}

// Begin without WithGID records nothing: the first Try records the transaction with its branch
// (racing first Trys wait for it), and a Commit or Rollback without any Try records the
// transaction decided and finishes it.
func TestIntegrationFirstTryRecords(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	c := e.coordinator()
	p := newParty(nil)
	h := register(t, c, "p", p)

	g, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(ctx, g.GID()); !errors.Is(err, coordinator.ErrNotFound) {
		t.Fatalf("Status before the first Try = %v, want ErrNotFound", err)
	}
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- g.Try(ctx, tcc.Branch{Name: fmt.Sprint("b", i), Participant: h}) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("Try: %v", err)
		}
	}
	if s := status(t, c, g.GID()); s != tcc.StatusTrying {
		t.Fatalf("after the Trys: %s", s)
	}
	if err := g.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if s, n := status(t, c, g.GID()), p.count("confirm"); s != tcc.StatusConfirmed || n != 8 {
		t.Fatalf("after Commit: %s, %d confirms", s, n)
	}

	for _, tc := range []struct {
		name string
		end  func(*tcc.Global, context.Context) error
		want coordinator.Status
	}{{"commit", (*tcc.Global).Commit, tcc.StatusConfirmed}, {"rollback", (*tcc.Global).Rollback, tcc.StatusCancelled}} {
		t.Run("empty "+tc.name, func(t *testing.T) {
			g, err := c.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.end(g, ctx); err != nil {
				t.Fatal(err)
			}
			if s := status(t, c, g.GID()); s != tc.want {
				t.Fatalf("status %s, want %s", s, tc.want)
			}
			if err := tc.end(g, ctx); err != nil {
				t.Fatalf("twice: %v", err)
			}
			if err := g.Try(ctx, tcc.Branch{Name: "late", Participant: h}); !errors.Is(err, coordinator.ErrInvalidState) {
				t.Fatalf("Try after the end = %v, want ErrInvalidState", err)
			}
		})
	}
}

// Concurrent transactions through a coordinator with group commit all end as their starters
// decided, sharing statements.
func TestIntegrationGroupCommit(t *testing.T) {
	e := newEnv(t)
	c := e.coordinator(coordinator.WithGroupCommit(time.Millisecond))
	p := refusingParty()
	checkEnded(t, c, p, concurrentTransactions(t, c, register(t, c, "p", p), 32))
}

// With WithDeferredFinish (and group commit), Commit and Rollback return once the confirms or
// cancels are done and Flush waits for the finishes: every transaction then ends confirmed or
// cancelled, each participant called once per branch; a second Commit right after the first
// confirms nothing again.
func TestIntegrationDeferredFinish(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	c := e.coordinator(coordinator.WithDeferredFinish(true), coordinator.WithGroupCommit(time.Millisecond))
	p := refusingParty()
	const n = 16
	done := concurrentTransactions(t, c, register(t, c, "p", p), n)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkEnded(t, c, p, done)
	// A second Commit of a confirmed transaction changes nothing.
	for _, o := range done {
		if o.want == tcc.StatusConfirmed {
			if err := o.g.Commit(ctx); err != nil {
				t.Fatalf("second Commit: %v", err)
			}
			break
		}
	}
	if got, want := p.count("confirm"), 3*(n-n/4); got != want {
		t.Fatalf("a second Commit confirmed again: %d confirms, want %d", got, want)
	}
}

// outcome is how one of concurrentTransactions ended: the status it must end in.
type outcome struct {
	g    *tcc.Global
	want coordinator.Status
}

// concurrentTransactions runs n transactions at once on c, each trying branches a, b and c on h,
// every fourth with c named "refused" (which h's party refuses) and then rolled back, the others
// committed; it fails t on any other error and returns how each ended.
func concurrentTransactions(t *testing.T, c *tcc.Coordinator, h participant.Participant, n int) []outcome {
	t.Helper()
	ctx := t.Context()
	type result struct {
		outcome
		err error
	}
	out := make(chan result, n)
	for i := range n {
		go func() {
			g, err := c.Begin(ctx)
			if err != nil {
				out <- result{err: err}
				return
			}
			names := []string{"a", "b", "c"}
			if i%4 == 0 {
				names[2] = "refused"
			}
			for _, name := range names {
				if err := g.Try(ctx, tcc.Branch{Name: name, Participant: h}); err != nil {
					if !errors.Is(err, participant.ErrRefused) {
						out <- result{err: err}
						return
					}
					out <- result{outcome{g, tcc.StatusCancelled}, g.Rollback(ctx)}
					return
				}
			}
			out <- result{outcome{g, tcc.StatusConfirmed}, g.Commit(ctx)}
		}()
	}
	done := make([]outcome, 0, n)
	for range n {
		r := <-out
		if r.err != nil {
			t.Fatal(r.err)
		}
		done = append(done, r.outcome)
	}
	return done
}

// refusingParty answers every call, refusing only the tries of branches named "refused".
func refusingParty() *party {
	return newParty(func(req participant.Request) error {
		if req.Op == participant.OpTry && req.Branch == "refused" {
			return participant.ErrRefused
		}
		return nil
	})
}

// checkEnded fails t unless every transaction of done is in the status it must end in, and p
// saw one confirm per branch of the committed ones and one cancel per branch of the others.
func checkEnded(t *testing.T, c *tcc.Coordinator, p *party, done []outcome) {
	t.Helper()
	committed := 0
	for _, o := range done {
		if s := status(t, c, o.g.GID()); s != o.want {
			t.Fatalf("%s: %s, want %s", o.g.GID(), s, o.want)
		}
		if o.want == tcc.StatusConfirmed {
			committed++
		}
	}
	if got, want := p.count("confirm"), 3*committed; got != want {
		t.Fatalf("%d confirms, want %d", got, want)
	}
	if got, want := p.count("cancel"), 3*(len(done)-committed); got != want {
		t.Fatalf("%d cancels, want %d", got, want)
	}
}

// One client's transactions of 3 branches commit 4 times each in the log, with the default
// options, when each branch has a Try of its own: the first Try's record (the transaction with its
// branch), the other two branches, the decision; the finish rides on the next transaction's first
// record (deferred finish). Given to one Try together, the branches are recorded with the
// transaction: 2 commits, the record and the decision. Over HTTP participants behind the barrier
// that is 10 and 8 commits per transaction with their 6 (bare: 6). Before the finish rode, it was 5.
func TestIntegrationCommitsPerTransaction(t *testing.T) {
	e := newEnv(t)
	cc := coretest.NewCommitCounter(t)
	c := coretest.New(t, tcc.New, cc.Pool(e.Schema.URL), e.Schema.Name)
	h := register(t, c, "p", newParty(nil))
	const n = 20
	for _, tc := range []struct {
		name     string
		together bool
		want     float64
	}{{"one by one", false, 4}, {"together", true, 2}} {
		per := cc.PerTransaction(c, n, func(ctx context.Context) error {
			g, err := c.Begin(ctx)
			if err != nil {
				return err
			}
			bs := []tcc.Branch{{Name: "b0", Participant: h}, {Name: "b1", Participant: h}, {Name: "b2", Participant: h}}
			if tc.together {
				if err := g.Try(ctx, bs[0], bs[1:]...); err != nil {
					return err
				}
			} else {
				for _, b := range bs {
					if err := g.Try(ctx, b); err != nil {
						return err
					}
				}
			}
			return g.Commit(ctx)
		})
		t.Logf("%s: %.2f log commits per transaction", tc.name, per)
		if max := tc.want + 2.0/n; per > max { // 1/n: the last finish, alone; 1/n: slack for a loaded machine (a finish whose 100ms hold ran out)
			t.Fatalf("%s: %.2f log commits per transaction, want at most %.2f", tc.name, per, max)
		}
	}
}
