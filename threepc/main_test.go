package threepc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/prepared/preparedtest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/threepc/agent"
)

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) != "" {
		os.Exit(worker())
	}
	testenv.VerifyNoLeaks(m)
}

// world is one test's bank (preparedtest.Bank: the log schema, east and west).
type world struct{ *preparedtest.Bank }

const (
	startBalance       = preparedtest.StartBalance
	participantTimeout = 2 * time.Second // the coordinators' and the agents'
)

func newWorld(t *testing.T) *world { return &world{preparedtest.NewBank(t)} }

var update, balance = preparedtest.Update, preparedtest.Balance

// coordinator returns a migrated Coordinator on the log schema with east and west registered,
// closed when the test ends. Its timeouts are short: cancommit 500ms, precommit 1s, participant
// 2s (the agents' too), global 6s.
func (w *world) coordinator(opts ...coordinator.Option) *threepc.Coordinator {
	w.T.Helper()
	return w.coordinatorOn(w.Log.Pool, opts...)
}

// coordinatorOn is coordinator with its log reached through pool.
func (w *world) coordinatorOn(pool *pgxpool.Pool, opts ...coordinator.Option) *threepc.Coordinator {
	w.T.Helper()
	opts = coretest.Options(w.T, w.Log.Name, append([]coordinator.Option{threepc.WithTimeouts(500*time.Millisecond, time.Second, participantTimeout),
		coordinator.WithDefaultTimeout(6 * time.Second)}, opts...)...)
	c, err := threepc.New(pool, opts...)
	if err != nil {
		w.T.Fatalf("threepc.New: %v", err)
	}
	w.T.Cleanup(func() { _ = c.Close() })
	coretest.FlushAtCleanup(w.T, c)
	if err := c.Migrate(w.T.Context()); err != nil {
		w.T.Fatalf("Migrate: %v", err)
	}
	for name, s := range map[string]*testenv.Schema{"east": w.East, "west": w.West} {
		if err := c.RegisterDB(name, s.Pool); err != nil {
			w.T.Fatalf("RegisterDB(%s): %v", name, err)
		}
	}
	return c
}

// agents starts an agent.PG on each database for c's prepared transactions, until the test ends.
func (w *world) agents(c *threepc.Coordinator, opts ...agent.Option) []*agent.PG {
	w.T.Helper()
	var out []*agent.PG
	for name, s := range map[string]*testenv.Schema{"east": w.East, "west": w.West} {
		a, err := agent.NewPG(c, name, s.Pool, append([]agent.Option{agent.WithTimeout(participantTimeout, 100*time.Millisecond),
			agent.WithLogger(testenv.Logger(w.T))}, opts...)...)
		if err != nil {
			w.T.Fatalf("agent.NewPG: %v", err)
		}
		testenv.Run(w.T, a.Run)
		out = append(out, a)
	}
	return out
}

// move enlists, in g, n taken from alice in east (refused at CanCommit when she has less) and
// given to bob in west.
func move(g *threepc.Global, n int) error {
	if err := g.Enlist("east", threepc.DBWork{CanCommit: hasAtLeast("alice", n), PreCommit: update("alice", -n)}); err != nil {
		return err
	}
	return g.Enlist("west", threepc.DBWork{CanCommit: hasAtLeast("bob", 0), PreCommit: update("bob", n)})
}

// hasAtLeast votes yes when account id exists with a balance of at least n; it locks nothing.
func hasAtLeast(id string, n int) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		var b int
		err := tx.QueryRow(ctx, `select balance from accounts where id = $1`, id).Scan(&b)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("no account %s: %w", id, participant.ErrRefused)
		case err != nil:
			return err
		case b < n:
			return fmt.Errorf("%s holds %d, less than %d: %w", id, b, n, participant.ErrRefused)
		}
		return nil
	}
}

// recorder is an in-process participant that records the ops it gets, refusing or failing the
// ops in refuse and fail.
type recorder struct {
	mu           sync.Mutex
	ops          []string
	refuse, fail map[participant.Op]bool
	delay        map[participant.Op]time.Duration
}

func (r *recorder) Do(ctx context.Context, req participant.Request) error {
	r.mu.Lock()
	r.ops = append(r.ops, req.Op.String())
	refuse, fail, delay := r.refuse[req.Op], r.fail[req.Op], r.delay[req.Op]
	r.mu.Unlock()
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	switch {
	case refuse:
		return fmt.Errorf("recorder says no to %s: %w", req.Op, participant.ErrRefused)
	case fail:
		return fmt.Errorf("recorder fails %s", req.Op)
	}
	return nil
}

func (r *recorder) seen() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.ops, ",")
}

func status(t *testing.T, c *threepc.Coordinator, gid string) coordinator.Status {
	return coretest.Status(t, c, gid)
}

// poolVia returns a pool on s whose connections go to addr (a proxy to the server) instead,
// closed when the test ends.
func (w *world) poolVia(addr string) *pgxpool.Pool {
	w.T.Helper()
	return w.poolOf(w.Log, addr)
}

func (w *world) poolOf(s *testenv.Schema, addr string) *pgxpool.Pool {
	w.T.Helper()
	cfg, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		w.T.Fatal(err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		w.T.Fatal(err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		w.T.Fatal(err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.ConnectTimeout = host, uint16(p), 2*time.Second
	cfg.ConnConfig.Fallbacks = nil
	pool, err := pgxpool.NewWithConfig(w.T.Context(), cfg)
	if err != nil {
		w.T.Fatal(err)
	}
	w.T.Cleanup(pool.Close)
	return pool
}
