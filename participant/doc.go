// Package participant is both sides of a txkit branch: the wire protocol between a coordinator
// (tcc, saga, twopc) and its participants, the HTTP and in-process ways to call a participant, and the
// participant barrier that makes each operation run at most once in the participant's own
// database transaction.
//
// The protocol: the coordinator POSTs a JSON [Request] {"gid", "branch", "op", "payload"}; the
// participant answers 2xx for success, 409 ([StatusRefused]) for a business refusal — the global
// transaction is rolled back, never retried — and anything else means "try again later".
//
// The barrier makes a participant safe against retries and reordering with a few lines:
//
//	bar, _ := participant.NewBarrier()
//	_ = bar.Migrate(ctx, pool)
//	go bar.Run(ctx, pool) // purges old barrier rows
//	mux.Handle("POST /stock/try", bar.Handler(pool, reserve))
//	mux.Handle("POST /stock/confirm", bar.Handler(pool, commit))
//	mux.Handle("POST /stock/cancel", bar.Handler(pool, release))
//
// Inside the participant's own transaction, each operation of a branch runs at most once; a cancel
// that arrives before its try (the empty rollback) succeeds without touching business data and
// blocks that try for good: a try arriving after its cancel (a hanging try) is answered 409
// ([ErrHanging]) instead of reserving what nobody will ever release. All of it is done with
// inserts on a unique key, never check-then-write, so a concurrent try and cancel serialise on the
// index instead of deadlocking.
package participant
