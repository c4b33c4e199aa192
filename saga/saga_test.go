package saga_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/barrier"
	"github.com/txkit/txkit/saga"
)

var errDown = errors.New("participant down")

// submit builds a saga of the given steps on c and submits it.
func submit(t *testing.T, c *saga.Coordinator, steps []saga.Step, opts ...coordinator.BeginOption) (string, error) {
	t.Helper()
	s, err := c.Begin(t.Context(), opts...)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	for _, st := range steps {
		if err := s.Add(st); err != nil {
			t.Fatalf("Add(%s): %v", st.Name, err)
		}
	}
	return s.GID(), s.Submit(t.Context())
}

// sequential returns steps s1..sn on p, each after the one before.
func sequential(p participant.Participant, n int) []saga.Step {
	steps := make([]saga.Step, n)
	for i := range steps {
		steps[i] = saga.Step{Name: fmt.Sprint("s", i+1), Participant: p, Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i+1))}
	}
	return steps
}

// branches returns the steps' statuses as the log holds them.
func branches(t *testing.T, e *env, gid string) map[string]core.BranchStatus {
	t.Helper()
	l, err := core.New(e.Schema.Pool, core.WithSchema(e.Schema.Name), core.WithTablePrefix("txkit_saga_"))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := l.Get(t.Context(), gid)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]core.BranchStatus{}
	for _, b := range tx.Branches {
		out[b.Name] = b.Status
	}
	return out
}

