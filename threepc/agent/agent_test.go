package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txkit/txkit/internal/obs/obstest"
	"github.com/txkit/txkit/internal/testkit/barriertest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/threepc/agent"
)

// Ops of three-phase commit, short.
const (
	canCommit = participant.OpCanCommit
	preCommit = participant.OpPreCommit
	doCommit  = participant.OpDoCommit
	abort     = participant.OpAbort
)

// Timeouts of the tests' agents: a branch is due at once, or never within a test.
const (
	dueAtOnce = time.Microsecond
	neverDue  = time.Hour
)

// The barrier fixture of the tests (barriertest.Fixture): a migrated barrier in the test's own
// schema, and business code that counts its invocations.
type fixture = barriertest.Fixture

var (
	newFixture  = barriertest.New
	testLogger  = barriertest.Logger
	post        = barriertest.Post
	testTimeout = barriertest.Timeout
	testSecret  = barriertest.Secret
)

// newAgent is an agent on f's barrier asking dec, with f.Record as its business code, migrated.
func newAgent(t *testing.T, f *fixture, dec agent.Decider, opts ...agent.Option) *agent.Agent {
	t.Helper()
	opts = append([]agent.Option{agent.WithLogger(testLogger(t))}, opts...)
	a, err := agent.New(f.Bar, dec, f.Record, opts...)
	if err != nil {
		t.Fatalf("agent.New: %v", err)
	}
	if err := a.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return a
}

// textbook is the option of an agent that commits alone, with timeout d.
func textbook(d time.Duration) []agent.Option {
	return []agent.Option{agent.WithTermination(agent.TerminationTextbook, 0), agent.WithTimeout(d, 0)}
}

// agentRow is a branch's row in the agent's table ("", "" when there is none).
func agentRow(f *fixture, gid, branch string) (state, decidedBy string) {
	f.T.Helper()
	err := f.Pool.QueryRow(context.Background(), `select state, coalesce(decided_by, '') from txkit_3pc_agent where gid = $1 and branch = $2`,
		gid, branch).Scan(&state, &decidedBy)
	if err != nil && !strings.Contains(err.Error(), "no rows") {
		f.T.Fatalf("agent row %s/%s: %v", gid, branch, err)
	}
	return state, decidedBy
}

func wantRow(f *fixture, gid, branch, state, decidedBy string) {
	f.T.Helper()
	if s, d := agentRow(f, gid, branch); s != state || d != decidedBy {
		f.T.Errorf("%s/%s: agent row (%q, %q), want (%q, %q)", gid, branch, s, d, state, decidedBy)
	}
}

func do(t *testing.T, p participant.Participant, gid, branch string, op participant.Op) error {
	t.Helper()
	return p.Do(t.Context(), participant.Request{GID: gid, Branch: branch, Op: op, Payload: []byte(`{"qty":1}`)})
}

func mustDo(t *testing.T, p participant.Participant, gid, branch string, op participant.Op) {
	t.Helper()
	if err := do(t, p, gid, branch, op); err != nil {
		t.Fatalf("%s %s/%s: %v", op, gid, branch, err)
	}
}

