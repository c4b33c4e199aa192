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
	"github.com/txkit/txkit/internal/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/threepc"
)

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) != "" {
		os.Exit(worker())
	}
	testenv.VerifyNoLeaks(m)
}

// world is one test's bank: the coordinators' log in one schema and two participant databases
// (east with alice, west with bob: schemas of their own) registered with every coordinator made.
type world struct {
	t          *testing.T
	log        *testenv.Schema
	east, west *testenv.Schema
	path       string
}

const (
	startBalance       = 1000
	participantTimeout = 2 * time.Second // the coordinators' and the agents'
)

func newWorld(t *testing.T) *world {
	w := &world{t: t, log: testenv.PG(t), east: testenv.PG(t), west: testenv.PG(t), path: testenv.ZKRoot(t) + "/3pc-leader"}
	for _, s := range []*testenv.Schema{w.east, w.west} {
		if _, err := s.Pool.Exec(t.Context(), fmt.Sprintf(`create table accounts (id text primary key, balance bigint not null check (balance >= 0));
			insert into accounts values ('alice', %d), ('bob', %d)`, startBalance, startBalance)); err != nil {
			t.Fatalf("accounts: %v", err)
		}
	}
	// Before the schemas are dropped (cleanups run in reverse), roll back any prepared transaction
	// a failed test left: it would hold its locks and block the drop.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, id := range w.prepared(ctx) {
			_, _ = w.log.Pool.Exec(ctx, "rollback prepared '"+strings.ReplaceAll(id, "'", "''")+"'")
		}
	})
	return w
}

// prepared lists the prepared transactions of this test's coordinators (named after its log schema).
func (w *world) prepared(ctx context.Context) []string {
	rows, err := w.log.Pool.Query(ctx, `select gid from pg_prepared_xacts where database = current_database() and position($1 in gid) > 0`, w.log.Name)
	if err != nil {
		w.t.Errorf("pg_prepared_xacts: %v", err)
		return nil
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		w.t.Errorf("pg_prepared_xacts: %v", err)
	}
	return ids
}

func (w *world) noPrepared() {
	w.t.Helper()
	if ids := w.prepared(w.t.Context()); len(ids) > 0 {
		w.t.Fatalf("prepared transactions left: %v", ids)
	}
}

// coordinator returns a migrated Coordinator on the log schema with east and west registered,
// closed when the test ends. Its timeouts are short: cancommit 500ms, precommit 1s, participant
// 2s (the agents' too), global 6s.
func (w *world) coordinator(opts ...coordinator.Option) *threepc.Coordinator {
	w.t.Helper()
	opts = coretest.Options(w.t, w.log.Name, append([]coordinator.Option{threepc.WithCanCommitTimeout(500 * time.Millisecond),
		threepc.WithPreCommitTimeout(time.Second), threepc.WithParticipantTimeout(participantTimeout),
		coordinator.WithDefaultTimeout(6 * time.Second)}, opts...)...)
	c, err := threepc.New(w.log.Pool, opts...)
	if err != nil {
		w.t.Fatalf("threepc.New: %v", err)
	}
	w.t.Cleanup(func() { _ = c.Close() })
	if err := c.Migrate(w.t.Context()); err != nil {
		w.t.Fatalf("Migrate: %v", err)
	}
	for name, s := range map[string]*testenv.Schema{"east": w.east, "west": w.west} {
		if err := c.RegisterDB(name, s.Pool); err != nil {
			w.t.Fatalf("RegisterDB(%s): %v", name, err)
		}
	}
	return c
}

// agents starts a PGAgent on each database for c's prepared transactions, until the test ends.
func (w *world) agents(c *threepc.Coordinator, opts ...threepc.AgentOption) []*threepc.PGAgent {
	w.t.Helper()
	var out []*threepc.PGAgent
	for name, s := range map[string]*testenv.Schema{"east": w.east, "west": w.west} {
		a, err := threepc.NewPGAgent(c, name, s.Pool, append([]threepc.AgentOption{threepc.WithAgentPoll(100 * time.Millisecond),
			threepc.WithAgentTimeout(participantTimeout), threepc.WithAgentLogger(testenv.Logger(w.t))}, opts...)...)
		if err != nil {
			w.t.Fatalf("NewPGAgent: %v", err)
		}
		testenv.Run(w.t, a.Run)
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

func update(id string, delta int) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `update accounts set balance = balance + $1 where id = $2`, delta, id)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("no account %s", id)
		}
		return err
	}
}

func balance(t *testing.T, p *pgxpool.Pool, id string) int {
	t.Helper()
	var n int
	if err := p.QueryRow(t.Context(), `select balance from accounts where id = $1`, id).Scan(&n); err != nil {
		t.Fatalf("balance %s: %v", id, err)
	}
	return n
}

// balances returns alice's in east and bob's in west.
func (w *world) balances() (int, int) {
	return balance(w.t, w.east.Pool, "alice"), balance(w.t, w.west.Pool, "bob")
}

func (w *world) wantBalances(alice, bob int) {
	w.t.Helper()
	if a, o := w.balances(); a != alice || o != bob {
		w.t.Fatalf("balances alice(east)=%d bob(west)=%d, want %d and %d", a, o, alice, bob)
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
	w.t.Helper()
	return w.poolOf(w.log, addr)
}

func (w *world) poolOf(s *testenv.Schema, addr string) *pgxpool.Pool {
	w.t.Helper()
	cfg, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		w.t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		w.t.Fatal(err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		w.t.Fatal(err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.ConnectTimeout = host, uint16(p), 2*time.Second
	cfg.ConnConfig.Fallbacks = nil
	pool, err := pgxpool.NewWithConfig(w.t.Context(), cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(pool.Close)
	return pool
}
