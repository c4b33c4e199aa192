package twopc_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/prepared/preparedtest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/twopc"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// bank is one test's world (preparedtest.Bank: the log schema, east and west).
type bank struct{ *preparedtest.Bank }

const startBalance = preparedtest.StartBalance

func newBank(t *testing.T) *bank { return &bank{preparedtest.NewBank(t)} }

var update, balance = preparedtest.Update, preparedtest.Balance

// coordinator returns a migrated Coordinator on the log schema with east and west registered,
// closed when the test ends.
func (b *bank) coordinator(opts ...coordinator.Option) *twopc.Coordinator {
	b.T.Helper()
	return b.coordinatorOn(map[string]*pgxpool.Pool{"east": b.East.Pool, "west": b.West.Pool}, opts...)
}

// coordinatorOn is coordinator with the databases registered on pools (name → pool).
func (b *bank) coordinatorOn(pools map[string]*pgxpool.Pool, opts ...coordinator.Option) *twopc.Coordinator {
	b.T.Helper()
	opts = coretest.Options(b.T, b.Log.Name, append([]coordinator.Option{twopc.WithInDoubtResolution("@every 200ms", 0)}, opts...)...)
	c, err := twopc.New(b.Log.Pool, opts...)
	if err != nil {
		b.T.Fatalf("twopc.New: %v", err)
	}
	b.T.Cleanup(func() { _ = c.Close() })
	coretest.FlushAtCleanup(b.T, c)
	if err := c.Migrate(b.T.Context()); err != nil {
		b.T.Fatalf("Migrate: %v", err)
	}
	for name, pool := range pools {
		if err := c.RegisterDB(name, pool); err != nil {
			b.T.Fatalf("RegisterDB(%s): %v", name, err)
		}
	}
	return c
}

// pool returns a pool of at most maxConns connections on s, closed when the test ends; config,
// when not nil, changes its configuration first.
func (b *bank) pool(s *testenv.Schema, maxConns int32, config func(*pgxpool.Config)) *pgxpool.Pool {
	b.T.Helper()
	cfg, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		b.T.Fatal(err)
	}
	cfg.MaxConns = maxConns
	if config != nil {
		config(cfg)
	}
	p, err := pgxpool.NewWithConfig(b.T.Context(), cfg)
	if err != nil {
		b.T.Fatal(err)
	}
	b.T.Cleanup(p.Close)
	return p
}

// elector returns a candidate in the test's election, on a session of its own.
func (b *bank) elector(id string) lock.Elector { return zkenv.Elector(b.T, b.Path, id) }

// run runs c.Run until the test ends, then waits for it and reports its error.
func run(t *testing.T, c *twopc.Coordinator) { testenv.Run(t, c.Run) }

// move enlists, in g, n taken from alice in east and given to bob in west.
func (b *bank) move(ctx context.Context, g *twopc.Global, n int) error {
	if err := g.Enlist(ctx, "east", update("alice", -n)); err != nil {
		return err
	}
	return g.Enlist(ctx, "west", update("bob", n))
}

func status(t *testing.T, c *twopc.Coordinator, gid string) coordinator.Status {
	return coretest.Status(t, c, gid)
}
