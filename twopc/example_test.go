package twopc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/twopc"
)

// Example moves money between accounts kept in two schemas standing for two databases: a
// transfer within the balance commits on both sides; one beyond it fails in its work (a CHECK
// constraint), is aborted, and changes neither side.
func Example() {
	ctx := context.Background()
	pool, schemas, done, ok := testenv.ExampleDB(ctx, "east_", "west_", "bank_")
	if !ok {
		return
	}
	defer done()
	east, west, logSchema := schemas[0], schemas[1], schemas[2]
	for _, s := range []string{east, west} {
		_, err := pool.Exec(ctx, fmt.Sprintf(`create schema %[1]s;
			create table %[1]s.accounts (id text primary key, balance bigint not null check (balance >= 0));
			insert into %[1]s.accounts values ('alice', 100), ('bob', 100)`, s))
		if err != nil {
			fmt.Println(err)
			return
		}
	}

	c, err := twopc.New(pool, coordinator.WithSchema(logSchema))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	if err := c.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	// One database with two schemas here; in production, two pools on two databases.
	for _, db := range []string{"east", "west"} {
		if err := c.RegisterDB(db, pool); err != nil {
			fmt.Println(err)
			return
		}
	}
	update := func(schema, account string, delta int) func(context.Context, pgx.Tx) error {
		return func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "update "+schema+".accounts set balance = balance + $1 where id = $2", delta, account)
			return err
		}
	}
	transfer := func(amount int) {
		g, err := c.Begin(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		err = g.Enlist(ctx, "east", update(east, "alice", -amount))
		if err == nil {
			err = g.Enlist(ctx, "west", update(west, "bob", amount))
		}
		if err != nil {
			_ = g.Abort(ctx)
			fmt.Printf("transfer of %d: aborted (%v)\n", amount, strings.Contains(err.Error(), "check constraint"))
			return
		}
		err = g.Commit(ctx)
		fmt.Printf("transfer of %d: committed %v, aborted %v\n", amount, err == nil, errors.Is(err, twopc.ErrAborted))
	}
	transfer(30)
	transfer(500)

	var alice, bob int
	_ = pool.QueryRow(ctx, "select balance from "+east+".accounts where id = 'alice'").Scan(&alice)
	_ = pool.QueryRow(ctx, "select balance from "+west+".accounts where id = 'bob'").Scan(&bob)
	fmt.Printf("alice (east) %d, bob (west) %d\n", alice, bob)
	// Output:
	// transfer of 30: committed true, aborted false
	// transfer of 500: aborted (true)
	// alice (east) 70, bob (west) 130
}
