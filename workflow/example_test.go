package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/workflow"
)

// Example places two orders as a workflow: a local step prices the order, a second reserves the
// stock (with its compensation), and the payment participant is called with both results. The
// second payment is refused, so the reservation is released.
func Example() {
	ctx := context.Background()
	pool, schemas, done, ok := testenv.ExampleDB(ctx, "example_")
	if !ok {
		return
	}
	defer done()

	c, err := workflow.New(pool, coordinator.WithSchema(schemas[0]))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := c.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	// The payment service refuses amounts over 100.
	pay, _ := c.Register("pay", participant.ParticipantFunc(func(_ context.Context, r participant.Request) error {
		fmt.Printf("  pay %s %s\n", r.Op, r.Payload)
		var p struct{ Amount int }
		if r.Op == participant.OpAction && json.Unmarshal(r.Payload, &p) == nil && p.Amount > 100 {
			return participant.ErrRefused
		}
		return nil
	}))
	type Order struct{ Qty int }
	type Payment struct {
		Amount      int    `json:"amount"`
		Reservation string `json:"reservation"`
	}
	err = workflow.Register(c, "order", func(ctx workflow.Context, in Order) (string, error) {
		amount, err := workflow.Step(ctx, "price", func(context.Context) (int, error) { return in.Qty * 40, nil })
		if err != nil {
			return "", err
		}
		res, err := workflow.StepWithCompensation(ctx, "reserve",
			func(context.Context) (string, error) {
				fmt.Printf("  reserve %d\n", in.Qty)
				return fmt.Sprintf("R%d", in.Qty), nil
			},
			func(_ context.Context, res string) error { fmt.Println("  release", res); return nil })
		if err != nil {
			return "", err
		}
		if err := workflow.Call(ctx, "pay", pay, Payment{Amount: amount, Reservation: res}); err != nil {
			return "", err
		}
		return "paid " + res, nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, qty := range []int{2, 3} {
		out, err := c.Start(ctx, "order", Order{Qty: qty})
		var receipt string
		if err == nil {
			err = out.Decode(&receipt)
		}
		fmt.Printf("order of %d: %s %q (refused: %v)\n", qty, out.Status, receipt, errors.Is(err, participant.ErrRefused))
	}
	// Output:
	//   reserve 2
	//   pay action {"amount":80,"reservation":"R2"}
	// order of 2: succeeded "paid R2" (refused: false)
	//   reserve 3
	//   pay action {"amount":120,"reservation":"R3"}
	//   pay compensate {"amount":120,"reservation":"R3"}
	//   release R3
	// order of 3: compensated "" (refused: true)
}
