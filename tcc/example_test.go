package tcc_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/tcc"
)

// Example places two orders with two in-process participants: the first reserves stock and
// funds and is confirmed; the second is refused by the account and rolled back.
func Example() {
	ctx := context.Background()
	pool, schemas, done, ok := testenv.ExampleDB(ctx, "example_")
	if !ok {
		return
	}
	defer done()
	schema := schemas[0]

	// Concurrency 1 calls the confirms (cancels) one after the other, so the output is in order.
	c, err := tcc.New(pool, coordinator.WithSchema(schema), coordinator.WithConcurrency(1))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := c.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	// Participants print what they are asked; the account refuses amounts over 100.
	stock, _ := c.Register("stock", participant.ParticipantFunc(func(_ context.Context, r participant.Request) error {
		fmt.Printf("  stock %s\n", r.Op)
		return nil
	}))
	account, _ := c.Register("account", participant.ParticipantFunc(func(_ context.Context, r participant.Request) error {
		if r.Op == participant.OpTry && string(r.Payload) == `{"amount":500}` {
			fmt.Printf("  account %s: refused\n", r.Op)
			return participant.ErrRefused
		}
		fmt.Printf("  account %s\n", r.Op)
		return nil
	}))

	order := func(amount int) {
		g, err := c.Begin(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		err = g.Try(ctx, tcc.Branch{Name: "stock", Participant: stock})
		if err == nil {
			err = g.Try(ctx, tcc.Branch{Name: "account", Participant: account, Payload: fmt.Appendf(nil, `{"amount":%d}`, amount)})
		}
		if err != nil {
			if rerr := g.Rollback(ctx); rerr != nil {
				fmt.Println(rerr)
			}
		} else if err = g.Commit(ctx); err != nil {
			fmt.Println(err)
		}
		st, _ := c.Status(ctx, g.GID())
		fmt.Printf("order of %d: %s (refused: %v)\n", amount, st, errors.Is(err, participant.ErrRefused))
	}
	order(50)
	order(500)
	// Output:
	//   stock try
	//   account try
	//   stock confirm
	//   account confirm
	// order of 50: confirmed (refused: false)
	//   stock try
	//   account try: refused
	//   stock cancel
	//   account cancel
	// order of 500: cancelled (refused: true)
}

// ExampleCoordinator_groupCommit runs 20 orders at once through a coordinator whose log groups
// their writes (coordinator.WithGroupCommit): the writes that meet in time share PostgreSQL
// round trips and commits, and each order still ends as its own starter decided.
func ExampleCoordinator_groupCommit() {
	ctx := context.Background()
	pool, schemas, done, ok := testenv.ExampleDB(ctx, "example_")
	if !ok {
		return
	}
	defer done()

	c, err := tcc.New(pool, coordinator.WithSchema(schemas[0]), coordinator.WithGroupCommit(time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := c.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	stock, _ := c.Register("stock", participant.ParticipantFunc(func(context.Context, participant.Request) error { return nil }))
	account, _ := c.Register("account", participant.ParticipantFunc(func(context.Context, participant.Request) error { return nil }))

	gids := make(chan string, 20)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			g, err := c.Begin(ctx)
			if err != nil {
				fmt.Println(err)
				return
			}
			for _, b := range []tcc.Branch{{Name: "stock", Participant: stock}, {Name: "account", Participant: account}} {
				if err := g.Try(ctx, b); err != nil {
					fmt.Println(err, g.Rollback(ctx))
					return
				}
			}
			if err := g.Commit(ctx); err != nil {
				fmt.Println(err)
				return
			}
			gids <- g.GID()
		})
	}
	wg.Wait()
	close(gids)
	confirmed := 0
	for gid := range gids {
		if st, err := c.Status(ctx, gid); err == nil && st == tcc.StatusConfirmed {
			confirmed++
		}
	}
	fmt.Printf("%d orders confirmed\n", confirmed)
	// Output:
	// 20 orders confirmed
}
