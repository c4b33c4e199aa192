package twopc_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/twopc"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

// bank is one test's world: the coordinator's log in one schema, and two participant "databases"
// (east, west: schemas of their own, each with an accounts table) registered with every
// coordinator the test makes.
type bank struct {
	t          *testing.T
	log        *testenv.Schema
	east, west *testenv.Schema
	path       string
}

const startBalance = 1000

func newBank(t *testing.T) *bank {
	b := &bank{t: t, log: testenv.PG(t), east: testenv.PG(t), west: testenv.PG(t), path: testenv.ZKRoot(t) + "/2pc-leader"}
	for _, s := range []*testenv.Schema{b.east, b.west} {
		if _, err := s.Pool.Exec(t.Context(), fmt.Sprintf(`create table accounts (id text primary key, balance bigint not null check (balance >= 0));
			insert into accounts values ('alice', %d), ('bob', %d)`, startBalance, startBalance)); err != nil {
			t.Fatalf("accounts: %v", err)
		}
	}
	// Cleanups run in reverse: this one, before the schemas are dropped, rolls back any prepared
	// transaction a failed test left behind (it would hold its locks and block the drop).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, id := range b.prepared(ctx) {
			_, _ = b.log.Pool.Exec(ctx, "rollback prepared '"+strings.ReplaceAll(id, "'", "''")+"'")
		}
	})
	return b
}

// prepared lists the prepared transactions of this test's coordinators (named after its log schema).
func (b *bank) prepared(ctx context.Context) []string {
	rows, err := b.log.Pool.Query(ctx, `select gid from pg_prepared_xacts where database = current_database() and position($1 in gid) > 0`, b.log.Name)
	if err != nil {
		b.t.Errorf("pg_prepared_xacts: %v", err)
		return nil
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.t.Errorf("pg_prepared_xacts: %v", err)
	}
	return ids
}

func (b *bank) noPrepared() {
	b.t.Helper()
	if ids := b.prepared(b.t.Context()); len(ids) > 0 {
		b.t.Fatalf("prepared transactions left: %v", ids)
	}
}

// coordinator returns a migrated Coordinator on the log schema with east and west registered,
// closed when the test ends.
func (b *bank) coordinator(opts ...coordinator.Option) *twopc.Coordinator {
	b.t.Helper()
	return b.coordinatorOn(map[string]*pgxpool.Pool{"east": b.east.Pool, "west": b.west.Pool}, opts...)
}

// coordinatorOn is coordinator with the databases registered on pools (name → pool).
func (b *bank) coordinatorOn(pools map[string]*pgxpool.Pool, opts ...coordinator.Option) *twopc.Coordinator {
	b.t.Helper()
	opts = coretest.Options(b.t, b.log.Name, append([]coordinator.Option{twopc.WithInDoubtResolution("@every 200ms", 0)}, opts...)...)
	c, err := twopc.New(b.log.Pool, opts...)
	if err != nil {
		b.t.Fatalf("twopc.New: %v", err)
	}
	b.t.Cleanup(func() { _ = c.Close() })
	if err := c.Migrate(b.t.Context()); err != nil {
		b.t.Fatalf("Migrate: %v", err)
	}
	for name, pool := range pools {
		if err := c.RegisterDB(name, pool); err != nil {
			b.t.Fatalf("RegisterDB(%s): %v", name, err)
		}
	}
	return c
}

// pool returns a pool of at most maxConns connections on s, closed when the test ends; config,
// when not nil, changes its configuration first.
func (b *bank) pool(s *testenv.Schema, maxConns int32, config func(*pgxpool.Config)) *pgxpool.Pool {
	b.t.Helper()
	cfg, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		b.t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	if config != nil {
		config(cfg)
	}
	p, err := pgxpool.NewWithConfig(b.t.Context(), cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(p.Close)
	return p
}

// elector returns a candidate in the test's election, on a session of its own.
func (b *bank) elector(id string) lock.Elector { return testenv.Elector(b.t, b.path, id) }

// run runs c.Run until the test ends, then waits for it and reports its error.
func run(t *testing.T, c *twopc.Coordinator) { testenv.Run(t, c.Run) }

// move enlists, in g, n taken from alice in east and given to bob in west.
func (b *bank) move(ctx context.Context, g *twopc.Global, n int) error {
	if err := g.Enlist(ctx, "east", update("alice", -n)); err != nil {
		return err
	}
	return g.Enlist(ctx, "west", update("bob", n))
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
func (b *bank) balances() (int, int) {
	return balance(b.t, b.east.Pool, "alice"), balance(b.t, b.west.Pool, "bob")
}

func (b *bank) wantBalances(alice, bob int) {
	b.t.Helper()
	if a, o := b.balances(); a != alice || o != bob {
		b.t.Fatalf("balances alice(east)=%d bob(west)=%d, want %d and %d", a, o, alice, bob)
	}
}

func status(t *testing.T, c *twopc.Coordinator, gid string) coordinator.Status {
	return coretest.Status(t, c, gid)
}