func TestIntegrationSucceeded(t *testing.T) {
	e := newEnv(t)
	c := e.coordinator()
	p := newParty(nil)
	h := register(t, c, "p", p)
	s, err := c.Begin(t.Context(), coordinator.WithGID("order-1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sequential(h, 4) {
		if err := s.Add(st); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Submit(t.Context()); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if got, want := p.Log(), []string{"action/s1", "action/s2", "action/s3", "action/s4"}; !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	if st := status(t, c, "order-1"); st != saga.StatusSucceeded {
		t.Fatalf("status %s", st)
	}
	for name, st := range branches(t, e, "order-1") {
		if st != core.BranchSucceeded {
			t.Fatalf("step %s is %s", name, st)
		}
	}
	if err := s.Submit(t.Context()); !errors.Is(err, coordinator.ErrInvalidState) {
		t.Fatalf("second Submit = %v, want ErrInvalidState", err)
	}
	if err := s.Add(saga.Step{Name: "late", Participant: h}); !errors.Is(err, coordinator.ErrInvalidState) {
		t.Fatalf("Add after Submit = %v, want ErrInvalidState", err)
	}
	if len(p.Log()) != 4 {
		t.Fatalf("calls after a second Submit: %v", p.Log())
	}
}

// Step 3 of 4 is refused: steps 3, 2, 1 are compensated in that order; step 4 never runs and
// stays pending.
func TestIntegrationRefusedCompensatesInReverse(t *testing.T) {
	e := newEnv(t)
	c := e.coordinator()
	p := newParty(func(req participant.Request) error {
		if req.Op == participant.OpAction && req.Branch == "s3" {
			return fmt.Errorf("out of stock: %w", participant.ErrRefused)
		}
		return nil
	})
	h := register(t, c, "p", p)
	gid, err := submit(t, c, sequential(h, 4))
	var se *coordinator.BranchError
	if !errors.Is(err, participant.ErrRefused) || !errors.As(err, &se) || se.Branch != "s3" || se.Op != participant.OpAction || se.GID != gid {
		t.Fatalf("Submit = %v, want a StepError of s3 wrapping participant.ErrRefused", err)
	}
	if errors.Is(err, coordinator.ErrIncomplete) {
		t.Fatalf("Submit = %v: compensated, not incomplete", err)
	}
	want := []string{"action/s1", "action/s2", "action/s3", "compensate/s3", "compensate/s2", "compensate/s1"}
	if got := p.Log(); !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	if st := status(t, c, gid); st != saga.StatusCompensated {
		t.Fatalf("status %s", st)
	}
	got := branches(t, e, gid)
	if got["s1"] != core.BranchCompensated || got["s3"] != core.BranchCompensated || got["s4"] != core.BranchPending {
		t.Fatalf("steps %v", got)
	}
}

// a → (b, c) → d with c refused: b and c are compensated before a; d never runs.
func TestIntegrationDependenciesCompensation(t *testing.T) {
	e := newEnv(t)
	c := e.coordinator(coordinator.WithConcurrency(4))
	bDone := make(chan struct{})
	p := newParty(func(req participant.Request) error {
		switch {
		case req.Op == participant.OpAction && req.Branch == "b":
			close(bDone)
		case req.Op == participant.OpAction && req.Branch == "c":
			<-bDone // refuse once b has succeeded, so b needs compensating too
			return participant.ErrRefused
		}
		return nil
	})
	h := register(t, c, "p", p)
	gid, err := submit(t, c, []saga.Step{
		{Name: "a", Participant: h},
		{Name: "b", Participant: h, DependsOn: []string{"a"}},
		{Name: "c", Participant: h, DependsOn: []string{"a"}},
		{Name: "d", Participant: h, DependsOn: []string{"b", "c"}},
	})
	if !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Submit = %v, want a refusal", err)
	}
	comp := p.Only(participant.OpCompensate)
	if len(comp) != 3 || comp[2] != "a" || !slices.Contains(comp, "b") || !slices.Contains(comp, "c") {
		t.Fatalf("compensations %v, want b and c, then a", comp)
	}
	if p.Count("action/d") != 0 || status(t, c, gid) != saga.StatusCompensated {
		t.Fatalf("calls %v", p.Log())
	}
}

// At most WithConcurrency actions run at once.
func TestIntegrationConcurrencyLimit(t *testing.T) {
	e := newEnv(t)
	const limit, steps = 2, 8
	c := e.coordinator(coordinator.WithConcurrency(limit))
	var (
		mu             sync.Mutex
		inflight, peak int
		release        = make(chan struct{})
	)
	h := register(t, c, "p", participant.ParticipantFunc(func(ctx context.Context, req participant.Request) error {
		mu.Lock()
		inflight++
		peak = max(peak, inflight)
		mu.Unlock()
		select { // hold the call until the test has seen the limit reached
		case <-release:
		case <-ctx.Done():
		}
		mu.Lock()
		inflight--
		mu.Unlock()
		return nil
	}))
	s, err := c.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i := range steps {
		if err := s.Add(saga.Step{Name: fmt.Sprint("b", i), Participant: h, DependsOn: []string{}}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- s.Submit(t.Context()) }()
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return inflight == limit
	}, "%d actions in flight", limit)
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if peak != limit {
		t.Fatalf("peak concurrency %d, want %d", peak, limit)
	}
	if st := status(t, c, s.GID()); st != saga.StatusSucceeded {
		t.Fatalf("status %s", st)
	}
}