func TestIntegrationAgentPreCommitThenDoCommit(t *testing.T) {
	f := newFixture(t)
	a := newAgent(t, f, nil, textbook(neverDue)...)
	p := a.Participant()
	mustDo(t, p, "g1", "b", canCommit)
	mustDo(t, p, "g1", "b", canCommit) // a vote may be asked again: it runs again
	wantRow(f, "g1", "b", "", "")      // and records nothing
	mustDo(t, p, "g1", "b", preCommit)
	mustDo(t, p, "g1", "b", preCommit) // duplicates
	wantRow(f, "g1", "b", "precommitted", "")
	mustDo(t, p, "g1", "b", doCommit)
	mustDo(t, p, "g1", "b", doCommit)
	f.Expect("g1", "b", canCommit, 2, 2)
	f.Expect("g1", "b", preCommit, 1, 1)
	f.Expect("g1", "b", doCommit, 1, 1)
	wantRow(f, "g1", "b", "committed", "coordinator")

	mustDo(t, p, "g2", "b", preCommit)
	mustDo(t, p, "g2", "b", abort)
	mustDo(t, p, "g2", "b", abort)
	f.Expect("g2", "b", abort, 1, 1)
	wantRow(f, "g2", "b", "aborted", "coordinator")

	pass, err := a.Pass(t.Context())
	if err != nil || pass != (agent.PassResult{}) {
		t.Fatalf("Pass = %+v, %v; want nothing found: no branch is pre-committed past its timeout", pass, err)
	}
	if err := do(t, p, "g1", "b", participant.OpTry); !errors.Is(err, participant.ErrBadRequest) {
		t.Fatalf("try through an agent = %v; want an error wrapping ErrBadRequest", err)
	}
}

func TestIntegrationAgentEmptyRollbackRefusesLatePreCommit(t *testing.T) {
	f := newFixture(t)
	a := newAgent(t, f, nil, textbook(dueAtOnce)...)
	p := a.Participant()
	mustDo(t, p, "g1", "b", abort) // before its precommit: the empty rollback
	err := do(t, p, "g1", "b", preCommit)
	if !errors.Is(err, barrier.ErrHanging) || !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("precommit after its abort = %v; want an error wrapping ErrHanging", err)
	}
	f.Expect("g1", "b", abort, 0, 0)
	f.Expect("g1", "b", preCommit, 0, 0)
	wantRow(f, "g1", "b", "", "")
	if pass, err := a.Pass(t.Context()); err != nil || pass.Found != 0 {
		t.Fatalf("Pass = %+v, %v; want nothing to end", pass, err)
	}
}

func TestIntegrationAgentDoCommitOfUnknownBranch(t *testing.T) {
	f := newFixture(t)
	a := newAgent(t, f, nil, textbook(neverDue)...)
	err := do(t, a.Participant(), "g1", "b", doCommit)
	if !errors.Is(err, agent.ErrUnknownTransaction) || !errors.Is(err, participant.ErrBadRequest) {
		t.Fatalf("docommit of a branch never pre-committed = %v; want ErrUnknownTransaction", err)
	}
	if !strings.Contains(err.Error(), "docommit for gid g1 branch b that was never pre-committed here") {
		t.Fatalf("error %q does not say what happened", err)
	}
	f.Expect("g1", "b", doCommit, 0, 0)
	// Nothing was kept: the barrier's marker rolled back with the refusal, so a precommit is
	// still possible (the coordinator's messages were reordered).
	mustDo(t, a.Participant(), "g1", "b", preCommit)
	mustDo(t, a.Participant(), "g1", "b", doCommit)
	f.Expect("g1", "b", doCommit, 1, 1)
}

func TestIntegrationAgentTextbookTimeoutCommits(t *testing.T) {
	f := newFixture(t)
	a := newAgent(t, f, nil, textbook(dueAtOnce)...)
	p := a.Participant()
	mustDo(t, p, "g1", "b", preCommit)
	pass, err := a.Pass(t.Context())
	if err != nil || pass.Found != 1 || pass.Committed != 1 {
		t.Fatalf("Pass = %+v, %v; want the branch found and committed", pass, err)
	}
	f.Expect("g1", "b", doCommit, 1, 1)
	wantRow(f, "g1", "b", "committed", "timeout")

	// The coordinator comes back: its docommit is a duplicate, its abort contradicts the agent.
	mustDo(t, p, "g1", "b", doCommit)
	f.Expect("g1", "b", doCommit, 1, 1)
	err = do(t, p, "g1", "b", abort)
	if !errors.Is(err, agent.ErrHeuristic) || !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("abort after the timeout's commit = %v; want an error wrapping ErrHeuristic", err)
	}
	f.Expect("g1", "b", abort, 0, 0) // refused before the business code
	wantRow(f, "g1", "b", "committed", "timeout")
	if got, want := a.Stats(), (agent.Stats{Committed: 1, Heuristic: 1}); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
	if pass, err := a.Pass(t.Context()); err != nil || pass.Found != 0 {
		t.Fatalf("second Pass = %+v, %v; want nothing left", pass, err)
	}
}

