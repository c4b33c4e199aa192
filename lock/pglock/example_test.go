package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/pglock"
)

// exampleClient returns a Client on a schema of its own, migrated; done closes it and drops the
// schema. It prints why when it cannot (so that the example's output does not match).
func exampleClient(ctx context.Context) (c *pglock.Client, done func(), ok bool) {
	c, _, _, done, ok = exampleSchema(ctx)
	return c, done, ok
}

// exampleSchema is exampleClient with the pool and the schema's name, for examples that make
// tables of their own there.
func exampleSchema(ctx context.Context) (c *pglock.Client, pool *pgxpool.Pool, schema string, done func(), ok bool) {
	pool, schemas, drop, ok := testenv.ExampleDB(ctx, "pglock_example_")
	if !ok {
		return nil, nil, "", nil, false
	}
	c, err := pglock.New(pool, pglock.WithSchema(schemas[0]), pglock.WithTTL(5*time.Second))
	if err == nil {
		err = c.Migrate(ctx) // creates the schema, the table and the sequence
	}
	if err != nil {
		fmt.Println(err)
		drop()
		return nil, nil, "", nil, false
	}
	return c, pool, schemas[0], func() { _ = c.Close(); drop() }, true
}

func ExampleClient_NewMutex() {
	ctx := context.Background()
	c, done, ok := exampleClient(ctx)
	if !ok {
		return
	}
	defer done()

	a, _ := c.NewMutex("orders/recovery")
	b, _ := c.NewMutex("orders/recovery") // one Mutex value per contender

	first, err := a.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = b.TryLock(ctx)
	fmt.Println("b while a holds:", errors.Is(err, lock.ErrLocked))
	_ = a.Unlock(ctx) // deletes the row and notifies the waiters

	second, err := b.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("token rose:", first.Token().Less(second.Token()))
	fmt.Println("first lease over:", errors.Is(first.Err(), lock.ErrNotHeld))
	_ = b.Unlock(ctx)
	// Output:
	// b while a holds: true
	// token rose: true
	// first lease over: true
}

func ExampleClient_NewElector() {
	ctx := context.Background()
	c, done, ok := exampleClient(ctx)
	if !ok {
		return
	}
	defer done()

	one, _ := c.NewElector("relay/leader", "host-1")
	two, _ := c.NewElector("relay/leader", "host-2")

	lead, err := one.Campaign(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	id, _ := two.Leader(ctx)
	fmt.Println("leader:", id)

	next := make(chan lock.Leadership)
	go func() {
		l, err := two.Campaign(ctx) // waits until host-1 resigns
		if err != nil {
			fmt.Println(err)
		}
		next <- l
	}()
	_ = lead.Resign(ctx)
	lead2 := <-next
	id, _ = one.Leader(ctx)
	fmt.Println("leader:", id, "newer term:", lead.Token().Less(lead2.Token()))
	_ = lead2.Resign(ctx)
	_, err = one.Leader(ctx)
	fmt.Println("no leader:", errors.Is(err, lock.ErrNoLeader))
	// Output:
	// leader: host-1
	// leader: host-2 newer term: true
	// no leader: true
}

func ExampleClient_Inspector() {
	ctx := context.Background()
	c, done, ok := exampleClient(ctx)
	if !ok {
		return
	}
	defer done()

	el, _ := c.NewElector("relay/leader", "host-1")
	lead, err := el.Campaign(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	in := c.Inspector()
	cs, known, err := in.Contenders(ctx, "relay/leader")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s holder=%v token is its lease's: %v\n", cs[0].ID, cs[0].Holder, cs[0].Token == lead.Token())
	fmt.Println("waiters known:", known) // they wait in their own processes
	_ = lead.Resign(ctx)
	cs, _, _ = in.Contenders(ctx, "relay/leader")
	fmt.Println("contenders after the resignation:", len(cs))
	// Output:
	// host-1 holder=true token is its lease's: true
	// waiters known: false
	// contenders after the resignation: 0
}

// Do runs the work under the lock in one transaction that takes the lock and releases it at its
// commit: one commit in all, and the next waiter is handed the lock by that commit.
func ExampleMutex_Do() {
	ctx := context.Background()
	c, pool, schema, done, ok := exampleSchema(ctx)
	if !ok {
		return
	}
	defer done()
	stock := pgx.Identifier{schema, "stock"}.Sanitize()
	if _, err := pool.Exec(ctx, `create table `+stock+` (sku text primary key, n int not null, writer bigint not null);
		insert into `+stock+` values ('apple', 3, 0)`); err != nil {
		fmt.Println(err)
		return
	}

	m, _ := c.NewMutex("stock/apple")
	for range 2 {
		err := m.Do(ctx, func(ctx context.Context, tx pgx.Tx, tok lock.Token) error {
			// The work's writes, fenced by the token in the same transaction (or by package fence).
			_, err := tx.Exec(ctx, `update `+stock+` set n = n - 1, writer = $1 where sku = 'apple' and writer < $1`, tok.Seq)
			return err
		})
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	var n int
	_ = pool.QueryRow(ctx, `select n from `+stock+` where sku = 'apple'`).Scan(&n)
	fmt.Println("apples left:", n)
	// Output:
	// apples left: 1
}