// A transient failure is retried by Submit; one that outlasts Submit's attempts is left to the
// leader, which retries it with backoff until it succeeds.
func TestIntegrationTransientFailureRetried(t *testing.T) {
	e := newEnv(t)
	c := e.coordinator(saga.WithAttempts(3), coordinator.WithLease(100*time.Millisecond))
	var mu sync.Mutex
	failures := map[string]int{"s2": 2}
	p := newParty(func(req participant.Request) error {
		mu.Lock()
		defer mu.Unlock()
		if req.Op == participant.OpAction && failures[req.GID+"/"+req.Branch]+failures[req.Branch] > 0 {
			if failures[req.Branch] > 0 {
				failures[req.Branch]--
			} else {
				failures[req.GID+"/"+req.Branch]--
			}
			return errDown
		}
		return nil
	})
	h := register(t, c, "p", p)
	gid, err := submit(t, c, sequential(h, 3))
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if n := p.Count("action/s2"); n != 3 || status(t, c, gid) != saga.StatusSucceeded || p.Count("compensate/s1") != 0 {
		t.Fatalf("calls %v", p.Log())
	}
	if st := c.Stats(); st.Failures != 2 {
		t.Fatalf("stats %+v", st)
	}

	// Five failures: Submit gives up after three, the leader calls until the sixth succeeds.
	s, err := c.Begin(t.Context(), coordinator.WithGID("stubborn"))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	failures["stubborn/s2"] = 5
	mu.Unlock()
	for _, st := range sequential(h, 3) {
		if err := s.Add(st); err != nil {
			t.Fatal(err)
		}
	}
	err = s.Submit(t.Context())
	if !errors.Is(err, coordinator.ErrIncomplete) || !errors.Is(err, errDown) || errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Submit = %v, want ErrIncomplete wrapping the failure", err)
	}
	if st := status(t, c, "stubborn"); st != saga.StatusRunning {
		t.Fatalf("status %s, want running", st)
	}
	leader := e.coordinator(coordinator.WithElector(e.Elector("leader")))
	register(t, leader, "p", p)
	run(t, leader)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		return status(t, leader, "stubborn") == saga.StatusSucceeded
	}, "the leader finishes the saga")
	log := p.Log()
	if n := countIn(log, "action/s2"); n != 3+6 || countIn(log, "action/s1") != 2 || countIn(log, "action/s3") != 2 {
		t.Fatalf("calls %v", log)
	}
}

func countIn(log []string, call string) int {
	n := 0
	for _, c := range log {
		if c == call {
			n++
		}
	}
	return n
}

// The starter vanishes mid-saga — its database pool closes in the middle of a call, so nothing
// more is recorded — and the leader, another coordinator, finishes from the log: forward for a
// saga that was running, compensations (in reverse) for one that was compensating.
func TestIntegrationStarterVanished(t *testing.T) {
	e := newEnv(t)
	// The starter of each saga is a coordinator on a pool of its own, which "crashes" by closing it.
	starter := func(answer func(pool *pgxpool.Pool, req participant.Request) error) (*saga.Coordinator, participant.Participant) {
		pool, err := pgxpool.New(t.Context(), e.Schema.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		c := e.coordinatorOn(pool, coordinator.WithLease(200*time.Millisecond), saga.WithAttempts(1))
		return c, register(t, c, "p", participant.ParticipantFunc(func(_ context.Context, req participant.Request) error {
			return answer(pool, req)
		}))
	}

	// Running: s1 and s2 succeed, the starter dies during s3's action.
	c1, h1 := starter(func(pool *pgxpool.Pool, req participant.Request) error {
		if req.Branch == "s3" {
			pool.Close()
			return errDown
		}
		return nil
	})
	forward, err := submit(t, c1, sequential(h1, 4))
	if err == nil {
		t.Fatal("Submit succeeded without a database")
	}
	// Compensating: s3 refused, the starter dies during s3's compensation.
	c2, h2 := starter(func(pool *pgxpool.Pool, req participant.Request) error {
		switch {
		case req.Op == participant.OpAction && req.Branch == "s3":
			return participant.ErrRefused
		case req.Op == participant.OpCompensate:
			pool.Close()
			return errDown
		}
		return nil
	})
	backward, err := submit(t, c2, sequential(h2, 4))
	if !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Submit = %v, want the refusal", err)
	}

	leader := e.coordinator(coordinator.WithElector(e.Elector("leader")))
	if st := status(t, leader, forward); st != saga.StatusRunning {
		t.Fatalf("forward saga is %s", st)
	}
	if st := status(t, leader, backward); st != saga.StatusCompensating {
		t.Fatalf("backward saga is %s", st)
	}
	p := newParty(func(req participant.Request) error {
		if req.GID == backward && req.Op == participant.OpAction {
			return errors.New("the leader must not run actions of a compensating saga")
		}
		return nil
	})
	register(t, leader, "p", p)
	run(t, leader)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		return status(t, leader, forward) == saga.StatusSucceeded && status(t, leader, backward) == saga.StatusCompensated
	}, "the leader finishes both sagas")
	var fw, bw []string
	for _, call := range p.Log() {
		if strings.HasPrefix(call, "action/") {
			fw = append(fw, call)
		} else {
			bw = append(bw, call)
		}
	}
	// The forward saga starts again at s1: step successes are recorded only when the saga moves
	// on, so the leader re-sends s1 and s2 (participants are idempotent) and goes on.
	if !slices.Equal(fw, []string{"action/s1", "action/s2", "action/s3", "action/s4"}) {
		t.Fatalf("forward calls %v", fw)
	}
	// The backward saga's move to compensating recorded s1 and s2; the recovering leader cannot
	// tell whether s4 ran, so it compensates it too (an empty compensation), then s3, s2, s1.
	if !slices.Equal(bw, []string{"compensate/s4", "compensate/s3", "compensate/s2", "compensate/s1"}) {
		t.Fatalf("compensations %v, want s4, s3, s2, s1", bw)
	}
	if b := branches(t, e, backward); b["s4"] != core.BranchCompensated || b["s1"] != core.BranchCompensated {
		t.Fatalf("steps %v", b)
	}
}