func TestIntegrationAgentConsultLog(t *testing.T) {
	f := newFixture(t)
	var asked sync.Map
	decider := agent.DeciderFunc(func(ctx context.Context, gid string) (threepc.Outcome, error) {
		asked.Store(gid, true)
		switch gid {
		case "g-commit":
			return threepc.OutcomeCommit, nil
		case "g-abort":
			return threepc.OutcomeAbort, nil
		}
		return 0, errors.New("decision log: connection refused")
	})
	a := newAgent(t, f, decider, agent.WithTimeout(dueAtOnce, 0)) // consult-log: the default
	p := a.Participant()
	for _, gid := range []string{"g-commit", "g-abort", "g-unreachable"} {
		mustDo(t, p, gid, "b", preCommit)
	}
	pass, err := a.Pass(t.Context())
	if want := (agent.PassResult{Found: 3, Committed: 1, Aborted: 1, Waiting: 1}); err != nil || pass != want {
		t.Fatalf("Pass = %+v, %v; want %+v", pass, err, want)
	}
	for _, gid := range []string{"g-commit", "g-abort", "g-unreachable"} {
		if _, ok := asked.Load(gid); !ok {
			t.Errorf("the decider was not asked about %s", gid)
		}
	}
	f.Expect("g-commit", "b", doCommit, 1, 1)
	wantRow(f, "g-commit", "b", "committed", "timeout")
	f.Expect("g-abort", "b", abort, 1, 1)
	f.Expect("g-abort", "b", doCommit, 0, 0)
	wantRow(f, "g-abort", "b", "aborted", "timeout")
	f.Expect("g-unreachable", "b", doCommit, 0, 0) // no commit without the log: it waits
	wantRow(f, "g-unreachable", "b", "precommitted", "")
	// It is asked about again at the next pass, and waits again.
	asked.Delete("g-unreachable")
	if pass, err := a.Pass(t.Context()); err != nil || pass != (agent.PassResult{Found: 1, Waiting: 1}) {
		t.Fatalf("second Pass = %+v, %v; want the branch found again and waiting", pass, err)
	}
	if _, ok := asked.Load("g-unreachable"); !ok {
		t.Error("the decider was not asked again about g-unreachable")
	}
	f.Expect("g-unreachable", "b", doCommit, 0, 0)
	if got, want := a.Stats(), (agent.Stats{Committed: 1, Aborted: 1}); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
	// A coordinator that commits what its log says is aborted contradicts the agent.
	if err := do(t, p, "g-abort", "b", doCommit); !errors.Is(err, agent.ErrHeuristic) {
		t.Fatalf("docommit after the log's abort = %v; want ErrHeuristic", err)
	}
	mustDo(t, p, "g-abort", "b", abort) // the coordinator's abort: a duplicate
	f.Expect("g-abort", "b", abort, 1, 1)
}

