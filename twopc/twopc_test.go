package twopc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/prepared/preparedtest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/twopc"
)

// A transfer commits on both databases, with and without vote markers (whose rows and their
// sweep votesSwept checks after the commit); a second Commit or an Abort
// after it is refused.
func TestIntegrationCommit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []coordinator.Option
		after func(t *testing.T, b *bank, c *twopc.Coordinator)
	}{
		{"decision", []coordinator.Option{twopc.WithVoteMarkers(false)}, nil},
		{"votes", []coordinator.Option{twopc.WithVoteMarkers(true), twopc.WithPrepareTimeout(200 * time.Millisecond),
			twopc.WithInDoubtResolution("@every 1h", 300*time.Millisecond)}, votesSwept},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			b := newBank(t)
			c := b.coordinator(tc.opts...)
			g, err := c.Begin(ctx, coordinator.WithGID("transfer-1"))
			if err != nil {
				t.Fatal(err)
			}
			if err := b.move(ctx, g, 30); err != nil {
				t.Fatalf("enlist: %v", err)
			}
			// Until Commit, the work is invisible outside its transactions.
			b.WantBalances(startBalance, startBalance)
			if err := g.Commit(ctx); err != nil {
				t.Fatalf("Commit: %v", err)
			}
			b.WantBalances(startBalance-30, startBalance+30)
			if s := status(t, c, "transfer-1"); s != twopc.StatusCommitted {
				t.Fatalf("status %s, want committed", s)
			}
			b.NoPrepared()
			if err := g.Commit(ctx); !errors.Is(err, coordinator.ErrInvalidState) {
				t.Fatalf("second Commit = %v, want ErrInvalidState", err)
			}
			if err := g.Abort(ctx); !errors.Is(err, coordinator.ErrInvalidState) {
				t.Fatalf("Abort after Commit = %v, want ErrInvalidState", err)
			}
			if tc.after != nil {
				tc.after(t, b, c)
			}
		})
	}
}

