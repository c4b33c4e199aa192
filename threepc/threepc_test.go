package threepc_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/threepc"
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
	w.killedStarter("killed-textbook", threepc.PhasePreCommitted)
	if n := len(w.Prepared(t.Context())); n != 2 {
		t.Fatalf("%d prepared transactions after the kill, want 2", n)
	}
	killed := time.Now()
	agents := w.agents(c, threepc.WithAgentTermination(participant.TerminationTextbook))
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
	w.killedStarter("killed-consult", threepc.PhasePreCommitted)
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
	w.killedStarter("killed-decided", threepc.PhaseDecided)
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

// A consult-log agent built with WithAgentLogFallback falls back to the textbook rule once the
// log has been unreachable that long (the agent's clock is the test's, so participant.MinLogFallback
// passes at once), not before; the fallback is counted in Stats and in
// txkit_3pc_pgagent_fallbacks_total. A shorter fallback is refused when the agent is built.
func TestIntegrationAgentFallsBackWhenLogUnreachable(t *testing.T) {
	w := newWorld(t)
	c := w.coordinator()
	w.killedStarter("killed-nolog", threepc.PhasePreCommitted)
	// A coordinator whose log pool points nowhere: every Decide fails.
	reg := prometheus.NewRegistry()
	dead := newDeadCoordinator(t, w, coordinator.WithRegisterer(reg))
	for name, opts := range map[string][]threepc.AgentOption{
		"below the minimum outage": {threepc.WithAgentLogFallback(participant.MinLogFallback - time.Second)},
		"the old 15 s":             {threepc.WithAgentLogFallback(15 * time.Second)},
		"textbook":                 {threepc.WithAgentTermination(participant.TerminationTextbook), threepc.WithAgentLogFallback(time.Hour)},
	} {
		if _, err := threepc.NewPGAgent(dead, "east", w.East.Pool, opts...); !errors.Is(err, coordinator.ErrInvalidOption) ||
			!strings.Contains(err.Error(), "WithAgentLogFallback applies to") && !strings.Contains(err.Error(), "below the minimum outage of 5m0s") {
			t.Errorf("NewPGAgent with a log fallback %s = %v, want ErrInvalidOption saying why", name, err)
		}
	}
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	a, err := threepc.NewPGAgent(dead, "east", w.East.Pool, threepc.WithAgentTimeout(participantTimeout),
		threepc.WithAgentLogFallback(participant.MinLogFallback), threepc.WithAgentClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, 100*time.Millisecond, func() bool {
		res, err := a.Pass(t.Context())
		if err != nil {
			t.Fatalf("Pass: %v", err)
		}
		if res.Found == 0 {
			return false
		}
		if res != (threepc.AgentPass{Found: 1, Waiting: 1}) {
			t.Fatalf("pass %+v as the log's outage begins, want the transaction waiting", res)
		}
		return true
	}, "the agent found nothing to do")
	for _, step := range []struct {
		advance time.Duration
		want    threepc.AgentPass
	}{
		{participant.MinLogFallback - time.Second, threepc.AgentPass{Found: 1, Waiting: 1}},
		{time.Second, threepc.AgentPass{Found: 1, Committed: 1, Fallbacks: 1}},
	} {
		advance(step.advance)
		if res, err := a.Pass(t.Context()); err != nil || res != step.want {
			t.Fatalf("pass after %v more = %+v, %v; want %+v", step.advance, res, err, step.want)
		}
	}
	if a := balance(t, w.East.Pool, "alice"); a != startBalance-40 {
		t.Fatalf("alice %d after the fallback commit", a)
	}
	if s := a.Stats(); s != (threepc.AgentStats{Committed: 1, Fallbacks: 1}) {
		t.Fatalf("Stats = %+v, want one commit by fallback", s)
	}
	if got := gathered(t, reg, "txkit_3pc_pgagent_fallbacks_total", "database", "east"); got != 1 {
		t.Fatalf("txkit_3pc_pgagent_fallbacks_total{database=east} = %v, want 1", got)
	}
	// West's agent, with the log back, ends its half by the log (undecided → aborted): the two
	// halves disagree, which is what a fallback risks when the log is unreachable.
	west, err := threepc.NewPGAgent(c, "west", w.West.Pool, threepc.WithAgentTimeout(participantTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := west.Pass(t.Context()); err != nil || res.RolledBack != 1 {
		t.Fatalf("west's pass with the log reachable = %+v, %v; want one rollback", res, err)
	}
	w.NoPrepared()
}

func newDeadCoordinator(t *testing.T, w *world, opts ...coordinator.Option) *threepc.Coordinator {
	t.Helper()
	ln := testenv.NewRawProxy(t, "127.0.0.1:1")
	ln.Down()
	pool := w.poolVia(ln.Addr())
	dead, err := threepc.New(pool, append([]coordinator.Option{coordinator.WithSchema(w.Log.Name), threepc.WithCanCommitTimeout(500 * time.Millisecond),
		threepc.WithPreCommitTimeout(time.Second), threepc.WithParticipantTimeout(participantTimeout), coordinator.WithDefaultTimeout(6 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return dead
}

// Misuse and bad input get clear errors.
func TestIntegrationBadInput(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t)
	c := w.coordinator()
	for name, opts := range map[string][]coordinator.Option{
		"participant timeout not above the phases": {threepc.WithCanCommitTimeout(time.Second), threepc.WithPreCommitTimeout(2 * time.Second), threepc.WithParticipantTimeout(3 * time.Second)},
		"participant timeout not below global":     {threepc.WithParticipantTimeout(2 * time.Minute)},
		"zero cancommit timeout":                   {threepc.WithCanCommitTimeout(0)},
		"zero phase-two conns":                     {threepc.WithPhaseTwoConns(0)},
		"backslash schema":                         {coordinator.WithSchema(`a\b`)},
	} {
		if _, err := threepc.New(w.Log.Pool, opts...); !errors.Is(err, coordinator.ErrInvalidOption) {
			t.Errorf("%s: New = %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := threepc.New(w.Log.Pool, threepc.WithCanCommitTimeout(time.Second), threepc.WithPreCommitTimeout(2*time.Second),
		threepc.WithParticipantTimeout(3*time.Second)); err == nil || !strings.Contains(err.Error(), "agents would decide while the coordinator may still be in phase two") {
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