// A coordinator that ends a branch while the agent is deciding it wins; the agent then does nothing.
func TestIntegrationAgentCoordinatorEndsBranchWhileDeciding(t *testing.T) {
	f := newFixture(t)
	var p participant.Participant
	decider := agent.DeciderFunc(func(ctx context.Context, gid string) (threepc.Outcome, error) {
		// The coordinator's op arrives while the agent asks the log.
		op := map[string]participant.Op{"g-same": doCommit, "g-other": abort}[gid]
		if err := p.Do(ctx, participant.Request{GID: gid, Branch: "b", Op: op}); err != nil {
			return 0, err
		}
		return threepc.OutcomeCommit, nil
	})
	a := newAgent(t, f, decider, agent.WithTimeout(dueAtOnce, 0))
	p = a.Participant()
	mustDo(t, p, "g-same", "b", preCommit)
	mustDo(t, p, "g-other", "b", preCommit)
	pass, err := a.Pass(t.Context())
	if want := (agent.PassResult{Found: 2, Settled: 2}); err != nil || pass != want {
		t.Fatalf("Pass = %+v, %v; want %+v", pass, err, want)
	}
	f.Expect("g-same", "b", doCommit, 1, 1)
	wantRow(f, "g-same", "b", "committed", "coordinator")
	f.Expect("g-other", "b", abort, 1, 1)
	f.Expect("g-other", "b", doCommit, 0, 0) // the agent's docommit found the abort and rolled back
	wantRow(f, "g-other", "b", "aborted", "coordinator")
	if got := a.Stats(); got != (agent.Stats{}) {
		t.Fatalf("Stats = %+v; want nothing counted", got)
	}
}

func TestIntegrationAgentsShareTheTable(t *testing.T) {
	f := newFixture(t)
	var decisions atomic.Int64
	decider := agent.DeciderFunc(func(ctx context.Context, gid string) (threepc.Outcome, error) {
		decisions.Add(1)
		return threepc.OutcomeCommit, nil
	})
	opts := []agent.Option{agent.WithTimeout(dueAtOnce, 0), agent.WithBatch(7)}
	agents := []*agent.Agent{newAgent(t, f, decider, opts...), newAgent(t, f, decider, opts...)}
	const n = 60
	for i := range n {
		mustDo(t, agents[i%2].Participant(), fmt.Sprintf("g%d", i), "b", preCommit)
	}
	passes := make([]agent.PassResult, len(agents))
	errs := make([]error, len(agents))
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Go(func() { passes[i], errs[i] = a.Pass(t.Context()) })
	}
	wg.Wait()
	found, committed := 0, 0
	for i := range agents {
		if errs[i] != nil {
			t.Fatalf("agent %d: Pass: %v", i, errs[i])
		}
		found += passes[i].Found
		committed += passes[i].Committed
	}
	if found != n || committed != n || decisions.Load() != n {
		t.Fatalf("agents found %d and committed %d branches, asked the log %d times (passes %+v); want %d each", found, committed,
			decisions.Load(), passes, n)
	}
	for i := range n {
		f.Expect(fmt.Sprintf("g%d", i), "b", doCommit, 1, 1)
	}
}

func TestIntegrationAgentRunEndsTimedOutBranches(t *testing.T) {
	f := newFixture(t)
	a := newAgent(t, f, nil, agent.WithTermination(agent.TerminationTextbook, 0), agent.WithTimeout(50*time.Millisecond, 10*time.Millisecond))
	testenv.Run(t, a.Run)
	mustDo(t, a.Participant(), "g1", "b", preCommit)
	testenv.Eventually(t, testTimeout, 10*time.Millisecond, func() bool {
		s, _ := agentRow(f, "g1", "b")
		return s == "committed"
	}, "the branch was not committed by its timeout")
	f.Expect("g1", "b", doCommit, 1, 1)
	wantRow(f, "g1", "b", "committed", "timeout")
}

// Rows of ended branches are deleted once older than the barrier's retention.
func TestIntegrationAgentPurgesEndedBranches(t *testing.T) {
	f := newFixture(t, barrier.WithRetention(time.Millisecond, "@every 1m"))
	a := newAgent(t, f, nil, textbook(neverDue)...)
	mustDo(t, a.Participant(), "g1", "b", preCommit)
	mustDo(t, a.Participant(), "g1", "b", doCommit)
	mustDo(t, a.Participant(), "g2", "b", preCommit) // pre-committed: kept
	testenv.Eventually(t, testTimeout, 10*time.Millisecond, func() bool {
		pass, err := a.Pass(t.Context())
		if err != nil {
			t.Fatalf("Pass: %v", err)
		}
		return pass.Purged == 1
	}, "the ended branch's row was not purged")
	wantRow(f, "g1", "b", "", "")
	wantRow(f, "g2", "b", "precommitted", "")
}

