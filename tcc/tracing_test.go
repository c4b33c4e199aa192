package tcc_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/tcc"
)

func TestIntegrationTracing(t *testing.T) {
	exp, tp := coretest.Tracing(t)
	e := newEnv(t)
	c := e.coordinator(coordinator.WithTelemetry(nil, tp))
	h := register(t, c, "p", newParty(func(req participant.Request) error {
		if req.Branch == "refusing" {
			return participant.ErrRefused
		}
		return nil
	}))

	ctx, root := tp.Tracer("test").Start(t.Context(), "order")
	g, err := c.Begin(ctx, coordinator.WithGID("traced-1"))
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	for _, b := range []string{"stock", "account"} {
		if err := g.Try(ctx, tcc.Branch{Name: b, Participant: h}); err != nil {
			t.Fatalf("Try %s: %v", b, err)
		}
	}
	if err := g.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	root.End()

	tid := root.SpanContext().TraceID()
	spans := exp.GetSpans()
	for name, n := range map[string]int{"tcc begin": 1, "tcc try": 2, "tcc confirm": 2} {
		got := coretest.Named(spans, name)
		if len(got) != n {
			t.Fatalf("%d spans %q, want %d: %v", len(got), name, n, spans)
		}
		for _, s := range got {
			if s.SpanContext.TraceID() != tid || coretest.Attr(s, "txkit.gid") != "traced-1" {
				t.Errorf("span %q: trace %s gid %q, want trace %s gid traced-1", name, s.SpanContext.TraceID(), coretest.Attr(s, "txkit.gid"), tid)
			}
			if op := strings.TrimPrefix(name, "tcc "); op != "begin" && (coretest.Attr(s, "txkit.op") != op || coretest.Attr(s, "txkit.branch") == "") {
				t.Errorf("span %q: op %q branch %q", name, coretest.Attr(s, "txkit.op"), coretest.Attr(s, "txkit.branch"))
			}
			if s.InstrumentationScope.Name != "github.com/txkit/txkit/tcc" {
				t.Errorf("span %q: scope %q", name, s.InstrumentationScope.Name)
			}
		}
	}

	// A refused try is recorded as the span's error.
	exp.Reset()
	g, err = c.Begin(t.Context(), coordinator.WithGID("traced-2"))
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if err := g.Try(t.Context(), tcc.Branch{Name: "refusing", Participant: h}); !errors.Is(err, participant.ErrRefused) {
		t.Fatalf("Try = %v, want ErrRefused", err)
	}
	tries := coretest.Named(exp.GetSpans(), "tcc try")
	if len(tries) != 1 || tries[0].Status.Code != codes.Error || len(tries[0].Events) == 0 {
		t.Fatalf("refused try spans %+v, want one with status Error and the error recorded", tries)
	}
}

// envTracedWorker makes the test binary a starter that begins a transaction under a root span,
// tries its branches, prints its spans and SIGKILLs itself (see tracedWorker): the value is
// "<log URL>|<log schema>|<gid>".
const envTracedWorker = "TXKIT_TCC_TRACED_STARTER"

