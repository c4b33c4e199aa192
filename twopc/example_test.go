package twopc_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/twopc"
)

// Example moves money between accounts kept in two schemas standing for two databases: a
// transfer within the balance commits on both sides; one beyond it fails in its work (a CHECK
// constraint), is aborted, and changes neither side.
func Example() {
	ctx := context.Background()
	url := os.Getenv("TXKIT_PG_URL") // set by `make test`
	if url == "" {
		fmt.Println("TXKIT_PG_URL is not set: start the servers with `make up`")
		return
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	id := strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
	east, west, logSchema := "east_"+id, "west_"+id, "bank_"+id
	for _, s := range []string{east, west} {
		_, err := pool.Exec(ctx, fmt.Sprintf(`create schema %[1]s;
			create table %[1]s.accounts (id text primary key, balance bigint not null check (balance >= 0));
			insert into %[1]s.accounts values ('alice', 100), ('bob', 100)`, s))
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	defer func() {
		for _, s := range []string{east, west, logSchema} {
			_, _ = pool.Exec(context.WithoutCancel(ctx), "drop schema if exists "+pgx.Identifier{s}.Sanitize()+" cascade")
		}
	}()

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