func TestIntegrationAgentHandler(t *testing.T) {
	f := newFixture(t, barrier.WithSecrets(testSecret))
	a := newAgent(t, f, nil, textbook(neverDue)...)
	mux := http.NewServeMux()
	mux.Handle("POST /stock/3pc", a.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	url := srv.URL + "/stock/3pc"
	for _, tc := range []struct {
		name     string
		body     string
		want     int
		wantBody string
	}{
		{"cancommit", `{"gid":"g1","branch":"b","op":"cancommit"}`, 200, `{"ok":true}`},
		{"precommit", `{"gid":"g1","branch":"b","op":"precommit"}`, 200, `{"ok":true}`},
		{"docommit", `{"gid":"g1","branch":"b","op":"docommit"}`, 200, `{"ok":true}`},
		{"docommit again", `{"gid":"g1","branch":"b","op":"docommit","nonce":"2"}`, 200, `{"ok":true}`},
		{"unknown branch", `{"gid":"g2","branch":"b","op":"docommit"}`, 400, "docommit for gid g2 branch b that was never pre-committed here"},
		{"empty rollback", `{"gid":"g3","branch":"b","op":"abort"}`, 200, `{"ok":true}`},
		{"hanging precommit", `{"gid":"g3","branch":"b","op":"precommit"}`, 409, "hanging"},
		{"try", `{"gid":"g4","branch":"b","op":"try"}`, 400, "not served here"},
		{"prepare", `{"gid":"g4","branch":"b","op":"prepare"}`, 400, "not served here"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, body := post(t, url, http.MethodPost, tc.body); code != tc.want || !strings.Contains(body, tc.wantBody) {
				t.Fatalf("%s → %d %q; want %d with %q", tc.body, code, body, tc.want, tc.wantBody)
			}
		})
	}
	f.Expect("g1", "b", doCommit, 1, 1)
	f.Expect("g4", "b", participant.OpTry, 0, 0)

	// Unsigned requests are refused; the signing client of a coordinator is served.
	if err := (participant.HTTP{URL: url}).Do(t.Context(), participant.Request{GID: "g5", Branch: "b", Op: canCommit}); err == nil ||
		!strings.Contains(err.Error(), "HTTP 401") {
		t.Fatalf("unsigned cancommit = %v; want HTTP 401", err)
	}
	client, err := participant.NewSigningClient(testSecret, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	h := participant.HTTP{URL: url, Client: client}
	mustDo(t, h, "g5", "b", preCommit)
	mustDo(t, h, "g5", "b", doCommit)
	f.Expect("g5", "b", doCommit, 1, 1)

	// Ops given to Handler narrow the 3PC ops; they cannot add others.
	narrow := httptest.NewServer(a.Handler(canCommit, participant.OpTry))
	t.Cleanup(narrow.Close)
	for body, want := range map[string]int{
		`{"gid":"g6","branch":"b","op":"cancommit"}`: 200,
		`{"gid":"g6","branch":"b","op":"precommit"}`: 400,
		`{"gid":"g6","branch":"b","op":"try"}`:       400,
	} {
		if code, msg := post(t, narrow.URL, http.MethodPost, body); code != want {
			t.Errorf("%s → %d %q; want %d", body, code, msg, want)
		}
	}
}

func TestNewAgentOptions(t *testing.T) {
	bar, err := barrier.New(&pgxpool.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	fn := (&barriertest.Fixture{}).Record
	decider := agent.DeciderFunc(func(context.Context, string) (threepc.Outcome, error) { return threepc.OutcomeAbort, nil })
	for _, tc := range []struct {
		name    string
		bar     *barrier.Barrier
		dec     agent.Decider
		noFn    bool
		opts    []agent.Option
		wantErr string // a substring; "" for success
	}{
		{name: "consult-log", bar: bar, dec: decider},
		{name: "textbook", bar: bar, opts: textbook(time.Second)},
		{name: "all set", bar: bar, dec: decider, opts: []agent.Option{agent.WithTimeout(time.Minute, time.Second),
			agent.WithBatch(5), agent.TableForTest("agent"), agent.WithLogger(nil)}},
		{name: "nil barrier", wantErr: "nil barrier"},
		{name: "nil function", bar: bar, noFn: true, opts: textbook(time.Second), wantErr: "nil function"},
		{name: "consult-log without decider", bar: bar, wantErr: "needs a decision log (a Decider)"},
		{name: "nil decider func", bar: bar, dec: agent.DeciderFunc(nil), wantErr: "needs a decision log (a Decider)"},
		{name: "unknown mode", bar: bar, dec: decider, opts: []agent.Option{agent.WithTermination(9, 0)}, wantErr: "unknown termination mode"},
		{name: "log fallback at the minimum", bar: bar, dec: decider, opts: []agent.Option{agent.WithTermination(agent.TerminationConsultLog, agent.MinLogFallback)}},
		{name: "log fallback below the minimum", bar: bar, dec: decider, opts: []agent.Option{agent.WithTermination(agent.TerminationConsultLog, agent.MinLogFallback-time.Second)},
			wantErr: "log fallback after 4m59s: below the minimum outage of 5m0s"},
		{name: "log fallback of 15s", bar: bar, dec: decider, opts: []agent.Option{agent.WithTermination(agent.TerminationConsultLog, 15*time.Second)},
			wantErr: "below the minimum outage"},
		{name: "log fallback in textbook mode", bar: bar, opts: []agent.Option{agent.WithTermination(agent.TerminationTextbook, time.Hour), agent.WithTimeout(time.Second, 0)},
			wantErr: "a log fallback applies to termination mode consult-log only"},
		{name: "zero timeout", bar: bar, opts: textbook(0), wantErr: "timeout 0s"},
		{name: "negative timeout", bar: bar, opts: textbook(-time.Second), wantErr: "timeout -1s"},
		{name: "negative poll", bar: bar, opts: []agent.Option{agent.WithTermination(agent.TerminationTextbook, 0), agent.WithTimeout(time.Second, -time.Second)}, wantErr: "poll interval"},
		{name: "zero batch", bar: bar, opts: append(textbook(time.Second), agent.WithBatch(0)), wantErr: "batch 0"},
		{name: "empty table", bar: bar, opts: append(textbook(time.Second), agent.TableForTest("")), wantErr: "agent table"},
		{name: "long table", bar: bar, opts: append(textbook(time.Second), agent.TableForTest(strings.Repeat("t", 60))),
			wantErr: "agent table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fn
			if tc.noFn {
				f = nil
			}
			a, err := agent.New(tc.bar, tc.dec, f, tc.opts...)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("agent.New: %v", err)
				}
				return
			}
			if !errors.Is(err, agent.ErrInvalidOption) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("agent.New = %v, %v; want an error wrapping ErrInvalidOption with %q", a, err, tc.wantErr)
			}
		})
	}
}

