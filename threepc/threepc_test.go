package threepc_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/threepc/agent"
)

// All yes: both databases and the participant commit; the participant sees the three phases.
func TestIntegrationCommit(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t)
	c := w.coordinator()
	rec := &recorder{}
	p, err := c.Register("points", rec)
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := move(g, 40); err != nil {
		t.Fatal(err)
	}
	if err := g.EnlistParticipant(threepc.Branch{Name: "points", Participant: p, Payload: []byte(`{"n":40}`)}); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	w.WantBalances(startBalance-40, startBalance+40)
	if got := rec.seen(); got != "cancommit,precommit,docommit" {
		t.Fatalf("participant saw %s", got)
	}
	if st := status(t, c, g.GID()); st != threepc.StatusCommitted {
		t.Fatalf("status %v", st)
	}
	if s := c.Stats(); s.Committed != 1 || s.Aborted != 0 {
		t.Fatalf("stats %+v", s)
	}
	w.NoPrepared()
}

// A "no" at CanCommit: nothing is executed anywhere, nothing recorded; the participant gets the
// abort (its barrier then refuses a late precommit), never a precommit.
func TestIntegrationNoAtCanCommit(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t)
	c := w.coordinator()
	rec := &recorder{}
	p, _ := c.Register("points", rec)
	g, _ := c.Begin(ctx)
	if err := move(g, startBalance+1); err != nil { // alice has too little: east votes no
		t.Fatal(err)
	}
	if err := g.EnlistParticipant(threepc.Branch{Name: "points", Participant: p}); err != nil {
		t.Fatal(err)
	}
	err := g.Commit(ctx)
	if !errors.Is(err, threepc.ErrAborted) || !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Commit = %v, want ErrAborted wrapping ErrRefused", err)
	}
	if !strings.Contains(err.Error(), "less than") {
		t.Fatalf("the error does not say why: %v", err)
	}
	w.WantBalances(startBalance, startBalance)
	if got := rec.seen(); got != "cancommit,abort" {
		t.Fatalf("participant saw %s, want cancommit,abort", got)
	}
	if _, err := c.Status(ctx, g.GID()); !errors.Is(err, coordinator.ErrNotFound) {
		t.Fatalf("a transaction refused at CanCommit is in the log: %v", err)
	}
	w.NoPrepared()
}

// A failure at PreCommit (west's account does not exist... after east pre-committed) aborts
// everywhere: east's prepared transaction is rolled back, the participant's precommit undone.
func TestIntegrationPreCommitFailureAbortsAll(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t)
	c := w.coordinator()
	rec := &recorder{fail: map[participant.Op]bool{participant.OpPreCommit: true}}
	p, _ := c.Register("points", rec)
	g, _ := c.Begin(ctx)
	if err := move(g, 40); err != nil {
		t.Fatal(err)
	}
	if err := g.EnlistParticipant(threepc.Branch{Name: "points", Participant: p}); err != nil {
		t.Fatal(err)
	}
	err := g.Commit(ctx)
	if !errors.Is(err, threepc.ErrAborted) {
		t.Fatalf("Commit = %v, want ErrAborted", err)
	}
	var be *coordinator.BranchError
	if !errors.As(err, &be) || be.Branch != "points" || be.Op != participant.OpPreCommit {
		t.Fatalf("the error does not name the failed branch and op: %v", err)
	}
	w.WantBalances(startBalance, startBalance)
	if got := rec.seen(); got != "cancommit,precommit,abort" {
		t.Fatalf("participant saw %s", got)
	}
	if st := status(t, c, g.GID()); st != threepc.StatusAborted {
		t.Fatalf("status %v, want aborted", st)
	}
	w.NoPrepared()

	// A database's own work failing at PreCommit does the same.
	g, _ = c.Begin(ctx)
	if err := g.Enlist("east", threepc.DBWork{PreCommit: update("alice", -10)}); err != nil {
		t.Fatal(err)
	}
	if err := g.Enlist("west", threepc.DBWork{PreCommit: update("zoe", 10)}); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(ctx); !errors.Is(err, threepc.ErrAborted) || !strings.Contains(err.Error(), "no account zoe") {
		t.Fatalf("Commit = %v, want ErrAborted naming zoe", err)
	}
	w.WantBalances(startBalance, startBalance)
	w.NoPrepared()
}

