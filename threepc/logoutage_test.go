package threepc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/obs/obstest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/threepc/agent"
)

// The agents' path to the decision log is cut (a proxy refusing every connection) after a
// transfer and the wallet's payment pre-committed, with the starter stuck before DoCommit: the
// agents, in the default mode (consult-log), find the log unreachable at every pass once their
// timeout is past, and commit nothing — they wait, and say so in their wait gauges — for several
// seconds, past the point where the old fallback committed (its first failed question: a refused
// connection fails at once; the 15 s bound was only for a question that hangs). When the log is
// reachable again they end every branch as the log says: an abort recorded by the first agent for
// a starter stuck before its decision, a commit for one stuck after it.
func TestIntegrationAgentsWaitForTheLog(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stuck  core.Phase
		commit bool
	}{
		{"undecided: aborted by the log", core.PhasePreCommitted, false},
		{"decided: committed by the log", core.PhaseDecided, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t)
			cfg := w.Log.Pool.Config().ConnConfig
			proxy := testenv.NewRawProxy(t, cfg.Host+":"+itoa(cfg.Port))
			stuck := make(chan struct{})
			t.Cleanup(func() { close(stuck) })
			secret, client := signing(t)
			starter := w.coordinator(coordinator.WithHTTPClient(client), core.WithPhaseHook(func(ctx context.Context, _ string, p core.Phase) error {
				if p == tc.stuck {
					select {
					case <-stuck:
					case <-ctx.Done():
					}
				}
				return nil
			}))
			// The agents' decider reaches the log through the proxy; its registerer gets the PG agents'
			// metrics, the wallet's barrier registerer the wallet agent's.
			pgReg, walletReg := prometheus.NewRegistry(), prometheus.NewRegistry()
			decider := w.coordinatorOn(w.poolVia(proxy.Addr()), coordinator.WithHTTPClient(client), coordinator.WithTelemetry(pgReg, nil))
			wl := w.wallet(decider, agent.TerminationConsultLog, secret, client, barrier.WithTelemetry(walletReg, nil))
			agents := w.agents(decider)
			proxy.Down()

			g, _ := starter.Begin(ctx)
			if err := wl.pay(g, 25); err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- g.Commit(cctx) }()
			testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
				_, f := wl.balances(t)
				return f == 25 && len(w.Prepared(ctx)) == 2
			}, "the branches did not pre-commit")

			// Past the agents' timeout (2 s), every pass asks the log and fails. Hold the outage until
			// each agent has waited 3 s on it.
			waits := func() (east, west, wallet float64) {
				return gathered(t, pgReg, "txkit_3pc_pgagent_log_wait_seconds", "database", "east"),
					gathered(t, pgReg, "txkit_3pc_pgagent_log_wait_seconds", "database", "west"),
					gathered(t, walletReg, "txkit_3pc_agent_log_wait_seconds", "table", "txkit_3pc_agent")
			}
			// nothingEnded fails the test at once if any branch was ended while the log is unreachable.
			nothingEnded := func() {
				t.Helper()
				if n := len(w.Prepared(ctx)); n != 2 {
					t.Fatalf("%d prepared transactions left while the log was unreachable, want both still prepared", n)
				}
				w.WantBalances(startBalance, startBalance)
				if b, f := wl.balances(t); b != 100 || f != 25 {
					t.Fatalf("wallet balance %d frozen %d while the log was unreachable, want 100 and 25 (still pre-committed)", b, f)
				}
				for _, a := range agents {
					if s := a.Stats(); s != (agent.PGStats{}) {
						t.Fatalf("agent.PG %+v while the log was unreachable, want nothing done", s)
					}
				}
				if s := wl.agent.Stats(); s != (agent.Stats{}) {
					t.Fatalf("wallet agent %+v while the log was unreachable, want nothing done", s)
				}
			}
			testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() bool {
				nothingEnded()
				e, o, wa := waits()
				return e >= 3 && o >= 3 && wa >= 3
			}, "the agents' wait gauges did not reach 3 s")
			nothingEnded()

			proxy.Up()
			testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() bool {
				_, f := wl.balances(t)
				return f == 0 && len(w.Prepared(ctx)) == 0
			}, "the agents did not end the branches once the log was back")
			if tc.commit {
				w.WantBalances(startBalance-25, startBalance+25)
				if b, _ := wl.balances(t); b != 75 {
					t.Fatalf("wallet balance %d, want 75 (committed by the log's decision)", b)
				}
			} else {
				w.WantBalances(startBalance, startBalance)
				if b, _ := wl.balances(t); b != 100 {
					t.Fatalf("wallet balance %d, want 100 (rolled back by the log's abort)", b)
				}
			}
			var fallbacks int64
			for _, a := range agents {
				fallbacks += a.Stats().Fallbacks
			}
			if s := wl.agent.Stats(); fallbacks != 0 || s.Fallbacks != 0 {
				t.Fatalf("fallbacks: PG agents %d, wallet %d; want none", fallbacks, s.Fallbacks)
			}
			if e, o, wa := waits(); e != 0 || o != 0 || wa != 0 {
				t.Fatalf("wait gauges east %v west %v wallet %v once nothing waits, want 0", e, o, wa)
			}
			cancel()
			err := <-done
			if !tc.commit && !errors.Is(err, threepc.ErrAborted) {
				t.Fatalf("the starter's Commit = %v, want ErrAborted", err)
			}
			w.NoPrepared()
		})
	}
}

// gathered is the value of the series of the gauge or counter name in reg labelled label=value,
// which must be exported.
func gathered(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	if _, ok := obstest.Series(t, reg, name, label, value); !ok {
		t.Fatalf("no series %s{%s=%q}", name, label, value)
	}
	return obstest.Value(t, reg, name, label, value)
}
