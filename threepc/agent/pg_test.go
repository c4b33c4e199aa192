package agent_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/obs/obstest"
	"github.com/txkit/txkit/internal/prepared/preparedtest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/threepc/agent"
)

// participantTimeout is the PG tests' coordinators' participant timeout, and their agents'.
const participantTimeout = 2 * time.Second

// pgCoordinator returns a migrated threepc.Coordinator of w's log reached through pool, with
// east and west registered and short timeouts (cancommit 500ms, precommit 1s, participant 2s,
// global 6s), closed when the test ends.
func pgCoordinator(t *testing.T, w *preparedtest.Bank, pool *pgxpool.Pool, opts ...coordinator.Option) *threepc.Coordinator {
	t.Helper()
	c := coretest.New(t, threepc.New, pool, w.Log.Name, append([]coordinator.Option{threepc.WithTimeouts(500*time.Millisecond, time.Second, participantTimeout),
		coordinator.WithDefaultTimeout(6 * time.Second)}, opts...)...)
	t.Cleanup(func() { _ = c.Close() })
	for name, s := range map[string]*testenv.Schema{"east": w.East, "west": w.West} {
		if err := c.RegisterDB(name, s.Pool); err != nil {
			t.Fatalf("RegisterDB(%s): %v", name, err)
		}
	}
	return c
}

// stuckAfterPreCommit begins, on a coordinator of its own, a transfer of 40 from alice in east to
// bob in west with gid, and holds its starter after every branch pre-committed, before the
// decision — as a starter that died there leaves it — until the test ends.
func stuckAfterPreCommit(t *testing.T, w *preparedtest.Bank, gid string) {
	t.Helper()
	release := make(chan struct{})
	starter := pgCoordinator(t, w, w.Log.Pool, core.WithPhaseHook(func(ctx context.Context, _ string, p core.Phase) error {
		if p == core.PhasePreCommitted {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return errors.New("the starter was released at the test's end")
		}
		return nil
	}))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Minute)
	g, err := starter.Begin(ctx, coordinator.WithGID(gid))
	if err == nil {
		err = g.Enlist("east", threepc.DBWork{PreCommit: preparedtest.Update("alice", -40)})
	}
	if err == nil {
		err = g.Enlist("west", threepc.DBWork{PreCommit: preparedtest.Update("bob", 40)})
	}
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Commit(ctx)
	}()
	t.Cleanup(func() { close(release); <-done; cancel() })
	testenv.Eventually(t, 15*time.Second, 20*time.Millisecond, func() bool { return len(w.Prepared(ctx)) == 2 },
		"the branches did not pre-commit")
}

// A consult-log PG built with a WithTermination fallback falls back to the textbook rule once the
// log has been unreachable that long (the agent's clock is the test's, so MinLogFallback passes at once),
// not before; the fallback is counted in Stats and in txkit_3pc_pgagent_fallbacks_total. A
// shorter fallback is refused when the agent is built.
func TestIntegrationAgentFallsBackWhenLogUnreachable(t *testing.T) {
	w := preparedtest.NewBank(t)
	c := pgCoordinator(t, w, w.Log.Pool)
	stuckAfterPreCommit(t, w, "stuck-nolog")
	// A coordinator whose log pool points nowhere (a port nothing listens on): every Decide fails.
	cfg, err := pgxpool.ParseConfig(w.Log.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = "127.0.0.1", 1, nil
	nowhere, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nowhere.Close)
	reg := prometheus.NewRegistry()
	dead, err := threepc.New(nowhere, coretest.Options(t, w.Log.Name, threepc.WithTimeouts(500*time.Millisecond, time.Second, participantTimeout),
		coordinator.WithDefaultTimeout(6*time.Second), coordinator.WithTelemetry(reg, nil))...)
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]agent.Option{
		"below the minimum outage": {agent.WithTermination(agent.TerminationConsultLog, agent.MinLogFallback-time.Second)},
		"the old 15 s":             {agent.WithTermination(agent.TerminationConsultLog, 15*time.Second)},
		"textbook":                 {agent.WithTermination(agent.TerminationTextbook, time.Hour)},
	} {
		if _, err := agent.NewPG(dead, "east", w.East.Pool, opts...); !errors.Is(err, agent.ErrInvalidOption) ||
			!strings.Contains(err.Error(), "a log fallback applies to") && !strings.Contains(err.Error(), "below the minimum outage of 5m0s") {
			t.Errorf("NewPG with a log fallback %s = %v, want ErrInvalidOption saying why", name, err)
		}
	}
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	a, err := agent.NewPG(dead, "east", w.East.Pool, agent.WithTimeout(participantTimeout, 0),
		agent.WithTermination(agent.TerminationConsultLog, agent.MinLogFallback), agent.WithClock(clock))
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
		if res != (agent.PGPassResult{Found: 1, Waiting: 1}) {
			t.Fatalf("pass %+v as the log's outage begins, want the transaction waiting", res)
		}
		return true
	}, "the agent found nothing to do")
	for _, step := range []struct {
		advance time.Duration
		want    agent.PGPassResult
	}{
		{agent.MinLogFallback - time.Second, agent.PGPassResult{Found: 1, Waiting: 1}},
		{time.Second, agent.PGPassResult{Found: 1, Committed: 1, Fallbacks: 1}},
	} {
		advance(step.advance)
		if res, err := a.Pass(t.Context()); err != nil || res != step.want {
			t.Fatalf("pass after %v more = %+v, %v; want %+v", step.advance, res, err, step.want)
		}
	}
	if a := preparedtest.Balance(t, w.East.Pool, "alice"); a != preparedtest.StartBalance-40 {
		t.Fatalf("alice %d after the fallback commit", a)
	}
	if s := a.Stats(); s != (agent.PGStats{Committed: 1, Fallbacks: 1}) {
		t.Fatalf("Stats = %+v, want one commit by fallback", s)
	}
	if got := obstest.Value(t, reg, "txkit_3pc_pgagent_fallbacks_total", "database", "east"); got != 1 {
		t.Fatalf("txkit_3pc_pgagent_fallbacks_total{database=east} = %v, want 1", got)
	}
	// West's agent, with the log back, ends its half by the log (undecided → aborted): the two
	// halves disagree, which is what a fallback risks when the log is unreachable.
	west, err := agent.NewPG(c, "west", w.West.Pool, agent.WithTimeout(participantTimeout, 0))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := west.Pass(t.Context()); err != nil || res.RolledBack != 1 {
		t.Fatalf("west's pass with the log reachable = %+v, %v; want one rollback", res, err)
	}
	w.NoPrepared()
}
