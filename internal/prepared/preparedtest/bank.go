// Package preparedtest is the test world of the coordinators whose database branches are
// prepared transactions (twopc, threepc): a log schema and two participant "databases" (east and
// west, schemas of their own with an accounts table holding alice and bob), with the checks their
// tests share. It is for tests only.
package preparedtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/testkit/testenv"
)

// StartBalance is what alice and bob hold in each database when the world is made.
const StartBalance = 1000

// Bank is one test's world: the coordinators' log in Log's schema, the participant databases
// East and West, and Path, a ZooKeeper path for the test's election.
type Bank struct {
	T          *testing.T
	Log        *testenv.Schema
	East, West *testenv.Schema
	Path       string
}

// NewBank makes the world of t. When the test ends, a cleanup fails it if a prepared transaction
// of its coordinators (named after the log schema) is left behind, and rolls each back before the
// schemas are dropped (it would hold its locks and block the drop).
func NewBank(t *testing.T) *Bank {
	b := &Bank{T: t, Log: testenv.PG(t), East: testenv.PG(t), West: testenv.PG(t), Path: testenv.ZKRoot(t) + "/leader"}
	for _, s := range []*testenv.Schema{b.East, b.West} {
		if _, err := s.Pool.Exec(t.Context(), fmt.Sprintf(`create table accounts (id text primary key, balance bigint not null check (balance >= 0));
			insert into accounts values ('alice', %d), ('bob', %d)`, StartBalance, StartBalance)); err != nil {
			t.Fatalf("accounts: %v", err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		left := b.Prepared(ctx)
		if len(left) > 0 && !t.Failed() {
			t.Errorf("prepared transactions left behind by the test (rolled back now): %v", left)
		}
		for _, id := range left {
			_, _ = b.Log.Pool.Exec(ctx, "rollback prepared '"+strings.ReplaceAll(id, "'", "''")+"'")
		}
	})
	return b
}

// Prepared lists the prepared transactions of the test's coordinators (named after its log
// schema).
func (b *Bank) Prepared(ctx context.Context) []string {
	rows, err := b.Log.Pool.Query(ctx, `select gid from pg_prepared_xacts where database = current_database() and position($1 in gid) > 0`, b.Log.Name)
	if err != nil {
		b.T.Errorf("pg_prepared_xacts: %v", err)
		return nil
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.T.Errorf("pg_prepared_xacts: %v", err)
	}
	return ids
}

// NoPrepared fails the test when a prepared transaction of its coordinators is left.
func (b *Bank) NoPrepared() {
	b.T.Helper()
	if ids := b.Prepared(b.T.Context()); len(ids) > 0 {
		b.T.Fatalf("prepared transactions left: %v", ids)
	}
}

// Update returns the work that adds delta to account id's balance, failing when there is no
// such account.
func Update(id string, delta int) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `update accounts set balance = balance + $1 where id = $2`, delta, id)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("no account %s", id)
		}
		return err
	}
}

// Balance returns account id's balance in p's accounts.
func Balance(t *testing.T, p *pgxpool.Pool, id string) int {
	t.Helper()
	var n int
	if err := p.QueryRow(t.Context(), `select balance from accounts where id = $1`, id).Scan(&n); err != nil {
		t.Fatalf("balance %s: %v", id, err)
	}
	return n
}

// Balances returns alice's in east and bob's in west.
func (b *Bank) Balances() (int, int) {
	return Balance(b.T, b.East.Pool, "alice"), Balance(b.T, b.West.Pool, "bob")
}

// WantBalances fails the test unless alice holds alice in east and bob holds bob in west.
func (b *Bank) WantBalances(alice, bob int) {
	b.T.Helper()
	if a, o := b.Balances(); a != alice || o != bob {
		b.T.Fatalf("balances alice(east)=%d bob(west)=%d, want %d and %d", a, o, alice, bob)
	}
}
