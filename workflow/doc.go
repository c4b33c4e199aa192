// Package workflow runs a saga written as an ordinary Go function: each step's outcome — a local
// function's result or error, a participant call's answer, a durable sleep — is recorded in
// PostgreSQL before the function sees it, one step may use another's result, and when the
// function fails the compensations of the completed steps run in reverse. It runs on the log,
// leadership, fencing, barrier identities, metrics and tracing of the other coordinators.
//
//	client, _ := participant.NewSigningClient(secret, nil) // signs for the participants' barrier
//	c, _ := workflow.New(pool, coordinator.WithSchema("shop"), coordinator.WithElector(el), coordinator.WithHTTPClient(client))
//	_ = c.Migrate(ctx)
//	go c.Run(ctx) // resumes, on the leader only, the workflows whose starter died
//	_ = workflow.Register(c, "order", func(ctx workflow.Context, in Order) (Receipt, error) {
//		id, err := workflow.StepWithCompensation(ctx, "reserve", reserve(in), release)
//		if err != nil {
//			return Receipt{}, err // compensates the steps done so far, in reverse
//		}
//		if err := workflow.Call(ctx, "pay", payParticipant, Payment{Reservation: id}); err != nil {
//			return Receipt{}, err
//		}
//		return Receipt{Reservation: id}, nil
//	})
//	out, err := c.Start(ctx, "order", Order{...}) // blocks until the workflow ends
//
// # Replay and determinism
//
// When the process that started a workflow dies, the leader of [Coordinator.Run] runs its
// function again from the start: recorded steps return their recorded outcome without running,
// and the first step without a record runs. A call that may have reached the participant is sent
// again with the same barrier identity (gid, step, op), so participant/barrier applies it once; a
// local step that ran but whose result was not recorded runs again (at-least-once: make it
// idempotent). The function must be deterministic between steps — the same steps, names and order
// given the same recorded results; time, randomness and reads of changing data belong inside a
// step. A replay asking for another step than the log holds stops the workflow (status stopped,
// [ErrNondeterministic]) for an operator instead of diverging.
//
// Register every workflow and the in-process participants it calls in every process that may
// lead. Steps run in the goroutine that called Start (or the leader's drive), never concurrently.
// [Try] makes a TCC try a step; writes per step and workflow vs saga vs TCC: docs/workflows.md.
// Coordinator is safe for concurrent use by multiple goroutines.
package workflow
