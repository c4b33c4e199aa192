// Package threepc is txkit's three-phase-commit coordinator, on the same coordinator core as
// tcc, saga and twopc (one log in PostgreSQL, recovery by the elected leader, fenced writes, the
// options of package coordinator).
//
// The three phases of [Global.Commit]:
//
//  1. CanCommit: every branch is asked whether it can commit. Nothing is executed, locked or
//     written: a database branch runs its check ([DBWork].CanCommit) in a read-only transaction
//     that is rolled back; a participant gets [participant.OpCanCommit]. A "no" ends the
//     transaction with nothing to undo anywhere.
//  2. PreCommit: the transaction is recorded in the log with its branches, then every branch
//     executes its work and keeps it undecided: a database runs [DBWork].PreCommit and PREPARE
//     TRANSACTION; a participant gets [participant.OpPreCommit] and, behind a
//     agent.Agent, does its work reversibly and remembers the branch in the same
//     transaction. Any failure or timeout: the decision to abort, and everything is rolled back.
//  3. DoCommit: every branch acknowledged, so the decision to commit is recorded, then COMMIT
//     PREPARED / [participant.OpDoCommit] everywhere.
//
// # The participants' timeout, and the termination rule
//
// What three-phase commit adds to two-phase commit is that participants do not wait for a failed
// coordinator: a branch that has pre-committed and hears neither DoCommit nor abort within its
// timeout acts alone. The agents of package threepc/agent do this — agent.PG beside a database
// (it ends the coordinator's prepared transactions older than its timeout) and agent.Agent inside
// an HTTP or in-process participant — in one of two termination modes (agent.Termination):
//
//   - textbook: commit, as the protocol's documents prescribe for a pre-committed participant.
//     This is where three-phase commit's known anomaly lives: when a network partition cuts a
//     participant off after it pre-committed, the coordinator, missing its acknowledgement,
//     aborts, and the cut-off participant commits on its own — the transaction ends committed on
//     one side and aborted on the other. (The textbook protocol is safe only when no message is
//     lost and no node is partitioned; neither holds in a real network.) The leader's recovery
//     and the agents also decide apart: the leader aborts an undecided transaction at its global
//     timeout even after textbook agents committed its branches.
//   - consult-log (the default): before acting, the agent asks the coordinator's decision log
//     ([Coordinator.Decide], a agent.Decider). A decision there is followed; a transaction
//     the log does not hold is aborted (presumed abort: Commit records a transaction before any
//     PreCommit); an undecided one is aborted by recording the abort in the log with the same
//     conditional write the coordinator's decision to commit makes, so exactly one of the two
//     wins and everyone follows it. While the log cannot be reached the agent commits nothing:
//     the branch waits, pre-committed, asked about at every pass, and the wait is a gauge to page
//     on (txkit_3pc_pgagent_log_wait_seconds, txkit_3pc_agent_log_wait_seconds); once the log
//     answers, the agent follows it. So the anomaly cannot happen, and no participant waits for
//     a dead coordinator longer than its timeout while the log is up. agent.WithLogFallback brings
//     back the textbook commit after an outage of the log of
//     at least agent.MinLogFallback (5 minutes), for those who prefer the anomaly's risk
//     to a branch held through a long outage; each such commit is counted (Stats().Fallbacks,
//     txkit_3pc_pgagent_fallbacks_total, txkit_3pc_agent_fallbacks_total).
//
// Give the coordinators and the agents the same participant timeout ([WithParticipantTimeout],
// agent.WithTimeout). It must be above the CanCommit and
// PreCommit timeouts together — an agent acting sooner would decide while the coordinator may
// still be waiting for acknowledgements — and below the global timeout; New refuses anything else.
//
// # Against two-phase commit
//
// Blocking: when a twopc coordinator dies between the phases, its prepared transactions (and
// their row locks) wait for the leader — the election's session timeout, then the in-doubt scan
// past its grace. Here they wait for the participant timeout, and for no coordinator at all.
// The price: a round of CanCommit votes and one more log write per transaction (the record
// before PreCommit, the decision, the outcome: three; twopc writes two for a transaction of
// databases only), and, in textbook mode, the anomaly above. The README's "2PC or 3PC" table
// has the figures of `make drill-3pc` and BenchmarkProtocols.
//
// The database branches' PreCommit work runs one after the other in the order they were enlisted
// (their PREPAREs then run at once), so that transactions touching rows in several databases lock
// them in one order and cannot deadlock across databases; CanCommit votes, which lock nothing,
// run at once. Each database branch keeps its connection from PreCommit until Commit returns, and
// its COMMIT or ROLLBACK PREPARED runs on it (see package twopc on why phase two must not wait
// for the pool). Gids, database and branch names and the namespace name prepared transactions,
// as in twopc, and are checked the same way.
//
// A transfer between two databases, with its agents:
//
//	c, _ := threepc.New(logPool, coordinator.WithSchema("bank"), coordinator.WithElector(el),
//		threepc.WithParticipantTimeout(20*time.Second))
//	defer c.Close()
//	_ = c.Migrate(ctx)
//	_ = c.RegisterDB("east", eastPool) // every coordinator registers the same names
//	_ = c.RegisterDB("west", westPool)
//	go c.Run(ctx) // recovery, on the leader only
//
//	eastAgent, _ := agent.NewPG(c, "east", eastPool, agent.WithTimeout(20*time.Second))
//	go eastAgent.Run(ctx) // beside the database: in its owner's service, or a process of its own
//
//	g, _ := c.Begin(ctx)
//	_ = g.Enlist("east", threepc.DBWork{
//		CanCommit: func(ctx context.Context, tx pgx.Tx) error { /* alice holds at least 10? */ return nil },
//		PreCommit: func(ctx context.Context, tx pgx.Tx) error {
//			_, err := tx.Exec(ctx, `update accounts set balance = balance - 10 where id = 'alice'`)
//			return err
//		}})
//	// ... the same on "west" ...
//	return g.Commit(ctx) // CanCommit both, record, PreCommit both, decide, DoCommit both
//
// # Tracing
//
// Given [coordinator.WithTracerProvider] (default: the application's global OpenTelemetry
// provider), [Global.Commit] records the transaction (before PreCommit) under a span "3pc begin"
// (attribute txkit.gid), the child of its ctx, whose trace context is stored with it; a
// transaction refused at CanCommit is never recorded, so has none. Each participant call is a
// client span, a child of Commit's ctx: "3pc cancommit", "3pc precommit", "3pc docommit" or "3pc
// abort"; a database branch gets "3pc docommit" or "3pc abort" (its vote and its PREPARE
// TRANSACTION are not calls). Attributes txkit.gid, txkit.branch, txkit.op; a refusal or failure
// is recorded, status Error. A participant continues the trace in its barrier's span "participant
// <op>" (server for barrier.Barrier.Handler, internal for barrier.Barrier.Participant).
// The leader's phase two runs under "recovery drive", the child of the stored context.
package threepc