func TestParseTermination(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want agent.Termination
	}{
		{"textbook", agent.TerminationTextbook},
		{"consult-log", agent.TerminationConsultLog},
		{"", 0},
		{"Textbook", 0},
		{"consult", 0},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := agent.ParseTermination(tc.in)
			if tc.want == 0 {
				if !errors.Is(err, agent.ErrInvalidOption) {
					t.Fatalf("ParseTermination(%q) = %v, %v; want an error wrapping ErrInvalidOption", tc.in, got, err)
				}
				return
			}
			if err != nil || got != tc.want || got.String() != tc.in {
				t.Fatalf("ParseTermination(%q) = %v, %v", tc.in, got, err)
			}
		})
	}
	if s := threepc.OutcomeCommit.String() + " " + threepc.OutcomeAbort.String() + " " + threepc.Outcome(0).String(); s != "commit abort outcome(0)" {
		t.Fatalf("Outcome strings: %q", s)
	}
}

// An agent on a barrier with a schema of its own keeps its table there, created by Migrate.
func TestIntegrationAgentInBarrierSchema(t *testing.T) {
	schema := "t_" + strings.ReplaceAll(testenv.Name(t), "-", "_") + "_3pc"
	f := newFixture(t, barrier.WithTable(schema, ""))
	t.Cleanup(func() {
		if _, err := f.Pool.Exec(context.WithoutCancel(t.Context()), `drop schema if exists `+schema+` cascade`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	a := newAgent(t, f, nil, append(textbook(dueAtOnce), agent.TableForTest("pay_agent"))...)
	mustDo(t, a.Participant(), "g1", "b", preCommit)
	if pass, err := a.Pass(t.Context()); err != nil || pass.Committed != 1 {
		t.Fatalf("Pass = %+v, %v; want one branch committed", pass, err)
	}
	var state string
	if err := f.Pool.QueryRow(t.Context(), `select state from `+schema+`.pay_agent where gid = 'g1'`).Scan(&state); err != nil || state != "committed" {
		t.Fatalf("%s.pay_agent: state %q, %v; want committed", schema, state, err)
	}
}

// The explicit fallback: an agent built with a WithTermination fallback commits a branch by the textbook rule
// once the decision log has been unreachable that long — not before. Meanwhile the wait is the
// gauge txkit_3pc_agent_log_wait_seconds, and the fallback is counted in Stats and in
// txkit_3pc_agent_fallbacks_total. (The agent's clock is the test's: MinLogFallback passes at once.)
func TestIntegrationAgentLogFallback(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFixture(t, barrier.WithTelemetry(reg, nil))
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	down := agent.DeciderFunc(func(context.Context, string) (threepc.Outcome, error) {
		return 0, errors.New("decision log: connection refused")
	})
	a := newAgent(t, f, down, agent.WithTimeout(dueAtOnce, 0),
		agent.WithTermination(agent.TerminationConsultLog, agent.MinLogFallback), agent.WithClock(clock))
	mustDo(t, a.Participant(), "g1", "b", preCommit)
	// gaugeOf is the value of the agent's series of name, which must be exported.
	gaugeOf := func(t *testing.T, reg *prometheus.Registry, name string) float64 {
		t.Helper()
		if _, ok := obstest.Series(t, reg, name, "table", "txkit_3pc_agent"); !ok {
			t.Fatalf("no series %s{table=\"txkit_3pc_agent\"}", name)
		}
		return obstest.Value(t, reg, name, "table", "txkit_3pc_agent")
	}
	for _, step := range []struct {
		advance time.Duration
		want    agent.PassResult
		wait    float64
	}{
		{0, agent.PassResult{Found: 1, Waiting: 1}, 0},
		{agent.MinLogFallback - time.Second, agent.PassResult{Found: 1, Waiting: 1}, (agent.MinLogFallback - time.Second).Seconds()},
		{time.Second, agent.PassResult{Found: 1, Committed: 1, Fallbacks: 1}, 0},
	} {
		advance(step.advance)
		pass, err := a.Pass(t.Context())
		if err != nil || pass != step.want {
			t.Fatalf("Pass after %v more = %+v, %v; want %+v", step.advance, pass, err, step.want)
		}
		if got := gaugeOf(t, reg, "txkit_3pc_agent_log_wait_seconds"); got != step.wait {
			t.Fatalf("txkit_3pc_agent_log_wait_seconds = %v after %+v, want %v", got, pass, step.wait)
		}
	}
	f.Expect("g1", "b", doCommit, 1, 1)
	wantRow(f, "g1", "b", "committed", "timeout")
	if got, want := a.Stats(), (agent.Stats{Committed: 1, Fallbacks: 1}); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
	if got := gaugeOf(t, reg, "txkit_3pc_agent_fallbacks_total"); got != 1 {
		t.Fatalf("txkit_3pc_agent_fallbacks_total = %v, want 1", got)
	}
}
