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
// A transaction of N branches that its starter finishes costs N+2 writes, each its own commit,
// and each one the protocol needs:
//
//  1. The first Try inserts the global row (status trying; timeout_at counted from Begin) and
//     its branch row in one statement. Begin itself writes nothing — unless given
//     [coordinator.WithGID], to refuse a gid already used at once: until a branch is tried there
//     is nothing to cancel, so a starter that dies before its first Try leaves nothing that
//     needs the leader. (A Commit or Rollback with no Try records the transaction decided, then
//     finishes it: 2 writes.)
//  2. Each further Try inserts its branch row — participant URL or registered name, payload —
//     before the try is called: the leader cancels only the branches it finds, so a branch
//     recorded after its try would leak the reservation of a starter that dies in between. (The
//     insert reads the global row FOR SHARE: a branch is recorded before the decision or not at
//     all.) The tries cannot share one write as a saga's steps do: a saga knows all its steps
//     before the first action, while Try is called branch by branch, each after the last
//     succeeded.
//  3. Commit or Rollback updates the global status to confirming or cancelling before the first
//     confirm or cancel, and takes the starter's lease. Without it a crash after some confirms
//     would leave a trying transaction that the timeout cancels: half confirmed, half cancelled.
//  4. One statement marks the global row confirmed (cancelled). The branch rows are left as they
//     are: a transaction is confirmed only once every branch is, so its status says theirs, and
//     Status reports each branch confirmed as of this write. Without it
//     the leader, finding the transaction still confirming once the lease passed, would call
//     every confirm again; with it the retention job may delete the transaction. Nothing waits
//     for it, so [coordinator.WithDeferredFinish] makes it a background write: Commit returns
//     once the confirms succeeded.
//
// Three branches: 5 writes (TestIntegrationWritesPerTransaction counts them with statement
// triggers), where Begin's insert of the global row on its own made it N+3 = 6 before. Nothing
// else is written on the happy path: a try's success is not recorded (Commit is called only after
// every try succeeded, and a cancel is due whatever the try did), and the branches are not marked
// one by one. When confirms fail, each drive adds one transaction recording the branches done, the
// failures (attempts, last_error) and the backoff. The leader adds one transaction per claimed
// batch (fence check and claim).
//
// Given [coordinator.WithGroupCommit], these writes of the transactions a process runs at the same
// time share round trips and commits (one batch of a Try's inserts, decisions and finishes of
// different transactions), while a lone transaction's writes go at once as above; the figures are
// in docs/coordinators.md ("Group commit").
//
// Coordinator and Global are safe for concurrent use by multiple goroutines.
package tcc
