package saga_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/saga"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

func testLogger(t testing.TB) *slog.Logger { return testenv.Logger(t) }

// env is one test's database schema and election path (see coretest.Env).
type env struct{ *coretest.Env }

func newEnv(t *testing.T) *env { return &env{coretest.NewEnv(t, "saga-leader")} }

// coordinator returns a migrated Coordinator on the test's schema.
func (e *env) coordinator(opts ...coordinator.Option) *saga.Coordinator {
	e.T.Helper()
	return e.coordinatorOn(e.Schema.Pool, opts...)
}

// coordinatorOn returns a migrated Coordinator on the test's schema, using pool.
func (e *env) coordinatorOn(pool *pgxpool.Pool, opts ...coordinator.Option) *saga.Coordinator {
	e.T.Helper()
	return coretest.New(e.T, saga.New, pool, e.Schema.Name, opts...)
}

// run runs c.Run until the test ends, then waits for it and reports its error.
func run(t *testing.T, c *saga.Coordinator) { testenv.Run(t, c.Run) }

// party is an in-process participant that records, in order, the ops it is asked to do
// ("action/step", "compensate/step"), and answers with what answer says (nil: success).
type party struct {
	mu     sync.Mutex
	calls  []string
	answer func(req participant.Request) error
}

func newParty(answer func(participant.Request) error) *party { return &party{answer: answer} }

func (p *party) Do(_ context.Context, req participant.Request) error {
	p.mu.Lock()
	p.calls = append(p.calls, req.Op.String()+"/"+req.Branch)
	answer := p.answer
	p.mu.Unlock()
	if answer != nil {
		return answer(req)
	}
	return nil
}

// log returns the calls so far, in order.
func (p *party) log() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// only returns the calls of op, in order.
func (p *party) only(op participant.Op) []string {
	var out []string
	for _, c := range p.log() {
		if len(c) > len(op.String()) && c[:len(op.String())+1] == op.String()+"/" {
			out = append(out, c[len(op.String())+1:])
		}
	}
	return out
}

func (p *party) count(call string) int {
	n := 0
	for _, c := range p.log() {
		if c == call {
			n++
		}
	}
	return n
}

func register(t *testing.T, c *saga.Coordinator, name string, p participant.Participant) participant.Participant {
	return coretest.Register(t, c, name, p)
}

func status(t *testing.T, c *saga.Coordinator, gid string) coordinator.Status {
	return coretest.Status(t, c, gid)
}
