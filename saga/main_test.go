package saga_test

import (
	"log/slog"
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

// party is the in-process participant of the tests ([coretest.Party]).
type party = coretest.Party

func newParty(answer func(participant.Request) error) *party { return coretest.NewParty(answer) }

func register(t *testing.T, c *saga.Coordinator, name string, p participant.Participant) participant.Participant {
	return coretest.Register(t, c, name, p)
}

func status(t *testing.T, c *saga.Coordinator, gid string) coordinator.Status {
	return coretest.Status(t, c, gid)
}
