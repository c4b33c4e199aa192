package threepc_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/threepc"
)

// Example moves money between accounts kept in two schemas standing for two databases. Each side
// votes at CanCommit with a read-only check, so a transfer beyond alice's balance is refused
// before anything runs anywhere; one within it is pre-committed on both sides (the update, then
// PREPARE TRANSACTION) and committed. An agent.PG beside each database would end prepared
// transactions a dead coordinator left, after the participant timeout.
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

	c, err := threepc.New(pool, coordinator.WithSchema(logSchema),
		threepc.WithTimeouts(5*time.Second, 10*time.Second, 20*time.Second)) // the last is the agents' timeout: give both the same
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
	// Beside each database (in production, in the service that owns it), its agent:
	//   agent, _ := agent.NewPG(c, "east", eastPool, agent.WithTimeout(20*time.Second, 0))
	//   go agent.Run(ctx)
	atLeast := func(schema, account string, n int) func(context.Context, pgx.Tx) error {
		return func(ctx context.Context, tx pgx.Tx) error {
			var ok bool
			if err := tx.QueryRow(ctx, "select balance >= $1 from "+schema+".accounts where id = $2", n, account).Scan(&ok); err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%s has less than %d: %w", account, n, participant.ErrRefused)
			}
			return nil
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
		_ = g.Enlist("east", threepc.DBWork{CanCommit: atLeast(east, "alice", amount), PreCommit: update(east, "alice", -amount)})
		_ = g.Enlist("west", threepc.DBWork{PreCommit: update(west, "bob", amount)})
		err = g.Commit(ctx)
		fmt.Printf("transfer of %d: committed %v, aborted %v, refused at CanCommit %v\n", amount, err == nil,
			errors.Is(err, threepc.ErrAborted), errors.Is(err, participant.ErrRefused))
	}
	transfer(30)
	transfer(500)

	var alice, bob int
	_ = pool.QueryRow(ctx, "select balance from "+east+".accounts where id = 'alice'").Scan(&alice)
	_ = pool.QueryRow(ctx, "select balance from "+west+".accounts where id = 'bob'").Scan(&bob)
	fmt.Printf("alice (east) %d, bob (west) %d\n", alice, bob)
	// Output:
	// transfer of 30: committed true, aborted false, refused at CanCommit false
	// transfer of 500: committed false, aborted true, refused at CanCommit true
	// alice (east) 70, bob (west) 130
}
