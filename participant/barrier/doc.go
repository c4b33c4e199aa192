// Package barrier makes each operation of a participant's branch run at most once, in the
// participant's own database transaction, and serves it to coordinators over HTTP (signatures
// verified) or in-process; package participant/grpcbarrier serves it over gRPC. The wire protocol
// is package participant's.
//
//	bar, _ := barrier.New(pool, barrier.WithSecrets(secret))
//	_ = bar.Migrate(ctx)
//	go bar.Run(ctx) // purges old barrier rows
//	mux.Handle("POST /stock/tcc", bar.Handler(stock,
//		barrier.WithAllowedOps(participant.OpTry, participant.OpConfirm, participant.OpCancel)))
//
// Inside the participant's own transaction, each operation of a branch runs at most once; a cancel
// that arrives before its try (the empty rollback) succeeds without touching business data and
// blocks that try for good: a try arriving after its cancel (a hanging try) is answered 409
// ([ErrHanging]) instead of reserving what nobody will ever release. All of it is done with
// inserts on a unique key, never check-then-write, so a concurrent try and cancel serialise on the
// index instead of deadlocking ([Barrier.Call]). The transaction is always ended — a panic in the
// business function is recovered, rolled back and answered 500 — so no connection is left checked
// out. Three-phase commit's ops pair like two-phase commit's (precommit with abort); its agent,
// which ends branches whose coordinator went silent, is package threepc/agent.
//
// [Barrier.Handler] authenticates every request: the coordinator signs it with a shared secret
// (participant.NewSigningClient) and the handler checks the signature against its secrets
// ([WithSecrets]; two during a key rotation), refuses a timestamp more than [DefaultSignatureWindow]
// from its clock, and claims the signature as a nonce in the op's own transaction, so a replay is
// refused (401, [ErrUnauthorized]). A barrier given no secret refuses every request, unless built
// with [WithUnsignedRequests] (behind mutual TLS: docs/security.md). In-process participants
// ([Barrier.Participant]) are not signed.
//
// Each op runs under a span "participant <op>" and the barrier counts its decisions in
// txkit_barrier_ops_total{op, result} ([WithTelemetry]); docs/tracing.md and
// docs/metrics.md have the details.
package barrier