// A saga still running at its timeout is compensated: by its starter, or by the leader when the
// starter is gone (the leader compares the timeout with PostgreSQL's clock).
func TestIntegrationTimeout(t *testing.T) {
	e := newEnv(t)
	hang := func(ctx context.Context, req participant.Request) error {
		if req.Op == participant.OpAction && req.Branch == "s2" {
			<-ctx.Done() // the action may or may not have happened
			return ctx.Err()
		}
		return nil
	}
	c := e.coordinator()
	p := newParty(nil)
	h := register(t, c, "p", participant.ParticipantFunc(func(ctx context.Context, req participant.Request) error {
		_ = p.Do(ctx, req)
		return hang(ctx, req)
	}))
	gid, err := submit(t, c, sequential(h, 3), coordinator.WithTimeout(300*time.Millisecond))
	if !errors.Is(err, coordinator.ErrTimeout) || errors.Is(err, coordinator.ErrIncomplete) {
		t.Fatalf("Submit = %v, want ErrTimeout", err)
	}
	if got, want := p.Log(), []string{"action/s1", "action/s2", "compensate/s2", "compensate/s1"}; !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	if st := status(t, c, gid); st != saga.StatusCompensated {
		t.Fatalf("status %s", st)
	}

	// The starter dies in s2 (its pool closes); the leader resumes s2 within the timeout, which
	// passes while s2 hangs: the leader compensates.
	pool, err := pgxpool.New(t.Context(), e.Schema.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	dying := e.coordinatorOn(pool, coordinator.WithLease(100*time.Millisecond), saga.WithAttempts(1))
	hd := register(t, dying, "p", participant.ParticipantFunc(func(ctx context.Context, req participant.Request) error {
		if req.Branch == "s2" {
			pool.Close()
			return errDown
		}
		return nil
	}))
	gid, err = submit(t, dying, sequential(hd, 3), coordinator.WithTimeout(time.Second))
	if err == nil {
		t.Fatal("Submit succeeded without a database")
	}
	leader := e.coordinator(coordinator.WithElector(e.Elector("leader")))
	lp := newParty(nil)
	register(t, leader, "p", participant.ParticipantFunc(func(ctx context.Context, req participant.Request) error {
		_ = lp.Do(ctx, req)
		return hang(ctx, req)
	}))
	run(t, leader)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		return status(t, leader, gid) == saga.StatusCompensated
	}, "the leader compensates the timed-out saga")
	log := lp.Log()
	// No action after the timeout; every step that may have run is compensated in reverse: s3
	// too, since the leader cannot tell that the dead starter never reached it (an empty
	// compensation).
	if countIn(log, "action/s3") != 0 || !slices.Equal(lp.Only(participant.OpCompensate), []string{"s3", "s2", "s1"}) {
		t.Fatalf("leader's calls %v", log)
	}
}

