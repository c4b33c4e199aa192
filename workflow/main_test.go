package workflow_test

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/workflow"
)

func TestMain(m *testing.M) {
	if arg := os.Getenv(envStarter); arg != "" {
		if err := starter(arg); err != nil {
			fmt.Fprintln(os.Stderr, "the starter failed:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	testenv.VerifyNoLeaksWithExamples(m)
}

// env is one test's database schema and election path (see coretest.Env).
type env struct{ *coretest.Env }

func newEnv(t *testing.T) *env { return &env{coretest.NewEnv(t, "workflow-leader")} }

// coordinator returns a migrated Coordinator on the test's schema.
func (e *env) coordinator(opts ...coordinator.Option) *workflow.Coordinator {
	e.T.Helper()
	return coretest.New(e.T, workflow.New, e.Schema.Pool, e.Schema.Name, opts...)
}

// leader returns a migrated Coordinator that leads the test's election (Run until the test ends).
func (e *env) leader(opts ...coordinator.Option) *workflow.Coordinator {
	e.T.Helper()
	c := e.coordinator(append([]coordinator.Option{coordinator.WithElector(e.Elector("leader"))}, opts...)...)
	return c
}

// party is the in-process participant of the tests ([coretest.Party]).
type party = coretest.Party

// journal records, in order, what local steps and compensations ran.
type journal struct {
	mu  sync.Mutex
	log []string
}

func (j *journal) add(s string) {
	j.mu.Lock()
	j.log = append(j.log, s)
	j.mu.Unlock()
}

func (j *journal) get() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.log)
}

// logOf returns a reader of the test's workflow log (the tables c writes).
func (e *env) logOf(t *testing.T, _ *workflow.Coordinator) *core.Log {
	t.Helper()
	l, err := core.New(e.Schema.Pool, core.WithSchema(e.Schema.Name), core.WithTablePrefix("txkit_workflow_"))
	if err != nil {
		t.Fatal(err)
	}
	return l
}
