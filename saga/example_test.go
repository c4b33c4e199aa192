package saga_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/saga"
)

// Example places two orders as three-step sagas: the first succeeds; in the second the payment
// is refused, so the stock reservation and the order are compensated, in reverse.
func Example() {
	ctx := context.Background()
	pool, schemas, done, ok := testenv.ExampleDB(ctx, "example_")
	if !ok {
		return
	}
	defer done()
	schema := schemas[0]

	c, err := saga.New(pool, coordinator.WithSchema(schema))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := c.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	// Participants print what they are asked; the account refuses amounts over 100.
	printer := func(name string) participant.Participant {
		p, _ := c.Register(name, participant.ParticipantFunc(func(_ context.Context, r participant.Request) error {
			if r.Op == participant.OpAction && name == "account" && string(r.Payload) == `{"amount":500}` {
				fmt.Printf("  %s %s: refused\n", name, r.Op)
				return participant.ErrRefused
			}
			fmt.Printf("  %s %s\n", name, r.Op)
			return nil
		}))
		return p
	}
	order, stock, account := printer("order"), printer("stock"), printer("account")

	place := func(amount int) {
		s, err := c.Begin(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, st := range []saga.Step{
			{Name: "order", Participant: order},
			{Name: "stock", Participant: stock},
			{Name: "account", Participant: account, Payload: fmt.Appendf(nil, `{"amount":%d}`, amount)},
		} {
			if err := s.Add(st); err != nil {
				fmt.Println(err)
				return
			}
		}
		err = s.Submit(ctx)
		st, _ := c.Status(ctx, s.GID())
		fmt.Printf("order of %d: %s (refused: %v)\n", amount, st, errors.Is(err, participant.ErrRefused))
	}
	place(50)
	place(500)
	// Output:
	//   order action
	//   stock action
	//   account action
	// order of 50: succeeded (refused: false)
	//   order action
	//   stock action
	//   account action: refused
	//   account compensate
	//   stock compensate
	//   order compensate
	// order of 500: compensated (refused: true)
}
