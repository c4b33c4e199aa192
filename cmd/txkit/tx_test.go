package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/workflow"
)

func TestTxUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no verb", []string{"tx"}, "no verb"},
		{"unknown verb", []string{"tx", "purge"}, `unknown verb "purge"`},
		{"show needs a gid", []string{"tx", "show"}, "give one gid"},
		{"resume needs a gid", []string{"tx", "resume"}, "give one gid"},
		{"show takes one gid, flags anywhere", []string{"tx", "show", "a", "-prefix", "txkit_", "b"}, "give one gid"},
		{"flags after the gid are parsed", []string{"tx", "show", "a", "-kind", "tcc"}, "flag provided but not defined: -kind"},
		{"after -- a flag is an argument", []string{"tx", "show", "a", "--", "-schema"}, "give one gid"},
		{"bad kind", []string{"tx", "list", "-kind", "xa"}, "-kind"},
		{"bad status", []string{"tx", "list", "-status", "sleeping"}, "-status"},
		{"bad limit", []string{"tx", "list", "-limit", "0"}, "-limit 0"},
		{"no url", []string{"tx", "list"}, "TXKIT_PG_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := txkit(t, nil, tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr, exitUsage, tc.want)
			}
		})
	}
}

func TestIntegrationTxListShow(t *testing.T) {
	s := testenv.PG(t)
	log, gid := newTxLog(t, s.Pool, core.KindTCC, []core.Branch{
		{Name: "stock", Target: core.Target{Kind: core.TargetHTTP, Ref: "http://127.0.0.1:1/stock"}},
		{Name: "pay", Target: core.Target{Kind: core.TargetInProc, Ref: "pay"}}}, core.WithSchema(s.Name))
	env := map[string]string{"TXKIT_PG_URL": s.URL}

	code, out, stderr := txkit(t, env, "tx", "list", "-schema", s.Name, "-unfinished")
	if code != exitOK || !strings.Contains(out, gid) || !strings.Contains(out, "trying") {
		t.Fatalf("tx list: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, stderr = txkit(t, env, "tx", "list", "-schema", s.Name, "-status", "confirmed")
	if code != exitOK || !strings.Contains(out, "no transactions") {
		t.Fatalf("tx list -status confirmed: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, stderr = txkit(t, env, "tx", "show", "-schema", s.Name, gid)
	if code != exitOK || !strings.Contains(out, "stock") || !strings.Contains(out, "http://127.0.0.1:1/stock") ||
		!strings.Contains(out, "inproc pay") {
		t.Fatalf("tx show: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	// The flags may follow the gid.
	code, after, stderr := txkit(t, env, "tx", "show", gid, "-schema", s.Name)
	if code != exitOK || after != out {
		t.Fatalf("tx show GID -schema S: exit %d, stdout %q, stderr %q; want %q", code, after, stderr, out)
	}
	t.Logf("tx show output:\n%s", out)
	// A refusal shows with the status and below the branches; a finished transaction has no next retry.
	if err := log.Refuse(t.Context(), gid, "stock", fmt.Errorf("stock: 3 of sku-1 not available: %w", participant.ErrRefused)); err != nil {
		t.Fatal(err)
	}
	if _, err := log.Decide(t.Context(), gid, core.StatusTrying, core.StatusCancelling); err != nil {
		t.Fatal(err)
	}
	if err := log.Record(t.Context(), lock.Token{}, core.Progress{GID: gid, From: core.StatusCancelling,
		Done: []string{"stock", "pay"}, Next: core.StatusCancelled}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = txkit(t, env, "tx", "show", gid, "-schema", s.Name)
	if code != exitOK || !strings.Contains(out, "cancelled (refused)") || !strings.Contains(out, "refused by stock: stock: 3 of sku-1 not available") ||
		strings.Contains(out, "next retry") {
		t.Fatalf("tx show of a refused transaction: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, _, stderr = txkit(t, env, "tx", "show", "-schema", s.Name, uuid.NewString())
	if code != exitFail || !strings.Contains(stderr, "not found") {
		t.Fatalf("tx show of an unknown gid: exit %d, stderr %q", code, stderr)
	}
}

// A three-phase commit's log (prefix txkit_3pc_) lists and shows like the others.
func TestIntegrationTxListThreePC(t *testing.T) {
	s := testenv.PG(t)
	_, gid := newTxLog(t, s.Pool, core.Kind3PC, []core.Branch{{Name: "east", Target: core.Target{Kind: core.TargetInProc, Ref: "pg:east"}}},
		core.WithSchema(s.Name), core.WithTablePrefix("txkit_3pc_"))
	env := map[string]string{"TXKIT_PG_URL": s.URL}
	code, out, stderr := txkit(t, env, "tx", "list", "-schema", s.Name, "-prefix", "txkit_3pc_", "-kind", "3pc")
	if code != exitOK || !strings.Contains(out, gid) || !strings.Contains(out, "3pc") {
		t.Fatalf("tx list -kind 3pc: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, stderr = txkit(t, env, "tx", "show", "-schema", s.Name, "-prefix", "txkit_3pc_", gid)
	if code != exitOK || !strings.Contains(out, "inproc pg:east") {
		t.Fatalf("tx show: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

// A workflow's log: tx list names it, tx show lists its steps with their results redacted (shown
// with -reveal) and says when it is stopped; tx resume runs a stopped one again, once.
func TestIntegrationTxWorkflow(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	s := testenv.PG(t)
	wf, err := workflow.New(s.Pool, coordinator.WithSchema(s.Name), coordinator.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := wf.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := workflow.Register(wf, "order", func(ctx workflow.Context, _ int) (string, error) {
		card, err := workflow.Step(ctx, "reserve", func(context.Context) (string, error) { return "card 4111111111111111", nil })
		if err != nil {
			return "", err
		}
		return workflow.Step(ctx, "charge", func(context.Context) (string, error) { return "charged " + card[:6], nil })
	}); err != nil {
		t.Fatal(err)
	}
	out, err := wf.Start(t.Context(), "order", 1)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TXKIT_PG_URL": s.URL, "TXKIT_ACTOR": "tester"}
	code, list, stderr := txkit(t, env, "tx", "list", "-schema", s.Name, "-kind", "workflow")
	if code != exitOK || !strings.Contains(list, out.GID) || !strings.Contains(list, "workflow order") || !strings.Contains(list, "succeeded") {
		t.Fatalf("tx list -kind workflow: exit %d, stdout %q, stderr %q", code, list, stderr)
	}
	code, show, stderr := txkit(t, env, "tx", "show", "-schema", s.Name, out.GID)
	if code != exitOK || !strings.Contains(show, "reserve") || !strings.Contains(show, "local step") ||
		!strings.Contains(show, "(23 bytes)") || strings.Contains(show, "4111") {
		t.Fatalf("tx show: exit %d, stdout %q, stderr %q", code, show, stderr)
	}
	code, show, stderr = txkit(t, env, "tx", "show", "-schema", s.Name, out.GID, "-reveal")
	if code != exitOK || !strings.Contains(show, `"card 4111111111111111"`) || !strings.Contains(show, `"charged card 4"`) {
		t.Fatalf("tx show -reveal: exit %d, stdout %q, stderr %q", code, show, stderr)
	}

	// A stopped workflow, parked as the engine parks one whose replay diverged.
	log, err := core.New(s.Pool, core.WithSchema(s.Name), core.WithTablePrefix("txkit_workflow_"))
	if err != nil {
		t.Fatal(err)
	}
	gid := uuid.NewString()
	if err := log.Create(t.Context(), gid, core.KindWorkflow, time.Hour, []byte(`{"name":"order","input":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := log.Park(t.Context(), lock.Token{}, gid, core.StatusRunning, core.StatusStopped, -1, "the replay asks for step x"); err != nil {
		t.Fatal(err)
	}
	code, show, stderr = txkit(t, env, "tx", "show", "-schema", s.Name, gid)
	if code != exitOK || !strings.Contains(show, "stopped (for an operator: txkit tx resume)") || strings.Contains(show, "next retry") {
		t.Fatalf("tx show of a stopped workflow: exit %d, stdout %q, stderr %q", code, show, stderr)
	}
	code, res, stderr := txkit(t, env, "tx", "resume", "-schema", s.Name, gid)
	if code != exitOK || !strings.Contains(res, "running again") {
		t.Fatalf("tx resume: exit %d, stdout %q, stderr %q", code, res, stderr)
	}
	if st := coretest.Get(t, log, gid).Status; st != core.StatusRunning {
		t.Fatalf("after tx resume: %s, want running", st)
	}
	code, _, stderr = txkit(t, env, "tx", "resume", "-schema", s.Name, gid)
	if code != exitFail || !strings.Contains(stderr, "not a stopped workflow") {
		t.Fatalf("tx resume again: exit %d, stderr %q", code, stderr)
	}
}

// newTxLog returns a migrated coordinator log on pool with opts and the gid of the one
// transaction of kind it creates there, with branches and a minute's timeout.
func newTxLog(t *testing.T, pool *pgxpool.Pool, kind core.Kind, branches []core.Branch, opts ...core.LogOption) (*core.Log, string) {
	t.Helper()
	log, err := core.New(pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	gid := uuid.NewString()
	if err := log.Create(t.Context(), gid, kind, time.Minute, nil, branches...); err != nil {
		t.Fatal(err)
	}
	return log, gid
}