// TestIntegrationTracingAcrossProcesses: the leader's drive of a transaction whose starter died
// continues the starter's trace.
func TestIntegrationTracingAcrossProcesses(t *testing.T) {
	exp, tp := coretest.Tracing(t)
	e := newEnv(t)
	const gid = "traced-killed"
	leader := e.coordinator(coordinator.WithTelemetry(nil, tp), coordinator.WithElector(e.Elector("leader")),
		coordinator.WithLease(200*time.Millisecond))
	party := newParty(nil)
	register(t, leader, "p", party)

	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envTracedWorker+"="+strings.Join([]string{e.Schema.URL, e.Schema.Name, gid}, "|"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the starter was not SIGKILLed: %v\n%s%s", err, out, stderr.String())
	}
	// The worker's lines: "<trace id> <span id> <parent span id> <name>", its root span first.
	var root, begin string
	var tries int
	var tree []treeSpan
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 4)
		if len(f) != 4 {
			continue
		}
		tree = append(tree, treeSpan{id: f[1], parent: f[2], name: f[3], where: "starter (SIGKILLed)"})
		switch {
		case f[3] == "order":
			root = f[0]
		case f[3] == "tcc begin" && f[0] == root:
			begin = f[1]
		case f[3] == "tcc try" && f[0] == root:
			tries++
		}
	}
	if root == "" || begin == "" || tries != 2 {
		t.Fatalf("worker's spans: root %q begin %q tries %d:\n%s", root, begin, tries, out)
	}

	run(t, leader)
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		return status(t, leader, gid) == tcc.StatusCancelled && len(coretest.Named(exp.GetSpans(), "recovery pass")) > 0
	}, "the leader did not cancel %s", gid)
	drive := coretest.LinkedDrive(t, exp, gid)
	if drive.SpanContext.TraceID().String() != root || drive.Parent.SpanID().String() != begin || !drive.Parent.IsRemote() {
		t.Fatalf("drive span trace %s parent %s, want the worker's trace %s and its begin span %s",
			drive.SpanContext.TraceID(), drive.Parent.SpanID(), root, begin)
	}
	if drive.Links[0].SpanContext.TraceID() == drive.SpanContext.TraceID() {
		t.Fatalf("the pass span is in the worker's trace")
	}
	var cancels int
	for _, s := range coretest.Named(exp.GetSpans(), "tcc cancel") {
		if s.Parent.SpanID() == drive.SpanContext.SpanID() {
			cancels++
			if s.SpanContext.TraceID().String() != root || coretest.Attr(s, "txkit.gid") != gid {
				t.Errorf("cancel span trace %s gid %q, want %s %s", s.SpanContext.TraceID(), coretest.Attr(s, "txkit.gid"), root, gid)
			}
		}
	}
	if cancels != 2 || party.count("cancel") != 2 {
		t.Fatalf("%d cancel spans under the drive, %d cancels, want 2", cancels, party.count("cancel"))
	}
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID().String() == root {
			where := "leader"
			if len(s.Links) > 0 {
				where += ", linked to its recovery pass " + s.Links[0].SpanContext.SpanID().String()
			}
			tree = append(tree, treeSpan{id: s.SpanContext.SpanID().String(), parent: s.Parent.SpanID().String(), name: s.Name, where: where})
		}
	}
	t.Logf("trace %s across both processes:\n%s", root, formatTree(tree))
}

// treeSpan is one span of a trace printed by formatTree.
type treeSpan struct{ id, parent, name, where string }

// formatTree draws spans as an indented tree, children in the order given, with where each ran.
func formatTree(spans []treeSpan) string {
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.id] = true
	}
	var b strings.Builder
	var draw func(parent string, depth int)
	draw = func(parent string, depth int) {
		for _, s := range spans {
			if s.parent == parent || (parent == "" && !ids[s.parent]) {
				fmt.Fprintf(&b, "%s%-*s %s  [%s]\n", strings.Repeat("  ", depth), 28-2*depth, s.name, s.id, s.where)
				draw(s.id, depth+1)
			}
		}
	}
	draw("", 0)
	return b.String()
}

// tracedWorker is the starter's process of TestIntegrationTracingAcrossProcesses (see
// tracedStarter); it returns an exit code when the starter failed before killing itself.
func tracedWorker() int {
	err := tracedStarter(os.Getenv(envTracedWorker))
	fmt.Fprintln(os.Stderr, "the starter failed:", err)
	return 2
}

// tracedStarter, given "<log URL>|<log schema>|<gid>", begins gid (timeout 1s) under a root span
// "order" and tries two branches, prints every span it ended and the root's ("<trace id> <span
// id> <parent span id> <name>" lines on stdout; the root's parent is "-"), then SIGKILLs its process.
func tracedStarter(arg string) error {
	url, rest, _ := strings.Cut(arg, "|")
	schema, gid, ok := strings.Cut(rest, "|")
	if !ok {
		return fmt.Errorf("bad %s %q", envTracedWorker, arg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	c, err := tcc.New(pool, coordinator.WithSchema(schema), coordinator.WithTelemetry(nil, tp),
		coordinator.WithDefaultTimeout(time.Second))
	if err != nil {
		return err
	}
	h, err := c.Register("p", newParty(nil))
	if err != nil {
		return err
	}
	ctx, root := tp.Tracer("worker").Start(ctx, "order")
	g, err := c.Begin(ctx, coordinator.WithGID(gid))
	if err != nil {
		return err
	}
	for _, b := range []string{"stock", "account"} {
		if err := g.Try(ctx, tcc.Branch{Name: b, Participant: h}); err != nil {
			return err
		}
	}
	fmt.Println(root.SpanContext().TraceID(), root.SpanContext().SpanID(), "-", "order")
	for _, s := range exp.GetSpans() {
		fmt.Println(s.SpanContext.TraceID(), s.SpanContext.SpanID(), s.Parent.SpanID(), s.Name)
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	time.Sleep(time.Minute)
	return errors.New("not killed")
}
