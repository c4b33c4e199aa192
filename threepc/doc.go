// Package threepc is txkit's three-phase-commit coordinator, on the same coordinator core as
// tcc, saga and twopc (one log in PostgreSQL, recovery by the elected leader, fenced writes, the
// options of package coordinator). [Global.Commit] runs CanCommit (every branch votes; nothing is
// executed, locked or written), PreCommit (the transaction is recorded, then every branch does its
// work undecided: a database up to PREPARE TRANSACTION, a participant behind a
// agent.Agent) and DoCommit (the decision to commit is recorded, then every branch commits).
//
// A branch that pre-committed and hears nothing within the participant timeout is ended by its
// agent (agent.PG beside a database, agent.Agent in a participant; package threepc/agent): by default after
// asking the coordinator's log ([Coordinator.Decide]), which removes the protocol's partition
// anomaly, or by the textbook rule (commit). Give the coordinators and the agents the same
// participant timeout ([WithTimeouts], agent.WithTimeout).
//
//	c, _ := threepc.New(logPool, coordinator.WithSchema("bank"), coordinator.WithElector(el),
//		threepc.WithTimeouts(5*time.Second, 10*time.Second, 20*time.Second))
//	defer c.Close()
//	_ = c.Migrate(ctx)
//	_ = c.RegisterDB("east", eastPool) // every coordinator registers the same names
//	_ = c.RegisterDB("west", westPool)
//	go c.Run(ctx) // recovery, on the leader only
//
//	eastAgent, _ := agent.NewPG(c, "east", eastPool, agent.WithTimeout(20*time.Second, 0))
//	go eastAgent.Run(ctx) // beside the database: in its owner's service, or a process of its own
//
//	g, _ := c.Begin(ctx)
//	_ = g.Enlist("east", threepc.DBWork{CanCommit: hasAtLeast("alice", 10), PreCommit: debit("alice", 10)})
//	// ... the same on "west" ...
//	return g.Commit(ctx) // CanCommit both, record, PreCommit both, decide, DoCommit both
//
// The termination modes and their fallback, the timeouts' bounds, 3PC against 2PC, metrics and
// tracing: docs/coordinators.md, docs/benchmarks.md, docs/metrics.md, docs/tracing.md.
package threepc
