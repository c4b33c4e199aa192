// Package agent is the participant side of three-phase commit's timeout: a branch that has
// pre-committed and hears neither DoCommit nor abort within its timeout is ended by its agent,
// without waiting for a dead coordinator. There are two kinds, with one set of options:
//
//   - [Agent], for an HTTP or in-process participant: it serves the branch's four 3PC ops through
//     a participant/barrier.Barrier and records each pre-committed branch in its table
//     (txkit_3pc_agent) in the PreCommit's own transaction;
//   - [PG], beside a PostgreSQL database whose branches are prepared transactions: it ends the
//     coordinator's prepared transactions older than its timeout.
//
// A timed-out branch ends by the agent's [Termination] mode: [TerminationTextbook] commits, as
// the protocol's documents say — and so commits a branch whose coordinator aborted when a
// partition cut it off; [TerminationConsultLog] (the default) asks the coordinator's decision log
// through a [Decider] (a *threepc.Coordinator) and follows it, and while the log cannot be
// reached it commits nothing: the branch waits, asked about again at every pass, and the gauges
// txkit_3pc_agent_log_wait_seconds and txkit_3pc_pgagent_log_wait_seconds say for how long.
// [WithTermination]'s fallback lets it commit by the textbook rule after an outage of at least
// [MinLogFallback]. docs/coordinators.md has the protocol and its trade-offs.
//
//	bar, _ := barrier.New(pool, barrier.WithSecrets(secret))
//	a, _ := agent.New(bar, coord, pay, agent.WithTimeout(20*time.Second, 0)) // the coordinator's participant timeout
//	_ = a.Migrate(ctx)
//	go a.Run(ctx) // ends timed-out branches; every replica may run it
//	mux.Handle("POST /pay/3pc", a.Handler())
//
//	pg, _ := agent.NewPG(coord, "east", eastPool, agent.WithTimeout(20*time.Second, 0))
//	go pg.Run(ctx)
package agent
