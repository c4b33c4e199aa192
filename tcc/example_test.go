package tcc_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testenv"
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