// A phase timeout shorter than a participant's answer aborts, and the error names the phase and
// the timeout.
func TestIntegrationPhaseTimeout(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t)
	c := w.coordinator()
	rec := &recorder{delay: map[participant.Op]time.Duration{participant.OpCanCommit: 2 * time.Second}}
	p, _ := c.Register("slow", rec)
	g, _ := c.Begin(ctx)
	if err := move(g, 5); err != nil {
		t.Fatal(err)
	}
	if err := g.EnlistParticipant(threepc.Branch{Name: "slow", Participant: p}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := g.Commit(ctx)
	if !errors.Is(err, threepc.ErrAborted) || !errors.Is(err, threepc.ErrPhaseTimeout) {
		t.Fatalf("Commit = %v, want ErrAborted and ErrPhaseTimeout", err)
	}
	if !strings.Contains(err.Error(), "cancommit timeout 500ms") {
		t.Fatalf("the error does not name the phase and its timeout: %v", err)
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Fatalf("Commit took %v; the phase timeout is 500ms", took)
	}
	w.WantBalances(startBalance, startBalance)
	w.NoPrepared()
}

// The starter is SIGKILLed after every branch pre-committed, before the decision. Textbook agents
// commit both databases at their timeout (money conserved: the transfer happened); the leader
// later aborts the undecided record at the global timeout — its ROLLBACK PREPAREDs find nothing
// — so the log says aborted while the data says committed: textbook three-phase commit's
// coordinator and participants decide apart.
func TestIntegrationKilledAfterPreCommitTextbook(t *testing.T) {
	w := newWorld(t)
	c := w.coordinator()
	w.killedStarter("killed-textbook", core.PhasePreCommitted)
	if n := len(w.Prepared(t.Context())); n != 2 {
		t.Fatalf("%d prepared transactions after the kill, want 2", n)
	}
	killed := time.Now()
	agents := w.agents(c, agent.WithTermination(agent.TerminationTextbook, 0))
	testenv.Eventually(t, 15*time.Second, 50*time.Millisecond, func() bool { return len(w.Prepared(t.Context())) == 0 },
		"the textbook agents did not end the prepared transactions")
	t.Logf("row locks held %v after the kill (participant timeout %v)", time.Since(killed).Round(time.Millisecond), participantTimeout)
	w.WantBalances(startBalance-40, startBalance+40)
	if a, b := agents[0].Stats(), agents[1].Stats(); a.Committed != 1 || b.Committed != 1 || a.RolledBack+b.RolledBack != 0 {
		t.Fatalf("agents %+v %+v, want one commit each", a, b)
	}
	if st := status(t, c, "killed-textbook"); st != threepc.StatusPreCommitting {
		t.Fatalf("log %v: the textbook agents must not write the log", st)
	}
}

// The same kill with consult-log agents: the log is undecided, so the first agent records the
// abort and both roll back; the transfer never happened, in the data and in the log.
func TestIntegrationKilledAfterPreCommitConsultLog(t *testing.T) {
	w := newWorld(t)
	c := w.coordinator(coordinator.WithElector(zkenv.Elector(t, w.Path, "leader")), coordinator.WithLease(200*time.Millisecond))
	w.killedStarter("killed-consult", core.PhasePreCommitted)
	agents := w.agents(c)
	testenv.Eventually(t, 15*time.Second, 50*time.Millisecond, func() bool { return len(w.Prepared(t.Context())) == 0 },
		"the consult-log agents did not end the prepared transactions")
	w.WantBalances(startBalance, startBalance)
	if a, b := agents[0].Stats(), agents[1].Stats(); a.RolledBack != 1 || b.RolledBack != 1 || a.Fallbacks+b.Fallbacks != 0 {
		t.Fatalf("agents %+v %+v, want one rollback each by the log", a, b)
	}
	if s := c.Stats(); s.AgentAborts != 1 {
		t.Fatalf("coordinator stats %+v: the abort was recorded %d times, want once", s, s.AgentAborts)
	}
	testenv.Run(t, c.Run) // the leader finishes the record the agents decided
	testenv.Eventually(t, 15*time.Second, 50*time.Millisecond, func() bool {
		st, err := c.Status(t.Context(), "killed-consult")
		return err == nil && st == threepc.StatusAborted
	}, "the leader did not finish the aborted record")
}

// Killed after the decision: consult-log agents commit by the log's decision.
func TestIntegrationKilledAfterDecisionConsultLog(t *testing.T) {
	w := newWorld(t)
	c := w.coordinator(coordinator.WithElector(zkenv.Elector(t, w.Path, "leader")), coordinator.WithLease(200*time.Millisecond))
	w.killedStarter("killed-decided", core.PhaseDecided)
	agents := w.agents(c)
	testenv.Eventually(t, 15*time.Second, 50*time.Millisecond, func() bool { return len(w.Prepared(t.Context())) == 0 },
		"the consult-log agents did not end the prepared transactions")
	w.WantBalances(startBalance-40, startBalance+40)
	if a, b := agents[0].Stats(), agents[1].Stats(); a.Committed != 1 || b.Committed != 1 || a.Fallbacks+b.Fallbacks != 0 {
		t.Fatalf("agents %+v %+v, want one commit each by the log", a, b)
	}
	testenv.Run(t, c.Run)
	testenv.Eventually(t, 15*time.Second, 50*time.Millisecond, func() bool {
		st, err := c.Status(t.Context(), "killed-decided")
		return err == nil && st == threepc.StatusCommitted
	}, "the leader did not finish the committed record")
}

