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
//		err = g.Try(ctx, tcc.Branch{Name: "pay", Participant: participant.HTTP{URL: payURL, Client: client}})
//	}
//	if err != nil {
//		return g.Rollback(ctx) // cancels every recorded branch, even the one that failed
//	}
//	return g.Commit(ctx) // nil, or coordinator.ErrIncomplete: decided, the leader finishes the confirms
//
// # Refusals and failures
//
// A try refused by the participant ([participant.ErrRefused], HTTP 409) records the rollback
// decision at once and returns a [coordinator.BranchError]; the caller calls Rollback (and if it does not, the
// leader cancels after the lease). Any other try failure is an unknown outcome: the branch is
// recorded before its try is called, so Rollback (or the timeout) cancels it too — the
// participant's barrier turns a cancel without a try into an empty rollback. Confirms and
// cancels are retried until they succeed, with backoff computed by PostgreSQL; a refusal there
// breaks the protocol and is counted ([coordinator.Stats] Violations), logged and retried.
//
// # PostgreSQL writes per global transaction
//
// A transaction of N branches that its starter finishes costs N+3 writes, each its own commit:
//
//  1. Begin inserts the global row (status trying, timeout_at): from here a crashed starter's
//     transaction is found and cancelled at its timeout.
//  2. Each Try inserts its branch row — participant URL or registered name, payload — before the
//     try is called, so a try whose outcome is unknown can still be cancelled. (The insert reads
//     the global row FOR SHARE: a branch is recorded before the decision or not at all.)
//  3. Commit or Rollback updates the global status to confirming or cancelling before the first
//     confirm or cancel. Without it a crash after some confirms would leave a trying transaction
//     that the timeout cancels: half confirmed, half cancelled.
//  4. One statement marks the global row confirmed (cancelled) and its branches done, so that
//     nobody drives it again and the retention job may delete it.
//
// Three branches: 6 writes (TestIntegrationWritesPerTransaction counts them with statement
// triggers: 6 writing transactions, 6 round trips). Nothing else is written on the happy path: a try's success is not
// recorded (Commit is called only after every try succeeded, and a cancel is due whatever the
// try did), and the branches are not marked one by one. When confirms fail, each drive adds one
// transaction recording the branches done, the failures (attempts, last_error) and the backoff.
// The leader adds one transaction per claimed batch (fence check and claim).
//
// Coordinator and Global are safe for concurrent use by multiple goroutines.
package tcc
