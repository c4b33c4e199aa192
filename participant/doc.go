// Package participant is both sides of a txkit branch: the wire protocol between a coordinator
// (tcc, saga, twopc, threepc) and its participants, the HTTP and in-process ways to call a
// participant, the participant barrier that makes each operation run at most once in the
// participant's own database transaction, and the agent that ends a three-phase-commit branch
// whose coordinator went silent.
//
// The protocol: the coordinator POSTs a JSON [Request] {"gid", "branch", "op", "payload"} (plus a
// random "nonce" that participants ignore) to the branch's URL — every op of a branch to the same
// URL; the participant answers 2xx for success, 409 ([StatusRefused]) for a business refusal —
// the global transaction is rolled back, never retried — and anything else means "try again
// later".
//
// The barrier makes a participant safe against retries and reordering with a few lines:
//
//	bar, _ := participant.NewBarrier(pool, participant.WithSecrets(secret))
//	_ = bar.Migrate(ctx)
//	go bar.Run(ctx) // purges old barrier rows
//	mux.Handle("POST /stock/tcc", bar.Handler(stock,
//		participant.WithAllowedOps(participant.OpTry, participant.OpConfirm, participant.OpCancel)))
//
// Inside the participant's own transaction, each operation of a branch runs at most once; a cancel
// that arrives before its try (the empty rollback) succeeds without touching business data and
// blocks that try for good: a try arriving after its cancel (a hanging try) is answered 409
// ([ErrHanging]) instead of reserving what nobody will ever release. All of it is done with
// inserts on a unique key, never check-then-write, so a concurrent try and cancel serialise on the
// index instead of deadlocking. The transaction is always ended — a panic in the business
// function is recovered, rolled back and answered 500 — so no connection is left checked out.
//
// # Three-phase commit
//
// A 3PC participant (package threepc's coordinator) is an [Agent] on a barrier. The coordinator
// asks [OpCanCommit] (a read-only vote: the barrier writes nothing and calls the business code
// every time), then [OpPreCommit] (the work, done reversibly; the barrier pairs it with
// [OpAbort] as it pairs prepare with abort, so an abort that overtakes its precommit is an empty
// rollback and the late precommit is refused with [ErrHanging]), then [OpDoCommit] or [OpAbort].
// The agent records each pre-committed branch in its table (txkit_3pc_agent) in the PreCommit's
// own transaction; a branch that hears neither DoCommit nor abort within [WithAgentTimeout]
// (10 s) is ended by [Agent.Run] alone, by its [Termination] mode:
//
//   - [TerminationTextbook] commits, as the protocol's documents say — and so commits a branch
//     whose coordinator aborted when a partition cut it off after the PreCommit;
//   - [TerminationConsultLog] (the default) asks the coordinator's decision log through a
//     [Decider] (threepc.Coordinator is one) and follows it: committed → commit, aborted or
//     absent → abort, undecided → the Decider records the abort and the agent aborts. While the
//     log cannot be reached it commits nothing: the branch waits and is asked about again, and
//     the gauge txkit_3pc_agent_log_wait_seconds (on the barrier's registerer) says for how long;
//     [WithLogFallback] lets it commit by the textbook rule after an outage of at least
//     [MinLogFallback] ([AgentStats].Fallbacks).
//
// The agent applies its decision through the barrier as the coordinator's op, so the
// coordinator's later op of the same kind is a duplicate; one of the other kind is refused with
// [ErrHeuristic] (409) and logged at error level. A DoCommit for a branch never pre-committed
// here is refused with [ErrUnknownTransaction] (400).
//
//	bar, _ := participant.NewBarrier(pool, participant.WithSecrets(secret))
//	agent, _ := participant.NewAgent(bar, pay, participant.WithDecider(coord),
//		participant.WithAgentTimeout(20*time.Second)) // the coordinator's participant timeout
//	_ = agent.Migrate(ctx)
//	go agent.Run(ctx) // ends timed-out branches; every replica may run it
//	mux.Handle("POST /pay/3pc", agent.Handler())
//
// # Metrics
//
// Given [WithBarrierRegisterer], a barrier counts its decisions on the caller's Prometheus
// registerer: txkit_barrier_ops_total{op, result} with result ran, duplicate, empty_rollback or
// hanging_refused (docs/coordinators.md has the table).
//
// # Tracing
//
// [HTTP.Do] sends the W3C trace context (traceparent, tracestate) of its ctx, and
// [Barrier.Handler] runs each op under a server span "participant <op>" continuing it. The
// in-process [Barrier.Participant] runs each op under the same span "participant <op>", of kind
// internal, the child of the span in Do's ctx (the coordinator's client span of the branch call).
// Both spans carry txkit.gid, txkit.branch and txkit.op, record a failure (status Error), and
// are in the ctx the op's function gets ([WithBarrierTracerProvider]; the application's global
// provider by default). So a branch retried by a recovering leader in another process is in the
// trace of the request that began the transaction. The barrier and the agent log with the ctx at
// hand (InfoContext, ...), the op's span when there is one, so a handler that reads the span
// from the ctx adds the trace and span ids to the line.
//
// # Authentication
//
// Anyone who can reach a participant could otherwise try, confirm or cancel any branch, so
// [Barrier.Handler] authenticates every request. By default it verifies a signature: the
// coordinator signs each request with a shared secret — HMAC-SHA256 over the timestamp, the
// method, the target (path and query) and the body, in [HeaderTimestamp] and [HeaderSignature],
// as package notify signs its deliveries — and the handler checks it against its secrets
// ([WithSecrets]; two during a key rotation), refuses a timestamp more than
// [WithSignatureWindow] (5 minutes) from its clock, and claims the signature as a nonce in the
// barrier table in the same transaction as the op, so a replayed request is refused. A refused
// request is answered 401 ([ErrUnauthorized]) before anything runs or is written. A barrier given
// no secret refuses every request, unless built with [WithUnsignedRequests].
//
// The coordinator side is one client, from [NewSigningClient], used both for the participant.HTTP
// of the branches a process begins and for the recovery (coordinator.WithHTTPClient):
//
//	client, _ := participant.NewSigningClient(secret, &http.Client{Timeout: 10 * time.Second})
//	c, _ := tcc.New(pool, coordinator.WithHTTPClient(client), ...)
//	err := g.Try(ctx, tcc.Branch{Name: "stock", Participant: participant.HTTP{URL: stockURL, Client: client}})
//
// To rotate the key: give every participant both secrets (WithSecrets(newSecret, oldSecret)),
// then sign with the new one in every coordinator, then drop the old one from the participants.
// Neither the signing client nor an HTTP with a nil Client follows redirects, which would re-post
// a signed request wherever a Location header points.
//
// Signing proves who sent a request, not that nobody read it: it does not encrypt the payload,
// and the participant's answer is not signed. Where the network between coordinators and
// participants is not trusted, use TLS as well, or mutual TLS instead of signing: serve the
// handler from an http.Server whose tls.Config has ClientAuth: tls.RequireAndVerifyClientCert and
// ClientCAs holding the coordinators' CA, build the barrier with [WithUnsignedRequests], and give
// the coordinators an http.Client whose transport presents their certificate:
//
//	tlsClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
//		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{coordCert}, RootCAs: participantCAs}},
//		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
//	c, _ := tcc.New(pool, coordinator.WithHTTPClient(tlsClient), ...) // and participant.HTTP{URL: "https://...", Client: tlsClient}
//
// (or both: NewSigningClient(secret, tlsClient) signs over mutual TLS). In-process participants
// ([Barrier.Participant]) are not called over the network and are not signed.
package participant