// Misuse and bad input get clear errors.
func TestIntegrationBadInput(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t)
	c := w.coordinator()
	for name, opts := range map[string][]coordinator.Option{
		"participant timeout not above the phases": {threepc.WithTimeouts(time.Second, 2*time.Second, 3*time.Second)},
		"participant timeout not below global":     {threepc.WithTimeouts(5*time.Second, 10*time.Second, 2*time.Minute)},
		"zero cancommit timeout":                   {threepc.WithTimeouts(0, 10*time.Second, 20*time.Second)},
		"backslash schema":                         {coordinator.WithSchema(`a\b`)},
	} {
		if _, err := threepc.New(w.Log.Pool, opts...); !errors.Is(err, coordinator.ErrInvalidOption) {
			t.Errorf("%s: New = %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := threepc.New(w.Log.Pool, threepc.WithTimeouts(time.Second, 2*time.Second, 3*time.Second)); err == nil || !strings.Contains(err.Error(), "agents would decide while the coordinator may still be in phase two") {
		t.Errorf("the error for a participant timeout below the phases does not say why: %v", err)
	}
	if _, err := c.Begin(ctx, coordinator.WithTimeout(time.Second)); !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Errorf("Begin with a timeout below the participant timeout = %v", err)
	}
	if _, err := c.Begin(ctx, coordinator.WithGID("a\nb")); !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Errorf("Begin with a control character in the gid = %v", err)
	}
	g, _ := c.Begin(ctx)
	if err := g.Enlist("north", threepc.DBWork{PreCommit: update("alice", 1)}); !errors.Is(err, coordinator.ErrInvalidBranch) {
		t.Errorf("Enlist of an unregistered database = %v", err)
	}
	if err := g.Enlist("east", threepc.DBWork{}); !errors.Is(err, coordinator.ErrInvalidBranch) {
		t.Errorf("Enlist without PreCommit = %v", err)
	}
	if err := g.Enlist("east", threepc.DBWork{PreCommit: update("alice", -1)}); err != nil {
		t.Fatal(err)
	}
	if err := g.Enlist("east", threepc.DBWork{PreCommit: update("alice", -1)}); !errors.Is(err, coordinator.ErrInvalidBranch) {
		t.Errorf("Enlist twice = %v", err)
	}
	if err := g.EnlistParticipant(threepc.Branch{Name: "x", Participant: participant.HTTP{URL: "http://127.0.0.1:1/"}, Payload: []byte("{")}); !errors.Is(err, coordinator.ErrInvalidBranch) {
		t.Errorf("a payload that is not JSON = %v", err)
	}
	// A branch enlisted while Commit runs is refused: a branch cannot join a commit that has begun.
	slow := &recorder{delay: map[participant.Op]time.Duration{participant.OpCanCommit: 300 * time.Millisecond}}
	p, _ := c.Register("slow", slow)
	if err := g.EnlistParticipant(threepc.Branch{Name: "slow", Participant: p}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Commit(ctx) }()
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool { return slow.seen() != "" }, "commit did not start")
	if err := g.Enlist("west", threepc.DBWork{PreCommit: update("bob", 1)}); !errors.Is(err, coordinator.ErrInvalidState) || !strings.Contains(err.Error(), "commit already begun") {
		t.Errorf("Enlist during Commit = %v, want ErrInvalidState saying the commit has begun", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if err := g.Commit(ctx); !errors.Is(err, coordinator.ErrInvalidState) {
		t.Errorf("second Commit = %v", err)
	}
	if err := g.Abort(ctx); !errors.Is(err, coordinator.ErrInvalidState) {
		t.Errorf("Abort after Commit = %v", err)
	}
	w.WantBalances(startBalance-1, startBalance)
	w.NoPrepared()
}

// A transaction with no branch commits trivially and writes nothing; Abort before Commit runs
// nothing.
func TestIntegrationEmptyAndAbort(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t)
	c := w.coordinator()
	g, _ := c.Begin(ctx)
	if err := g.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(ctx, g.GID()); !errors.Is(err, coordinator.ErrNotFound) {
		t.Fatalf("an empty transaction was recorded: %v", err)
	}
	g, _ = c.Begin(ctx)
	if err := move(g, 10); err != nil {
		t.Fatal(err)
	}
	if err := g.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(ctx); !errors.Is(err, coordinator.ErrInvalidState) {
		t.Fatalf("Commit after Abort = %v", err)
	}
	w.WantBalances(startBalance, startBalance)
}
