package tcc_test

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/tcc"
)

func TestMain(m *testing.M) {
	if os.Getenv(envTracedWorker) != "" {
		os.Exit(tracedWorker())
	}
	testenv.VerifyNoLeaks(m)
}

// env is one test's database schema and election path (see coretest.Env).
type env struct{ *coretest.Env }

func newEnv(t *testing.T) *env { return &env{coretest.NewEnv(t, "tcc-leader")} }

// coordinator returns a migrated Coordinator on the test's schema.
func (e *env) coordinator(opts ...coordinator.Option) *tcc.Coordinator {
	e.T.Helper()
	return coretest.New(e.T, tcc.New, e.Schema.Pool, e.Schema.Name, opts...)
}

// run runs c.Run until the test ends, then waits for it and reports its error.
func run(t *testing.T, c *tcc.Coordinator) { testenv.Run(t, c.Run) }

// party is an in-process participant that records the ops it is asked to do, and answers with
// what answer says (nil: success).
type party struct {
	mu     sync.Mutex
	calls  map[string]int // "op" and "op/branch" → count
	answer func(req participant.Request) error
}

func newParty(answer func(participant.Request) error) *party {
	return &party{calls: map[string]int{}, answer: answer}
}

func (p *party) Do(_ context.Context, req participant.Request) error {
	p.mu.Lock()
	p.calls[req.Op.String()]++
	p.calls[req.Op.String()+"/"+req.Branch]++
	answer := p.answer
	p.mu.Unlock()
	if answer != nil {
		return answer(req)
	}
	return nil
}

func (p *party) count(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[key]
}

func (p *party) setAnswer(f func(participant.Request) error) {
	p.mu.Lock()
	p.answer = f
	p.mu.Unlock()
}

func register(t *testing.T, c *tcc.Coordinator, name string, p participant.Participant) participant.Participant {
	return coretest.Register(t, c, name, p)
}

func status(t *testing.T, c *tcc.Coordinator, gid string) coordinator.Status {
	return coretest.Status(t, c, gid)
}