// HTTP participants: 409 on an action compensates, 500 is retried (by Submit, then by the
// leader, which finds the participant by its stored URL).
func TestIntegrationHTTP(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	calls := map[string][]string{} // gid → ops in order
	fail := map[string]int{}       // gid → 500s left
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req participant.Request
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		calls[req.GID] = append(calls[req.GID], req.Op.String()+"/"+req.Branch)
		switch {
		case req.Op == participant.OpAction && string(req.Payload) == `{"n":1000}`:
			http.Error(w, "insufficient stock", participant.StatusRefused)
		case req.Op == participant.OpAction && fail[req.GID] > 0:
			fail[req.GID]--
			http.Error(w, "database down", http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	t.Cleanup(srv.Close)
	log := func(gid string) []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(calls[gid])
	}
	hp := participant.HTTP{URL: srv.URL}
	c := e.coordinator(saga.WithAttempts(2), coordinator.WithLease(100*time.Millisecond))

	refused, err := submit(t, c, []saga.Step{
		{Name: "stock", Participant: hp, Payload: json.RawMessage(`{"n":1}`)},
		{Name: "more", Participant: &hp, Payload: json.RawMessage(`{"n":1000}`)},
	})
	if !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Submit answered 409 = %v, want participant.ErrRefused", err)
	}
	if got, want := log(refused), []string{"action/stock", "action/more", "compensate/more", "compensate/stock"}; !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}

	s, err := c.Begin(t.Context(), coordinator.WithGID("flaky"))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	fail["flaky"] = 3 // Submit tries twice; the leader once per drive
	mu.Unlock()
	if err := s.Add(saga.Step{Name: "stock", Participant: hp}); err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(t.Context()); !errors.Is(err, coordinator.ErrIncomplete) {
		t.Fatalf("Submit answered 500 = %v, want ErrIncomplete", err)
	}
	leader := e.coordinator(coordinator.WithElector(e.Elector("leader")), coordinator.WithHTTPClient(srv.Client()))
	run(t, leader)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		return status(t, leader, "flaky") == saga.StatusSucceeded
	}, "the leader retries after the 500s")
	if got := log("flaky"); !slices.Equal(got, []string{"action/stock", "action/stock", "action/stock", "action/stock"}) {
		t.Fatalf("calls %v, want 4 actions (three 500s, then a 200)", got)
	}
}

