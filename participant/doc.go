// Package participant is both sides of a txkit branch: the wire protocol between a coordinator
// (tcc, saga, twopc, threepc) and its participants, the HTTP ([HTTP], [NewSigningClient]) and
// in-process ways to call a participant, the [Barrier] that makes each operation run at most once
// in the participant's own database transaction, and the [Agent] that ends a three-phase-commit
// branch whose coordinator went silent.
//
// The protocol: the coordinator POSTs a JSON [Request] {"gid", "branch", "op", "payload"} to the
// branch's URL — every op of a branch to the same URL; the participant answers 2xx for success,
// 409 ([StatusRefused]) for a business refusal (the transaction is rolled back, never retried)
// and anything else for "try again later". The barrier's handler serves only signed calls
// ([WithSecrets]) unless built with [WithUnsignedRequests].
//
//	bar, _ := participant.NewBarrier(pool, participant.WithSecrets(secret))
//	_ = bar.Migrate(ctx)
//	go bar.Run(ctx) // purges old barrier rows
//	mux.Handle("POST /stock/tcc", bar.Handler(stock,
//		participant.WithAllowedOps(participant.OpTry, participant.OpConfirm, participant.OpCancel)))
//
//	client, _ := participant.NewSigningClient(secret, &http.Client{Timeout: 10 * time.Second})
//	c, _ := tcc.New(pool, coordinator.WithHTTPClient(client)) // and participant.HTTP{URL: stockURL, Client: client}
//
// What the barrier guarantees (empty rollbacks, hanging tries) and the 3PC agent:
// docs/coordinators.md; signing, key rotation and mutual TLS: docs/security.md; metrics and
// tracing: docs/metrics.md, docs/tracing.md.
package participant
