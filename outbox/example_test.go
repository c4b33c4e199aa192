package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/outbox"
)

// Example records a user and the message announcing it in one transaction. The message exists if
// and only if the user does; a Relay publishes it afterwards.
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

	// A schema of the example's own, dropped at the end.
	schema := "example_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
	defer pool.Exec(context.WithoutCancel(ctx), "drop schema if exists "+pgx.Identifier{schema}.Sanitize()+" cascade") //nolint:errcheck
	users := pgx.Identifier{schema, "users"}.Sanitize()

	ob, err := outbox.New(pool, outbox.WithTable(schema, ""))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := ob.Migrate(ctx); err != nil { // creates the schema and the table
		fmt.Println(err)
		return
	}
	if _, err := pool.Exec(ctx, "create table "+users+" (id uuid primary key, name text not null)"); err != nil {
		fmt.Println(err)
		return
	}

	register := func(name string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			id := uuid.New()
			if _, err := tx.Exec(ctx, "insert into "+users+" (id, name) values ($1, $2)", id, name); err != nil {
				return err
			}
			if name == "" {
				return errors.New("empty name") // rolls back the user and its message
			}
			_, err := ob.Enqueue(ctx, tx, outbox.Message{
				Topic: "user-registered",
				Key:   id.String(), // a user's messages are published in order
				Body:  []byte(`{"name":"` + name + `"}`),
			})
			return err
		})
	}
	fmt.Println("ada:", register("ada"))
	fmt.Println("nobody:", register(""))

	pending, dead, err := ob.Backlog(ctx, pool)
	fmt.Println("pending:", pending, "dead:", dead, "err:", err)
	// Output:
	// ada: <nil>
	// nobody: empty name
	// pending: 1 dead: 0 err: <nil>
}

// ExampleWithPartitions splits an outbox into 12 partitions: each message goes to the partition
// of its key's hash, where the relay leading that partition publishes it (see WithElectors and
// ContenderCount). The count is stored by the first Migrate; an outbox with another one is refused.
func ExampleWithPartitions() {
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
	schema := "example_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
	defer pool.Exec(context.WithoutCancel(ctx), "drop schema if exists "+pgx.Identifier{schema}.Sanitize()+" cascade") //nolint:errcheck

	ob, err := outbox.New(pool, outbox.WithTable(schema, ""), outbox.WithPartitions(12))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := ob.Migrate(ctx); err != nil { // stores 12 with the table
		fmt.Println(err)
		return
	}
	for _, key := range []string{"user-1", "user-2", "user-1"} {
		msg := outbox.Message{Topic: "user-registered", Key: key}
		if _, err := ob.Enqueue(ctx, pool, msg); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s → partition %d\n", key, ob.Partition(msg))
	}

	other, err := outbox.New(pool, outbox.WithTable(schema, ""), outbox.WithPartitions(16))
	if err != nil {
		fmt.Println(err)
		return
	}
	err = other.Migrate(ctx)
	fmt.Println("16 partitions refused:", errors.Is(err, outbox.ErrInvalidOption))
	// Output:
	// user-1 → partition 3
	// user-2 → partition 0
	// user-1 → partition 3
	// 16 partitions refused: true
}