// A step refused over HTTP by a participant's barrier: one URL serves the step, switching on
// req.Op; the error says each thing once (the saga the step, participant.HTTP the op, gid, branch
// and URL, the participant its refusal), and the refused step's own compensate is called — an
// empty rollback, which the barrier answers without calling the business code.
func TestIntegrationHTTPRefusedStepText(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	const secret = "saga-test-secret-0123456789abcdef"
	bar, err := barrier.New(e.Schema.Pool, barrier.WithTable(e.Schema.Name, ""), barrier.WithLogger(testLogger(t)),
		barrier.WithSecrets(secret))
	if err != nil {
		t.Fatal(err)
	}
	if err := bar.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sent, ran []string // the ops the coordinator sent, and those the business code ran
	h := bar.Handler(func(ctx context.Context, tx pgx.Tx, req participant.Request) error {
		mu.Lock()
		ran = append(ran, req.Op.String()+"/"+req.Branch)
		mu.Unlock()
		switch req.Op {
		case participant.OpAction:
			return participant.ErrRefused // no funds
		case participant.OpCompensate:
			return nil
		}
		return fmt.Errorf("op %s: %w", req.Op, participant.ErrBadRequest)
	}, barrier.WithAllowedOps(participant.OpAction, participant.OpCompensate))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req participant.Request
		_ = json.Unmarshal(body, &req)
		mu.Lock()
		sent = append(sent, req.Op.String()+"/"+req.Branch)
		mu.Unlock()
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	client, err := participant.NewSigningClient(secret, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	c := e.coordinator(coordinator.WithHTTPClient(client))
	url := srv.URL + "/pay"
	gid, err := submit(t, c, []saga.Step{{Name: "pay", Participant: participant.HTTP{URL: url, Client: client}}})
	want := "saga: step pay: participant: action " + gid + "/pay at " + url + ": participant: refused"
	if err == nil || err.Error() != want || !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Submit = %v,\nwant %s", err, want)
	}
	var be *coordinator.BranchError
	if !errors.As(err, &be) || be.GID != gid || be.Branch != "pay" || be.Op != participant.OpAction {
		t.Fatalf("Submit = %#v, want a *coordinator.BranchError of action pay of %s", be, gid)
	}
	if st := status(t, c, gid); st != saga.StatusCompensated {
		t.Fatalf("status %s, want compensated", st)
	}
	mu.Lock()
	defer mu.Unlock()
	// The compensate of pay reached the barrier, which found no action done: an empty rollback,
	// without calling the business code.
	if !slices.Equal(sent, []string{"action/pay", "compensate/pay"}) || !slices.Equal(ran, []string{"action/pay"}) {
		t.Fatalf("sent %v, business code ran %v; want action and compensate sent, only the action run", sent, ran)
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
	if _, err := c.Begin(ctx, coordinator.WithTimeout(-time.Second)); !errors.Is(err, coordinator.ErrInvalidOption) {
		t.Fatalf("Begin with a negative timeout = %v", err)
	}
	empty, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := empty.Submit(ctx); !errors.Is(err, coordinator.ErrInvalidBranch) {
		t.Fatalf("Submit without steps = %v, want ErrInvalidStep", err)
	}
	tests := []struct {
		name string
		st   saga.Step
	}{
		{"empty name", saga.Step{Participant: h}},
		{"duplicate name", saga.Step{Name: "a", Participant: h}},
		{"unknown DependsOn", saga.Step{Name: "b", Participant: h, DependsOn: []string{"nope"}}},
		{"depends on itself", saga.Step{Name: "b", Participant: h, DependsOn: []string{"b"}}},
		{"unregistered participant", saga.Step{Name: "b", Participant: newParty(nil)}},
		{"nil participant", saga.Step{Name: "b"}},
		{"HTTP without URL", saga.Step{Name: "b", Participant: participant.HTTP{}}},
		{"payload not JSON", saga.Step{Name: "b", Participant: h, Payload: json.RawMessage(`{`)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := c.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Add(saga.Step{Name: "a", Participant: h}); err != nil {
				t.Fatal(err)
			}
			if err := s.Add(tc.st); !errors.Is(err, coordinator.ErrInvalidBranch) {
				t.Fatalf("Add = %v, want ErrInvalidStep", err)
			}
			if err := s.Submit(ctx); !errors.Is(err, coordinator.ErrInvalidBranch) {
				t.Fatalf("Submit after a refused Add = %v, want ErrInvalidStep", err)
			}
			if _, err := c.Status(ctx, s.GID()); !errors.Is(err, coordinator.ErrNotFound) {
				t.Fatalf("a refused saga was recorded: %v", err)
			}
		})
	}
	if _, err := submit(t, c, []saga.Step{{Name: "a", Participant: h}}, coordinator.WithGID("dup")); err != nil {
		t.Fatal(err)
	}
	if _, err := submit(t, c, []saga.Step{{Name: "a", Participant: h}}, coordinator.WithGID("dup")); !errors.Is(err, coordinator.ErrInvalidState) {
		t.Fatalf("Submit with a used gid = %v, want ErrInvalidState", err)
	}
	for _, bad := range []coordinator.Option{coordinator.WithConcurrency(0), saga.WithAttempts(0), coordinator.WithRetry(0, time.Second, 5*time.Minute),
		coordinator.WithDefaultTimeout(0), coordinator.WithLogger(nil), coordinator.WithLease(0), coordinator.WithRetry(10*time.Second, time.Second, 0)} {
		if _, err := saga.New(e.Schema.Pool, bad); !errors.Is(err, coordinator.ErrInvalidOption) {
			t.Fatalf("New with a bad option = %v, want ErrInvalidOption", err)
		}
	}
}

// A sequential saga of N steps that succeeds commits N+1 writing transactions; N independent
// steps 2; a compensated one 2 more than its forward part (docs/coordinators.md justifies each): counted by
// statement triggers on the two tables.
func TestIntegrationWritesPerSaga(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	c := e.coordinator()
	_, err := e.Schema.Pool.Exec(ctx, `
create table writes (gid text, xid xid8);
create function count_write() returns trigger language plpgsql as $$
begin insert into writes select null, pg_current_xact_id(); return null; end $$;
create trigger w after insert or update or delete on txkit_saga_global for each statement execute function count_write();
create trigger w after insert or update or delete on txkit_saga_branch for each statement execute function count_write();`)
	if err != nil {
		t.Fatal(err)
	}
	h := register(t, c, "p", newParty(func(req participant.Request) error {
		if req.Op == participant.OpAction && string(req.Payload) == `"no"` {
			return participant.ErrRefused
		}
		return nil
	}))
	count := func() int {
		if err := c.Flush(ctx); err != nil { // the deferred finish: with nothing to ride on, alone
			t.Fatal(err)
		}
		var n int
		if err := e.Schema.Pool.QueryRow(ctx, `select count(distinct xid) from writes`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		_, _ = e.Schema.Pool.Exec(ctx, `delete from writes`)
		return n
	}
	const n = 3
	if _, err := submit(t, c, sequential(h, n)); err != nil {
		t.Fatal(err)
	}
	// Create, and the finish with every step's success.
	if w := count(); w != 2 {
		t.Fatalf("sequential: %d writing transactions, want 2", w)
	}
	parallel := sequential(h, n)
	for i := range parallel {
		parallel[i].DependsOn = []string{}
	}
	if _, err := submit(t, c, parallel); err != nil {
		t.Fatal(err)
	}
	if w := count(); w != 2 {
		t.Fatalf("parallel: %d writing transactions, want 2", w)
	}
	refused := sequential(h, n)
	refused[n-1].Payload = json.RawMessage(`"no"`)
	if _, err := submit(t, c, refused); !errors.Is(err, participant.ErrRefused) {
		t.Fatal(err)
	}
	// Create, compensating (with the successes of s1 and s2), compensated.
	if w := count(); w != 3 {
		t.Fatalf("compensated: %d writing transactions, want 3", w)
	}
}

// One client's sagas of 3 steps commit twice each in the log, with the default options: the saga
// with its steps, and its success — the saga's decision, written before Submit returns (a leader
// finding the saga running past its timeout would compensate it). A compensated saga commits
// twice too: the record, and the decision to compensate with the successes; its finish rides on
// the next saga's record (deferred finish; 3 before it rode).
func TestIntegrationCommitsPerSaga(t *testing.T) {
	e := newEnv(t)
	cc := coretest.NewCommitCounter(t)
	c := coretest.New(t, saga.New, cc.Pool(e.Schema.URL), e.Schema.Name)
	h := register(t, c, "p", newParty(func(req participant.Request) error {
		if req.Op == participant.OpAction && string(req.Payload) == `"no"` {
			return participant.ErrRefused
		}
		return nil
	}))
	const n = 20
	for _, tc := range []struct {
		name    string
		refused bool
	}{{"succeeded", false}, {"compensated", true}} {
		per := cc.PerTransaction(c, n, func(ctx context.Context) error {
			s, err := c.Begin(ctx)
			if err != nil {
				return err
			}
			steps := sequential(h, 3)
			if tc.refused {
				steps[2].Payload = json.RawMessage(`"no"`)
			}
			for _, st := range steps {
				if err := s.Add(st); err != nil {
					return err
				}
			}
			err = s.Submit(ctx)
			if tc.refused && errors.Is(err, participant.ErrRefused) {
				return nil
			}
			return err
		})
		t.Logf("%s: %.2f log commits per saga", tc.name, per)
		if max := 2 + 2.0/n; per > max { // 1/n: the last finish, alone; 1/n: slack for a loaded machine
			t.Fatalf("%s: %.2f log commits per saga, want at most %.2f", tc.name, per, max)
		}
	}
}
