// Package twopc is txkit's two-phase-commit coordinator. Phase one asks every participant to
// prepare (vote); if all vote yes the coordinator writes the decision to commit, then phase two
// commits everywhere; otherwise it writes the decision to abort and rolls everything back.
//
// PostgreSQL databases take part with their own two-phase commit: the branch's work runs in a
// transaction of the participant database that phase one ends with PREPARE TRANSACTION, and
// phase two ends with COMMIT PREPARED or ROLLBACK PREPARED. Other resources take part through
// [participant.Participant] — HTTP endpoints (JSON, [participant.OpPrepare], OpCommit, OpAbort;
// 2xx yes, 409 no) or in-process implementations — and can use barrier.Barrier so that a
// late prepare after an abort is refused. A barrier's handler serves only signed calls unless it
// opts out: give the branches' participant.HTTP and [coordinator.WithHTTPClient] the client of
// [participant.NewSigningClient].
//
// The classic weaknesses of two-phase commit are the coordinator as a single point of failure
// and participants left blocked, in doubt, when it dies between the phases. Here:
//
//   - The log (in PostgreSQL, shared with tcc and saga through the coordinator core) holds the
//     decision, with the branches, before phase two begins; a transaction with a participant
//     branch is also recorded before phase one (see [Global.Commit]). Any number of coordinator
//     processes share it; the one elected leader (lock.Elector on ZooKeeper) finishes what a dead
//     starter began, and its writes are fenced.
//   - Presumed abort: nothing is written before [Global.Commit], so a transaction abandoned
//     before it leaves only open database transactions, which PostgreSQL rolls back with their
//     connections. A prepared transaction whose gid is not in the log is rolled back (after the
//     gid is recorded as aborting, so the starter cannot decide to commit it any more); a
//     transaction recorded but never decided is aborted by the leader at its timeout.
//   - In-doubt recovery: the leader scans pg_prepared_xacts of every registered database
//     ([Coordinator.ResolveInDoubt]) and ends each of this coordinator's prepared transactions as
//     the log says, so none of them — and none of the row locks they hold — outlives a failover,
//     a PostgreSQL restart included (prepared transactions survive one).
//
// Phase two never waits behind phase-one work. Under load — many transfers touching one hot row,
// a database pool smaller than the transfers — every connection of a database's pool can be held
// by work waiting for the row lock of a transaction that is already prepared; if that
// transaction then needed a connection of the same pool for its COMMIT PREPARED, neither side
// would ever move (and the resolver, needing one too, could not end it either). So:
//
//   - The starter keeps each database branch's connection from [Global.Enlist] until
//     [Global.Commit] returns, and runs the branch's PREPARE TRANSACTION and then its COMMIT (or
//     ROLLBACK) PREPARED on it. A transaction thus holds exactly the connections it held while
//     working; it never asks the pool for one while it holds locks others wait for. It costs no
//     connection more than before, and saves an acquire per branch.
//   - The recovery and the in-doubt resolver, which have no such connection (the starter is
//     gone), use a small pool of the coordinator's own per registered database
//     ([WithPhaseTwoConns], default 2), built from the registered pool's configuration and closed
//     by [Coordinator.Close]. Nothing else uses it, and its statements take no row locks, so it is
//     free whenever a prepared transaction must end.
//
// The log's own writes (the decision, the outcome) need a connection of the log's pool while the
// branches' connections are held: give the log a pool of its own (see [New]).
//
// Gids, database and branch names and the namespace (schema and table prefix) become the names of
// prepared transactions, which PostgreSQL takes only as string literals, not parameters. They are
// refused at the API boundary when they hold a backslash or a control character or pass 199
// bytes (errors wrapping [coordinator.ErrInvalidOption] or [coordinator.ErrInvalidBranch]), and the literals are written
// as E'...' with backslash and quote doubled, which reads the same whatever
// standard_conforming_strings is.
//
// PostgreSQL writes per committed transaction in the coordinator's database, when every branch
// is a database: two — the decision with its branches (one insert, nothing is written before it:
// presumed abort), and the outcome, written while the COMMIT PREPAREDs run. With a participant
// branch: three — the record with its branches before phase one (a participant cannot be found
// any other way), the decision, the outcome. [coordinator.WithDeferredFinish] writes the outcome in
// the background: Commit returns once the COMMIT PREPAREDs are done.
//
// # Vote markers
//
// A transaction of databases makes three durable steps one after the other: the PREPAREs (at
// once), the decision, the COMMIT PREPAREDs (at once). Two-phase commit by hand, with no
// coordinator and no recovery, makes two. [WithVoteMarkers] makes Commit take two as well, by
// letting the votes be the decision:
//
//   - Commit records the transaction as voting ([StatusVoting]), with its branches, at the same
//     time as the branches prepare. Each branch's transaction inserts its vote row — its prepared
//     transaction's id, yes — into the coordinator's vote table in its own database, then runs
//     PREPARE TRANSACTION, in one round trip. The row commits with the branch, so it is visible
//     exactly when the branch has committed.
//   - When the record and every PREPARE went through, every branch voted yes: Commit commits them
//     all at once and records the outcome (voting → committed) beside, as usual.
//   - Otherwise Commit withdraws: it records the abort (voting → aborting, a conditional update),
//     then rolls every branch back. Only then does it return [ErrAborted]. If the withdrawal
//     cannot be written, Commit leaves the branches prepared and returns [ErrInDoubt].
//   - A transaction still voting when the starter's lease has passed is settled by the leader
//     from the branches' databases: a branch that is prepared (pg_prepared_xacts) or has committed
//     (its vote row is there, yes) voted yes. For any other branch the leader inserts the vote row
//     itself, as a no (a tombstone): that branch's own insert now fails on the key, so it can
//     never prepare, even if its starter was only slow. A branch between its vote and its PREPARE
//     holds its row; the leader tries again later. The leader records committing when every
//     branch voted yes and aborting at the first no — fenced, and exclusive with the starter's
//     withdrawal on the status — and carries it out.
//
// The starter and the leader cannot disagree. The starter commits only when every branch
// prepared, and a prepared branch stays prepared until one of the two ends it; the leader aborts
// only on a branch that rolled back or never prepared, which the starter sees as a failed vote.
// A vote the starter saw failing although its PREPARE went through (the answer was lost) makes
// the starter's withdrawal race the leader's settlement on the log's status: whichever is
// recorded first is carried out by both.
//
// The price: one vote row per branch, inserted in the branch's own transaction (no commit of
// its own), and deleted in batches by the in-doubt pass ([Coordinator.ResolveInDoubt]) once its
// transaction is finished and the row is older than the in-doubt grace. The log's writes are the
// same two. It shortens a lone transaction (one flush less on its path) and costs processor time
// when the machine is saturated; docs/coordinators.md ("Vote markers") has the figures.
//
// Tracing: given [coordinator.WithTracerProvider] (default: the application's global
// OpenTelemetry provider), [Global.Commit] records the transaction under a span "2pc begin"
// (attribute txkit.gid), the child of its ctx, whose trace context is stored with it — before
// phase one when a participant takes part, with the decision to commit when only databases do (a
// transaction of databases that aborts before deciding is never recorded, so has none). Each
// call is a client span, a child of Commit's ctx: "2pc prepare" for a participant branch (a
// database's PREPARE TRANSACTION is not a call), "2pc commit" or "2pc abort" for every branch,
// database or participant (txkit.gid, txkit.branch, txkit.op; a refusal or failure recorded,
// status Error). A participant continues it: barrier.Barrier.Handler in a server span
// "participant <op>", barrier.Barrier.Participant in an internal one. The leader's phase
// two runs under "recovery drive", the child of the stored context (see package coordinator).
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
//	return g.Commit(ctx) // PREPARE both, decide, COMMIT PREPARED both
package twopc
