// Package tcc is a TCC (try, confirm, cancel) coordinator on PostgreSQL: every participant
// reserves in its try, then all confirm or all cancel. The decision is written before it is acted
// on, and the elected leader ([Coordinator.Run] under a [lock.Elector]) finishes whatever a
// starter left unfinished — confirms and cancels that failed, starters that crashed, transactions
// left trying past their timeout.
//
//	client, _ := participant.NewSigningClient(secret, nil) // signs for the participants' barrier
//	c, _ := tcc.New(pool, coordinator.WithSchema("shop"), coordinator.WithElector(el), coordinator.WithHTTPClient(client))
//	_ = c.Migrate(ctx)
//	go c.Run(ctx) // recovery, on the leader only
//	stock, _ := c.Register("stock", stockParticipant) // in-process, found by name when recovering
//	g, _ := c.Begin(ctx, coordinator.WithTimeout(30*time.Second))
//	err := g.Try(ctx, tcc.Branch{Name: "stock", Participant: stock, Payload: body})
//	if err == nil {
//		err = g.Try(ctx, tcc.Branch{Name: "pay", Participant: participant.HTTP{URL: payURL}}) // signed with client
//	}
//	if err != nil {
//		return errors.Join(err, g.Rollback(ctx)) // the refusal stays the answer; every recorded branch is cancelled
//	}
//	return g.Commit(ctx) // nil, or coordinator.ErrIncomplete: decided, the leader finishes the confirms
//
// Branches known together go to one Try (g.Try(ctx, stock, pay)): recorded in one write, tried
// at once. A refused try ([participant.ErrRefused]) records the rollback decision; any other
// failure is an unknown outcome that Rollback (or the timeout) cancels too. What a refusal and a
// failure do, and why a transaction of N branches tried one by one costs N+2 writes — N+1 commits,
// the finish riding on the next write — and 3 writes, 2 commits, given to one Try, each needed:
// docs/coordinators.md.
//
// The starter's own effect (an order row and its outbox message) is written by the confirm of an
// in-process branch of its own, in the barrier's transaction — never after Commit returns, which
// a crash in between would lose: docs/coordinators.md, "TCC + outbox"; examples/tcc-outbox.
//
// Coordinator and Global are safe for concurrent use by multiple goroutines.
package tcc