// A participant voting no aborts all: the databases' prepared work is rolled back.
func TestIntegrationVoteNoAbortsAll(t *testing.T) {
	ctx := t.Context()
	b := newBank(t)
	c := b.coordinator()
	var aborts atomic.Int32
	ledger, err := c.Register("ledger", participant.ParticipantFunc(func(_ context.Context, req participant.Request) error {
		switch req.Op {
		case participant.OpPrepare:
			return fmt.Errorf("ledger closed: %w", participant.ErrRefused)
		case participant.OpAbort:
			aborts.Add(1)
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	g, _ := c.Begin(ctx)
	if err := b.move(ctx, g, 30); err != nil {
		t.Fatal(err)
	}
	if err := g.EnlistParticipant(twopc.Branch{Name: "ledger", Participant: ledger, Payload: json.RawMessage(`{"n":30}`)}); err != nil {
		t.Fatal(err)
	}
	err = g.Commit(ctx)
	if !errors.Is(err, twopc.ErrAborted) || !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Commit = %v, want ErrAborted wrapping ErrRefused", err)
	}
	var be *coordinator.BranchError
	if !errors.As(err, &be) || be.Branch != "ledger" || be.Op != participant.OpPrepare {
		t.Fatalf("Commit's branch error = %+v, want the ledger's prepare", be)
	}
	b.WantBalances(startBalance, startBalance)
	b.NoPrepared()
	if s := status(t, c, g.GID()); s != twopc.StatusAborted {
		t.Fatalf("status %s, want aborted", s)
	}
	if aborts.Load() != 1 {
		t.Fatalf("ledger aborts = %d, want 1", aborts.Load())
	}
	// Why it aborted, for the operator: the ledger's refusal on its branch.
	var refusal, cause string
	err = b.Log.Pool.QueryRow(ctx, `select coalesce(b.refusal, ''), coalesce(g.abort_cause, '') from `+
		pgx.Identifier{b.Log.Name, "txkit_2pc_branch"}.Sanitize()+` b join `+pgx.Identifier{b.Log.Name, "txkit_2pc_global"}.Sanitize()+
		` g using (gid) where gid = $1 and b.branch = 'ledger'`, g.GID()).Scan(&refusal, &cause)
	if err != nil || !strings.Contains(refusal, "ledger closed") || cause != "refused" {
		t.Fatalf("ledger's refusal %q, cause %q (%v); want the ledger's answer and refused", refusal, cause, err)
	}
}

// A participant that does not vote within the prepare timeout counts as a no.
func TestIntegrationPrepareTimeoutAborts(t *testing.T) {
	ctx := t.Context()
	b := newBank(t)
	c := b.coordinator(twopc.WithPrepareTimeout(300 * time.Millisecond))
	slow, err := c.Register("slow", participant.ParticipantFunc(func(ctx context.Context, req participant.Request) error {
		if req.Op == participant.OpPrepare {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	g, _ := c.Begin(ctx)
	if err := b.move(ctx, g, 30); err != nil {
		t.Fatal(err)
	}
	if err := g.EnlistParticipant(twopc.Branch{Name: "slow", Participant: slow}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = g.Commit(ctx)
	if !errors.Is(err, twopc.ErrAborted) || !strings.Contains(err.Error(), "prepare timeout") {
		t.Fatalf("Commit = %v, want ErrAborted naming the prepare timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Commit took %v with a 300ms prepare timeout", d)
	}
	b.WantBalances(startBalance, startBalance)
	b.NoPrepared()
}

// The starter stops after writing the decision and before phase two (a hook holds it there,
// as a crash would); another coordinator, the leader, finishes phase two from the log. With vote
// markers the hook holds it after every branch voted yes: the votes are the decision, and the
// leader settles the transaction, still voting, as committed.
func TestIntegrationCrashAfterDecisionRecovered(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []coordinator.Option
		held coordinator.Status // the status between the phases
	}{
		{"decision", []coordinator.Option{twopc.WithVoteMarkers(false)}, twopc.StatusCommitting},
		{"votes", []coordinator.Option{twopc.WithVoteMarkers(true)}, twopc.StatusVoting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			b := newBank(t)
			held, release := make(chan string, 1), make(chan struct{})
			starter := b.coordinator(append(tc.opts, coordinator.WithLease(500*time.Millisecond),
				core.WithPhaseHook(func(_ context.Context, gid string, p core.Phase) error {
					if p == core.PhaseDecided {
						held <- gid
						<-release
					}
					return nil
				}))...)
			g, _ := starter.Begin(ctx)
			if err := b.move(ctx, g, 40); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- g.Commit(ctx) }()
			gid := <-held
			if n := len(b.Prepared(ctx)); n != 2 {
				t.Fatalf("%d prepared transactions between the phases, want 2", n)
			}
			if s := status(t, starter, gid); s != tc.held {
				t.Fatalf("status between the phases: %s, want %s", s, tc.held)
			}
			b.WantBalances(startBalance, startBalance)

			leader := b.coordinator(coordinator.WithElector(b.elector("leader")))
			run(t, leader)
			testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() bool {
				s, err := leader.Status(ctx, gid)
				return err == nil && s == twopc.StatusCommitted
			}, "the leader did not commit the decided transaction")
			b.WantBalances(startBalance-40, startBalance+40)
			b.NoPrepared()

			close(release) // the starter wakes; its phase two finds the work done
			if err := <-done; err != nil {
				t.Fatalf("starter's Commit after the leader finished: %v", err)
			}
			b.WantBalances(startBalance-40, startBalance+40)
		})
	}
}

// The starter stops after every branch prepared but before the decision: with no decision the
// transaction is presumed aborted, and the leader rolls both databases back at its timeout.
// (With vote markers, the default, there is no decision to wait for: every branch prepared is
// the decision to commit, which TestIntegrationCrashAfterDecisionRecovered/votes checks.)
func TestIntegrationCrashBeforeDecisionAborts(t *testing.T) {
	ctx := t.Context()
	b := newBank(t)
	held, release := make(chan string, 1), make(chan struct{})
	starter := b.coordinator(twopc.WithVoteMarkers(false), twopc.WithPrepareTimeout(500*time.Millisecond), core.WithPhaseHook(func(_ context.Context, gid string, p core.Phase) error {
		if p == core.PhasePrepared {
			held <- gid
			<-release
		}
		return nil
	}))
	g, _ := starter.Begin(ctx, coordinator.WithTimeout(time.Second))
	if err := b.move(ctx, g, 40); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Commit(ctx) }()
	gid := <-held
	released := false
	defer func() { // a failing test still lets the starter go: its held connection would stall the cleanup
		if !released {
			close(release)
			<-done
		}
	}()

	leader := b.coordinator(coordinator.WithElector(b.elector("leader")))
	run(t, leader)
	// The abort is recorded, then the prepared transactions are rolled back: wait for both.
	testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() bool {
		s, err := leader.Status(ctx, gid)
		return err == nil && s == twopc.StatusAborted && len(b.Prepared(ctx)) == 0
	}, "the leader did not abort the undecided transaction and roll its prepared transactions back")
	b.WantBalances(startBalance, startBalance)

	released = true
	close(release) // the starter wakes and tries to decide: too late
	if err := <-done; !errors.Is(err, twopc.ErrAborted) {
		t.Fatalf("starter's Commit after the timeout = %v, want ErrAborted", err)
	}
	b.WantBalances(startBalance, startBalance)
	b.NoPrepared()
}

// Prepared transactions the log can explain are resolved by ResolveInDoubt: one of a decided
// transaction is committed, one whose gid is unknown (presumed abort) is rolled back, and one of
// a transaction still in phase one is left alone. The starter writes its decision between the
// phases (no vote markers: with them a transaction is voting, not decided, between the phases,
// and the leader's settlement ends it, TestIntegrationCrashAfterDecisionRecovered/votes).
func TestIntegrationResolveInDoubt(t *testing.T) {
	ctx := t.Context()
	b := newBank(t)
	held, release := make(chan string, 2), make(chan struct{})
	var phase atomic.Value
	phase.Store(core.PhaseDecided)
	starter := b.coordinator(twopc.WithVoteMarkers(false), core.WithPhaseHook(func(_ context.Context, gid string, p core.Phase) error {
		if p == phase.Load().(core.Phase) {
			held <- gid
			<-release
		}
		return nil
	}))
	resolver := b.coordinator(twopc.WithInDoubtResolution("@every 1h", 0))
	commits, pending := make(chan error, 2), 2
	released := false
	defer func() { // a failing test still lets its starters go, and waits for them
		if !released {
			close(release)
		}
		for ; pending > 0; pending-- {
			<-commits
		}
	}()

	// A decided transaction whose starter is stuck before phase two.
	g1, _ := starter.Begin(ctx)
	if err := g1.Enlist(ctx, "east", update("alice", -5)); err != nil {
		t.Fatal(err)
	}
	go func() { commits <- g1.Commit(ctx) }()
	<-held
	// One still in phase one; its participant branch makes it recorded before it prepares.
	phase.Store(core.PhasePrepared)
	g2, _ := starter.Begin(ctx, coordinator.WithTimeout(time.Hour))
	if err := g2.Enlist(ctx, "west", update("bob", 7)); err != nil {
		t.Fatal(err)
	}
	yes, err := starter.Register("yes", participant.ParticipantFunc(func(context.Context, participant.Request) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.EnlistParticipant(twopc.Branch{Name: "yes", Participant: yes}); err != nil {
		t.Fatal(err)
	}
	go func() { commits <- g2.Commit(ctx) }()
	<-held
	// A prepared transaction named like ours whose gid the log has never heard of.
	orphan, err := b.East.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := orphan.Exec(ctx, `update accounts set balance = balance + 1000 where id = 'bob'`); err != nil {
		t.Fatal(err)
	}
	if _, err := orphan.Exec(ctx, "prepare transaction 'txkit:"+b.Log.Name+".txkit_2pc_:6:ghost1:east'"); err != nil {
		t.Fatal(err)
	}
	_ = orphan.Rollback(ctx) // only returns the connection: the prepared transaction lives on

	res, err := resolver.ResolveInDoubt(ctx)
	if err != nil {
		t.Fatalf("ResolveInDoubt: %v", err)
	}
	if res != (twopc.InDoubt{Found: 3, Committed: 1, RolledBack: 1, Undecided: 1}) {
		t.Fatalf("ResolveInDoubt = %+v, want found 3, committed 1, rolled back 1, undecided 1", res)
	}
	if got := balance(t, b.East.Pool, "alice"); got != startBalance-5 {
		t.Fatalf("alice = %d, want the decided transaction committed (%d)", got, startBalance-5)
	}
	if got := balance(t, b.East.Pool, "bob"); got != startBalance {
		t.Fatalf("east bob = %d, want the orphan rolled back (%d)", got, startBalance)
	}
	if ids := b.Prepared(ctx); len(ids) != 1 || !strings.HasSuffix(ids[0], ":west") {
		t.Fatalf("prepared after the scan = %v, want only the undecided one in west", ids)
	}
	// Running it again changes nothing and is not an error.
	if res, err := resolver.ResolveInDoubt(ctx); err != nil || res.Committed+res.RolledBack != 0 {
		t.Fatalf("second ResolveInDoubt = %+v, %v", res, err)
	}
	// The starters wake and finish: both commit, and nothing is left prepared.
	close(release)
	released = true
	for ; pending > 0; pending-- {
		if err := <-commits; err != nil {
			t.Errorf("a starter's Commit after the scan: %v", err)
		}
	}
	b.NoPrepared()
}

// Phase two is idempotent: committing (aborting) a branch whose prepared transaction is gone
// succeeds, so a duplicate commit or abort — a leader and a starter both finishing — is harmless.
func TestIntegrationDuplicateCommitAndAbort(t *testing.T) {
	ctx := t.Context()
	b := newBank(t)
	c := b.coordinator()
	g, _ := c.Begin(ctx)
	if err := b.move(ctx, g, 10); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// A second coordinator drives the committed transaction's phase two once more, as a
	// recovering leader that read it just before it finished would.
	other := b.coordinator(coordinator.WithElector(b.elector("other")))
	if res, err := other.ResolveInDoubt(ctx); err != nil || res.Found != 0 {
		t.Fatalf("ResolveInDoubt after commit = %+v, %v", res, err)
	}
	b.WantBalances(startBalance-10, startBalance+10)

	a, _ := c.Begin(ctx)
	if err := b.move(ctx, a, 10); err != nil {
		t.Fatal(err)
	}
	if err := a.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Abort(ctx); err != nil {
		t.Fatalf("second Abort: %v", err)
	}
	if err := a.Commit(ctx); !errors.Is(err, coordinator.ErrInvalidState) {
		t.Fatalf("Commit after Abort = %v, want ErrInvalidState", err)
	}
	b.WantBalances(startBalance-10, startBalance+10)
	b.NoPrepared()
	// Nothing was written for the aborted one: presumed abort needs no record.
	if _, err := c.Status(ctx, a.GID()); !errors.Is(err, coordinator.ErrNotFound) {
		t.Fatalf("Status of a transaction aborted before Commit = %v, want ErrNotFound", err)
	}
}

// A work function that fails rolls its database transaction back and leaves the branch out.
func TestIntegrationEnlistWorkFails(t *testing.T) {
	ctx := t.Context()
	b := newBank(t)
	c := b.coordinator()
	g, _ := c.Begin(ctx)
	if err := g.Enlist(ctx, "east", update("alice", -startBalance-1)); err == nil {
		t.Fatal("Enlist with a failing work (balance below zero) succeeded")
	}
	if err := g.Enlist(ctx, "west", update("bob", 1)); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.WantBalances(startBalance, startBalance+1)
	b.NoPrepared()
}

// Participant branches go through the barrier over HTTP: an abort that overtakes its prepare is
// an empty rollback, and the late prepare is refused instead of holding resources forever.
func TestIntegrationHTTPParticipantBarrier(t *testing.T) {
	ctx := t.Context()
	b := newBank(t)
	srv := newHTTPParty(t, b.East.Pool)
	c := b.coordinator()
	g, _ := c.Begin(ctx)
	if err := g.Enlist(ctx, "west", update("bob", 3)); err != nil {
		t.Fatal(err)
	}
	if err := g.EnlistParticipant(twopc.Branch{Name: "points", Participant: participant.HTTP{URL: srv.url}, Payload: json.RawMessage(`{"n":3}`)}); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if got := srv.applied(t); got != 3 {
		t.Fatalf("points applied = %d, want 3", got)
	}
	// The empty rollback and the hanging prepare, by hand.
	p := participant.HTTP{URL: srv.url}
	if err := p.Do(ctx, participant.Request{GID: "late", Branch: "points", Op: participant.OpAbort}); err != nil {
		t.Fatalf("abort before prepare: %v", err)
	}
	err := p.Do(ctx, participant.Request{GID: "late", Branch: "points", Op: participant.OpPrepare, Payload: json.RawMessage(`{"n":5}`)})
	if !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("prepare after abort = %v, want refused", err)
	}
	if got := srv.pending(t); got != 0 {
		t.Fatalf("pending points after the hanging prepare = %d, want 0", got)
	}
}

func TestIntegrationBadInput(t *testing.T) {
	ctx := t.Context()
	b := newBank(t)
	c := b.coordinator()
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"unregistered database", func() error { g, _ := c.Begin(ctx); return g.Enlist(ctx, "north", update("a", 1)) }(), coordinator.ErrInvalidBranch},
		{"nil work", func() error { g, _ := c.Begin(ctx); return g.Enlist(ctx, "east", nil) }(), coordinator.ErrInvalidBranch},
		{"enlisted twice", func() error {
			g, _ := c.Begin(ctx)
			defer g.Abort(ctx)
			if err := g.Enlist(ctx, "east", update("alice", 1)); err != nil {
				return err
			}
			return g.Enlist(ctx, "east", update("alice", 1))
		}(), coordinator.ErrInvalidBranch},
		{"gid too long", func() error { _, err := c.Begin(ctx, coordinator.WithGID(strings.Repeat("g", 300))); return err }(), coordinator.ErrInvalidOption},
		{"prepared id too long", func() error {
			g, _ := c.Begin(ctx, coordinator.WithGID(strings.Repeat("g", 190)))
			return g.Enlist(ctx, "east", update("alice", 1))
		}(), coordinator.ErrInvalidBranch},
		{"timeout not above prepare timeout", func() error { _, err := c.Begin(ctx, coordinator.WithTimeout(time.Second)); return err }(), coordinator.ErrInvalidOption},
		{"participant branch without name", func() error {
			g, _ := c.Begin(ctx)
			return g.EnlistParticipant(twopc.Branch{Participant: participant.HTTP{URL: "http://127.0.0.1:1/x"}})
		}(), coordinator.ErrInvalidBranch},
		{"payload not JSON", func() error {
			g, _ := c.Begin(ctx)
			return g.EnlistParticipant(twopc.Branch{Name: "x", Participant: participant.HTTP{URL: "http://127.0.0.1:1/x"}, Payload: json.RawMessage("{")})
		}(), coordinator.ErrInvalidBranch},
		{"unrecordable participant", func() error {
			g, _ := c.Begin(ctx)
			return g.EnlistParticipant(twopc.Branch{Name: "x", Participant: participant.ParticipantFunc(nil)})
		}(), coordinator.ErrInvalidBranch},
		{"enlist after abort", func() error {
			g, _ := c.Begin(ctx)
			_ = g.Abort(ctx)
			return g.Enlist(ctx, "east", update("alice", 1))
		}(), coordinator.ErrInvalidState},
		{"unknown transaction", func() error { _, err := c.Status(ctx, "no-such-gid"); return err }(), coordinator.ErrNotFound},
		{"register database twice", c.RegisterDB("east", b.East.Pool), coordinator.ErrInvalidOption},
		{"register nil pool", c.RegisterDB("south", nil), coordinator.ErrInvalidOption},
		{"run without elector", c.Run(ctx), coordinator.ErrInvalidOption},
		{"prepare timeout above timeout", func() error {
			_, err := twopc.New(b.Log.Pool, twopc.WithPrepareTimeout(time.Minute), coordinator.WithDefaultTimeout(time.Second))
			return err
		}(), coordinator.ErrInvalidOption},
		{"zero concurrency", func() error { _, err := twopc.New(b.Log.Pool, coordinator.WithConcurrency(0)); return err }(), coordinator.ErrInvalidOption},
		{"gid with a backslash", func() error { _, err := c.Begin(ctx, coordinator.WithGID(`a\b`)); return err }(), coordinator.ErrInvalidOption},
		{"gid with a newline", func() error { _, err := c.Begin(ctx, coordinator.WithGID("a\nb")); return err }(), coordinator.ErrInvalidOption},
		{"gid with DEL", func() error { _, err := c.Begin(ctx, coordinator.WithGID("a\x7fb")); return err }(), coordinator.ErrInvalidOption},
		{"gid with a C1 control", func() error { _, err := c.Begin(ctx, coordinator.WithGID("a\u0085b")); return err }(), coordinator.ErrInvalidOption},
		{"participant branch with a backslash", func() error {
			g, _ := c.Begin(ctx)
			return g.EnlistParticipant(twopc.Branch{Name: `x\y`, Participant: participant.HTTP{URL: "http://127.0.0.1:1/x"}})
		}(), coordinator.ErrInvalidBranch},
		{"participant branch with a tab", func() error {
			g, _ := c.Begin(ctx)
			return g.EnlistParticipant(twopc.Branch{Name: "x\ty", Participant: participant.HTTP{URL: "http://127.0.0.1:1/x"}})
		}(), coordinator.ErrInvalidBranch},
		{"database name with a backslash", c.RegisterDB(`south\`, b.East.Pool), coordinator.ErrInvalidOption},
		{"database name with an escape", c.RegisterDB("south\x1b[2J", b.East.Pool), coordinator.ErrInvalidOption},
		{"schema with a backslash", func() error { _, err := twopc.New(b.Log.Pool, coordinator.WithSchema(`bank\`)); return err }(), coordinator.ErrInvalidOption},
		{"table prefix with a control character", func() error {
			_, err := twopc.New(b.Log.Pool, twopc.WithTablePrefixForTest("p\x01_"))
			return err
		}(), coordinator.ErrInvalidOption},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: error %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	b.NoPrepared()
}

// A transaction with no branch commits trivially and writes nothing.
func TestIntegrationEmptyCommit(t *testing.T) {
	b := newBank(t)
	c := b.coordinator()
	g, _ := c.Begin(t.Context())
	if err := g.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.Log.Pool.QueryRow(t.Context(), `select count(*) from txkit_2pc_global`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows in the log after an empty commit: %d, %v", n, err)
	}
}

// An Enlist whose work is still running when Commit starts is left out of the commit: its work is
// rolled back and it returns ErrInvalidState, while the branches enlisted before are committed.
func TestIntegrationEnlistDuringCommit(t *testing.T) {
	ctx := t.Context()
	b := newBank(t)
	c := b.coordinator()
	g, _ := c.Begin(ctx)
	if err := g.Enlist(ctx, "west", update("bob", 2)); err != nil {
		t.Fatal(err)
	}
	working, finish := make(chan struct{}), make(chan struct{})
	late := make(chan error, 1)
	go func() {
		late <- g.Enlist(ctx, "east", func(ctx context.Context, tx pgx.Tx) error {
			close(working)
			<-finish
			return update("alice", -2)(ctx, tx)
		})
	}()
	<-working
	if err := g.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	close(finish)
	if err := <-late; !errors.Is(err, coordinator.ErrInvalidState) {
		t.Fatalf("Enlist that outlasted Commit = %v, want ErrInvalidState", err)
	}
	b.WantBalances(startBalance, startBalance+2)
	b.NoPrepared()
}

// A panic in an Enlist's work goes on to the caller, as in pgx.BeginFunc, but only after the
// branch's transaction was rolled back, its connection released and its name freed: nothing is
// left holding a connection "idle in transaction" or the rows the work touched.
func TestIntegrationEnlistWorkPanics(t *testing.T) {
	ctx := t.Context()
	b := newBank(t)
	east := b.pool(b.East, 2, nil)
	c := b.coordinatorOn(map[string]*pgxpool.Pool{"east": east, "west": b.West.Pool})
	g, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	panicked := func() (v any) {
		defer func() { v = recover() }()
		_ = g.Enlist(ctx, "east", func(ctx context.Context, tx pgx.Tx) error {
			if err := update("alice", -10)(ctx, tx); err != nil {
				return err
			}
			panic("work blew up")
		})
		return nil
	}()
	if panicked != "work blew up" {
		t.Fatalf("Enlist's work panic reached the caller as %v", panicked)
	}
	if n := east.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still acquired after the panic, want 0", n)
	}
	// The row the work locked is free: the same branch enlists again and commits.
	if err := g.Enlist(ctx, "east", update("alice", -10)); err != nil {
		t.Fatalf("Enlist after the panic: %v", err)
	}
	if err := g.Enlist(ctx, "west", update("bob", 10)); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	b.WantBalances(startBalance-10, startBalance+10)
	b.NoPrepared()
}

// With WithDeferredFinish, Commit returns once the COMMIT PREPAREDs are done; Flush waits for
// the outcome's record.
func TestIntegrationDeferredFinish(t *testing.T) {
	ctx := t.Context()
	b := newBank(t)
	c := b.coordinator(coordinator.WithDeferredFinish(true))
	g, err := c.Begin(ctx, coordinator.WithGID("transfer-deferred"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.move(ctx, g, 30); err != nil {
		t.Fatalf("enlist: %v", err)
	}
	if err := g.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	b.WantBalances(startBalance-30, startBalance+30)
	b.NoPrepared()
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if s := status(t, c, "transfer-deferred"); s != twopc.StatusCommitted {
		t.Fatalf("status after Flush %s, want committed", s)
	}
}

// One client's transfers over two databases commit 5 times each, with the default options (vote
// markers): the record beside the PREPAREs, two PREPARE TRANSACTIONs (each with its vote row),
// two COMMIT PREPAREDs; the outcome rides on the next transfer's record (deferred finish; 6
// before it did for a voting transaction). With the decision written between the phases instead
// (WithVoteMarkers(false)) it is the same count: the decision with the branches, the PREPAREs,
// the COMMIT PREPAREDs. Bare two-phase commit: 4.
func TestIntegrationCommitsPerTransfer(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []coordinator.Option
	}{{"default", nil}, {"decision", []coordinator.Option{twopc.WithVoteMarkers(false)}}} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBank(t)
			cc := coretest.NewCommitCounter(t)
			c, err := twopc.New(cc.Pool(b.Log.URL), coretest.Options(t, b.Log.Name,
				append([]coordinator.Option{twopc.WithInDoubtResolution("@every 1h", 0)}, tc.opts...)...)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			coretest.FlushAtCleanup(t, c)
			if err := c.Migrate(t.Context()); err != nil {
				t.Fatal(err)
			}
			for name, s := range map[string]*testenv.Schema{"east": b.East, "west": b.West} {
				if err := c.RegisterDB(name, cc.Pool(s.URL)); err != nil {
					t.Fatal(err)
				}
			}
			const n = 20
			per := cc.PerTransaction(c, n, func(ctx context.Context) error {
				g, err := c.Begin(ctx)
				if err != nil {
					return err
				}
				if err := b.move(ctx, g, 1); err != nil {
					return err
				}
				return g.Commit(ctx)
			})
			t.Logf("%.2f commits per transfer", per)
			if max := 5 + 2.0/n; per > max { // 1/n: the last outcome, alone; 1/n: slack for a loaded machine
				t.Fatalf("%.2f commits per transfer, want at most %.2f", per, max)
			}
		})
	}
}

// TestIntegrationRoundTripsPerTransfer: a transfer sends three round trips to each database, as
// the hand-written PREPARE TRANSACTION / COMMIT PREPARED sends four: the branch's begin goes out
// with its work's first statement, the vote with the PREPARE; then the COMMIT PREPARED. A work
// that sends nothing still prepares and commits (its PREPARE opens the transaction first).
func TestIntegrationRoundTripsPerTransfer(t *testing.T) {
	b := newBank(t)
	east, eastRT := testenv.CountingPool(t, b.East)
	west, westRT := testenv.CountingPool(t, b.West)
	c := b.coordinatorOn(map[string]*pgxpool.Pool{"east": east, "west": west})
	ctx := t.Context()
	transfer := func(work func(ctx context.Context, tx pgx.Tx) error) error {
		g, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		if err := g.Enlist(ctx, "east", work); err != nil {
			return err
		}
		if err := g.Enlist(ctx, "west", update("bob", 1)); err != nil {
			return err
		}
		return g.Commit(ctx)
	}
	if err := transfer(update("alice", -1)); err != nil { // the vote table's creation, on the phase-two pools
		t.Fatal(err)
	}
	for i := range 3 {
		var err error
		eq, eb := eastRT.During(func() {
			wq, wb := westRT.During(func() { err = transfer(update("alice", -1)) })
			if err == nil && (wq != 2 || wb != 1) {
				t.Errorf("transfer %d sent west %d statements and %d batches; want 2 (the vote with the PREPARE, the COMMIT PREPARED) and 1 (the begin with the work's update)", i, wq, wb)
			}
		})
		if err != nil {
			t.Fatalf("transfer %d: %v", i, err)
		}
		if eq != 2 || eb != 1 {
			t.Errorf("transfer %d sent east %d statements and %d batches; want 2 and 1", i, eq, eb)
		}
	}
	if err := transfer(func(context.Context, pgx.Tx) error { return nil }); err != nil {
		t.Fatalf("a transfer whose east work sends nothing: %v", err)
	}
	b.WantBalances(preparedtest.StartBalance-4, preparedtest.StartBalance+5)
}
