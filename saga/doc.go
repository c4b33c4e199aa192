// Package saga is a saga coordinator on PostgreSQL: steps run their actions in order (or as
// their dependencies allow, several at once), and when one is refused the steps already done are
// compensated in reverse. The saga and all its steps are written before any action runs, and the
// elected leader ([Coordinator.Run] under a [lock.Elector]) finishes whatever a starter left
// unfinished — running sagas forward, compensating sagas backward.
//
//	client, _ := participant.NewSigningClient(secret, nil) // signs for the participants' barrier
//	c, _ := saga.New(pool, coordinator.WithSchema("shop"), coordinator.WithElector(el), coordinator.WithHTTPClient(client))
//	_ = c.Migrate(ctx)
//	go c.Run(ctx) // recovery, on the leader only
//	stock, _ := c.Register("stock", stockParticipant) // in-process, found by name when recovering
//	s, _ := c.Begin(ctx, coordinator.WithTimeout(time.Minute))
//	_ = s.Add(saga.Step{Name: "stock", Participant: stock, Payload: body})
//	_ = s.Add(saga.Step{Name: "pay", Participant: participant.HTTP{URL: payURL}}) // after stock, signed with client
//	err := s.Submit(ctx) // nil: succeeded; ErrRefused: compensated; coordinator.ErrIncomplete: the leader carries on
//
// A step is one participant and one URL: the action and the compensation are POSTed to it, and
// its handler (behind barrier.Barrier.Handler, which makes both idempotent) switches on the
// request's Op. Step order ([Step.DependsOn]), what a refusal, a transient failure and the
// timeout do, the writes per saga, metrics and tracing: docs/coordinators.md, docs/metrics.md,
// docs/tracing.md.
//
// Coordinator is safe for concurrent use by multiple goroutines; a [Saga] is built and
// submitted by one goroutine.
package saga
