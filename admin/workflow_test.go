package admin_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txkit/txkit/admin"
	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/workflow"
)

// hold is a local step's result: it carries a card number, which the API must not show unrevealed.
type hold struct {
	ID   string `json:"id"`
	Card string `json:"card"`
}

// wfWorld is the log of three workflows: one done (step results passed on), one sleeping, one
// stopped for an operator (a replay diverged), and the leader that resumes it once fixed.
type wfWorld struct {
	a                   *admin.Admin
	leader              *workflow.Coordinator
	fixed               *atomic.Bool
	done, nap, diverged string
}

func newWFWorld(t *testing.T) *wfWorld {
	t.Helper()
	e := coretest.NewEnv(t, "workflow-admin")
	starter := coretest.New(t, workflow.New, e.Schema.Pool, e.Schema.Name)
	w := &wfWorld{fixed: new(atomic.Bool)}

	if err := workflow.Register(starter, "order", func(ctx workflow.Context, n int) (string, error) {
		h, err := workflow.Step(ctx, "reserve", func(context.Context) (hold, error) { return hold{ID: "h-7", Card: "4111111111111111"}, nil })
		if err != nil {
			return "", err
		}
		return workflow.Step(ctx, "charge", func(context.Context) (string, error) { return "charged " + h.ID, nil })
	}); err != nil {
		t.Fatal(err)
	}
	out, err := starter.Start(t.Context(), "order", 3)
	if err != nil {
		t.Fatal(err)
	}
	w.done = out.GID

	// A workflow in a one-hour sleep: its starter is stopped once the sleep is recorded.
	if err := workflow.Register(starter, "nap", func(ctx workflow.Context, _ int) (int, error) {
		return 0, workflow.Sleep(ctx, time.Hour)
	}); err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(t.Context())
	started := make(chan error, 1)
	go func() { _, err := starter.Start(sctx, "nap", 0, coordinator.WithTimeout(2*time.Hour)); started <- err }()

	// The stopped one, as in workflow's own test: a call that keeps failing leaves it to the
	// leader, whose deployment names its first step otherwise.
	flaky := coretest.Register(t, starter, "flaky", participant.ParticipantFunc(func(context.Context, participant.Request) error {
		return errors.New("unavailable")
	}))
	if err := workflow.Register(starter, "nd", func(ctx workflow.Context, _ int) (int, error) {
		if _, err := workflow.Step(ctx, "first", func(context.Context) (int, error) { return 1, nil }); err != nil {
			return 0, err
		}
		return 0, workflow.Call(ctx, "second", flaky, nil)
	}); err != nil {
		t.Fatal(err)
	}
	if out, err = starter.Start(t.Context(), "nd", 1); !errors.Is(err, coordinator.ErrIncomplete) {
		t.Fatalf("Start(nd) = %v, want ErrIncomplete", err)
	}
	w.diverged = out.GID
	w.leader = coretest.New(t, workflow.New, e.Schema.Pool, e.Schema.Name, coordinator.WithElector(e.Elector("leader")))
	ok := coretest.Register(t, w.leader, "flaky", participant.ParticipantFunc(func(context.Context, participant.Request) error { return nil }))
	if err := workflow.Register(w.leader, "nd", func(ctx workflow.Context, _ int) (int, error) {
		first := "renamed"
		if w.fixed.Load() {
			first = "first" // the fix deployed: the code agrees with the log again
		}
		if _, err := workflow.Step(ctx, first, func(context.Context) (int, error) { return 1, nil }); err != nil {
			return 0, err
		}
		return 2, workflow.Call(ctx, "second", ok, nil)
	}); err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, w.leader.Run)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if o, err := w.leader.Wait(ctx, w.diverged); !errors.Is(err, workflow.ErrNondeterministic) {
		t.Fatalf("Wait(nd) = %+v, %v; want stopped", o, err)
	}

	var err2 error
	w.a, err2 = admin.New(e.Schema.Pool, admin.WithSchema(e.Schema.Name),
		admin.WithTokens(map[string]string{"oncall": oncallToken}, nil), admin.WithLogger(testenv.Logger(t)))
	if err2 != nil {
		t.Fatal(err2)
	}
	if err := w.a.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The nap: sleeping once its sleep is recorded; then its starter goes away (the leader would
	// resume it in an hour).
	for deadline := time.Now().Add(20 * time.Second); ; {
		p, err := w.a.Transactions(t.Context(), admin.TxFilter{Kind: "workflow", Unfinished: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, tx := range p.Items {
			if tx.Workflow == "nap" {
				got, err := w.a.Transaction(t.Context(), tx.GID)
				if err != nil {
					t.Fatal(err)
				}
				if !got.SleepingUntil.IsZero() {
					w.nap = tx.GID
				}
			}
		}
		if w.nap != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the nap's sleep was not recorded in 20 s")
		}
		time.Sleep(20 * time.Millisecond) // polling the log, not ordering events
	}
	stop()
	if err := <-started; !errors.Is(err, coordinator.ErrIncomplete) && !errors.Is(err, context.Canceled) {
		t.Fatalf("Start(nap) after its ctx ended = %v", err)
	}
	return w
}

// TestIntegrationAPIWorkflow: the API shows a workflow's name, steps with their (redacted) results
// and errors, a durable sleep's end and a stopped workflow, and resumes the stopped one.
func TestIntegrationAPIWorkflow(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	w := newWFWorld(t)
	c := serve(t, w.a).with(bearer...)

	var p admin.TxPage
	c.do("GET", "/api/transactions?kind=workflow").decode(t, &p)
	if len(p.Items) != 3 {
		t.Fatalf("kind=workflow: %d items, want 3: %+v", len(p.Items), p.Items)
	}
	for _, tx := range p.Items {
		if tx.Log != "workflow" || tx.Kind != "workflow" || tx.Workflow == "" {
			t.Fatalf("listed %+v: want log, kind workflow and its name", tx)
		}
	}

	var done admin.Transaction
	r := c.do("GET", "/api/transactions/"+w.done)
	c.want(r, 200, `"workflow":"order"`, `"status":"succeeded"`, `"target_kind":"local"`)
	if strings.Contains(string(r.body), "4111111111111111") || strings.Contains(string(r.body), "h-7") {
		t.Fatalf("a step's result shown unrevealed: %s", r.body)
	}
	r.decode(t, &done)
	var names []string
	for _, b := range done.Branches {
		names = append(names, b.Name+"/"+b.Target)
		if b.Payload == nil || b.Payload.Size == 0 || b.Payload.Value != nil {
			t.Fatalf("step %s: payload %+v, want redacted with its size", b.Name, b.Payload)
		}
	}
	if got := strings.Join(names, " "); got != "$result/result reserve/step charge/step" {
		t.Fatalf("steps %q", got)
	}
	rv := c.do("POST", "/api/transactions/"+w.done+"/reveal")
	c.want(rv, 200, `"json":{"id":"h-7","card":"4111111111111111"}`, `"json":"charged h-7"`)

	var nap admin.Transaction
	c.do("GET", "/api/transactions/"+w.nap).decode(t, &nap)
	if nap.Status != "running" || time.Until(nap.SleepingUntil) < 50*time.Minute || time.Until(nap.SleepingUntil) > time.Hour {
		t.Fatalf("nap: status %s, sleeping until %v; want running, an hour from now", nap.Status, nap.SleepingUntil)
	}

	resume := func(gid string) string { return "/api/transactions/" + gid + "/resume" }
	c.want(c.do("GET", "/api/transactions/"+w.diverged), 200, `"status":"stopped"`, "nondeterministic replay", `renamed`)
	if strings.Contains(string(c.do("GET", "/api/transactions/"+w.diverged).body), "next_retry_at") {
		t.Fatal("a stopped workflow shows a next retry")
	}
	unauth := client{t: t, url: c.url}
	unauth.want(unauth.do("POST", resume(w.diverged)), 401)
	c.want(c.do("POST", resume(w.done)), 409, "is a workflow succeeded, not a stopped workflow")
	c.want(c.do("POST", resume("no-such-gid")), 404)

	w.fixed.Store(true)
	c.want(c.do("POST", resume(w.diverged)), 200, `"result":"ok"`)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := w.leader.Wait(ctx, w.diverged)
	if err != nil || out.Status != workflow.StatusSucceeded {
		t.Fatalf("after resume: %+v, %v; want succeeded", out, err)
	}
	c.want(c.do("POST", resume(w.diverged)), 409, "not a stopped workflow")

	entries, err := w.a.Audit(t.Context(), 50)
	if err != nil {
		t.Fatal(err)
	}
	var resumed int
	for _, e := range entries {
		if e.Action == admin.ActionResume && e.Target == w.diverged && e.Result == admin.ResultOK && e.Actor == "oncall" {
			resumed++
		}
	}
	if resumed != 1 {
		t.Fatalf("audit: %d ok resumes of %s, want 1: %+v", resumed, w.diverged, entries)
	}
}
