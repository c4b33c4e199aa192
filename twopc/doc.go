// Package twopc is txkit's two-phase-commit coordinator. Phase one asks every branch to prepare
// (vote); if all vote yes the coordinator writes the decision to commit, then phase two commits
// everywhere; otherwise it writes the decision to abort and rolls everything back.
//
// PostgreSQL databases take part with their own two-phase commit: a branch's work runs in a
// transaction of its database that phase one ends with PREPARE TRANSACTION, and phase two with
// COMMIT PREPARED or ROLLBACK PREPARED. Other resources take part as [participant.Participant]s.
// Nothing is written before [Global.Commit]. By default ([WithVoteMarkers]) the votes are the
// decision: the transaction is recorded while its branches prepare, each branch's vote row
// committing with it, and phase two begins once every branch voted yes; with vote markers off the
// decision is written to the coordinator's PostgreSQL log between the phases (presumed abort).
// The elected leader finishes what a dead starter began and ends every prepared transaction the
// log knows or does not ([Coordinator.ResolveInDoubt]), so none outlives a failover.
//
// A transfer between two databases:
//
//	c, _ := twopc.New(logPool, coordinator.WithSchema("bank"), coordinator.WithElector(el))
//	defer c.Close()
//	_ = c.Migrate(ctx)
//	_ = c.RegisterDB("east", eastPool) // every coordinator registers the same names
//	_ = c.RegisterDB("west", westPool)
//	go c.Run(ctx) // recovery, on the leader only
//
//	g, _ := c.Begin(ctx)
//	if err := g.Enlist(ctx, "east", func(ctx context.Context, tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, `update accounts set balance = balance - 10 where id = 'alice'`)
//		return err
//	}); err != nil {
//		_ = g.Abort(ctx)
//		return err
//	}
//	// ... the same on "west" ...
//	return g.Commit(ctx) // PREPARE both (their votes), COMMIT PREPARED both
//
// The writes per transaction, why phase two never waits for a connection, the names of prepared
// transactions, vote markers, metrics and tracing: docs/coordinators.md, docs/metrics.md,
// docs/tracing.md.
package twopc
