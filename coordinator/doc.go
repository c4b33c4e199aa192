// Package coordinator holds what every txkit coordinator — [github.com/txkit/txkit/tcc],
// [github.com/txkit/txkit/saga], [github.com/txkit/txkit/twopc] and
// [github.com/txkit/txkit/threepc] — shares in its API: the options of their New ([Option]) and
// Begin ([BeginOption]), the sentinel errors, a participant branch ([Branch]), [BranchError] and
// [Stats]. Each coordinator package holds only what is specific to its protocol (its
// Coordinator, its statuses, its own options such as saga.WithAttempts or
// twopc.WithPrepareTimeout, its own sentinels such as twopc.ErrAborted).
//
//	c, err := tcc.New(pool, coordinator.WithSchema("shop"), coordinator.WithElector(el))
//	s, err := saga.New(pool, coordinator.WithSchema("shop"), coordinator.WithElector(el), saga.WithAttempts(5))
//	...
//	if errors.Is(err, coordinator.ErrIncomplete) { ... } // the same value whichever coordinator returned it
//
// Why a package of its own: the coordinators are built on one base (internal/core), and one
// public place lets a user match an error (coordinator.ErrTimeout) and write an option the same
// way whatever the coordinator, and let a new coordinator (threepc, the fourth) take them without
// writing them again. Re-exporting them from each coordinator package would repeat every
// option, sentinel and doc comment once per protocol. The types here are the core's, through
// aliases; the option functions and docs are written here once.
//
// The price of one option type for four constructors: a protocol's own option given to another
// protocol's New (saga.WithAttempts to tcc.New) compiles, and New refuses it with an error
// wrapping [ErrInvalidOption] that names it.
//
// The coordinators share their shapes too. Every Begin is Begin(ctx, opts ...[BeginOption]): ctx
// scopes only the call, and a ctx already done returns an error wrapping its error. Only tcc's
// may write (given [WithGID], it records the transaction at once, so that a gid already used is
// refused there); the others write nothing until Commit or Submit. Every Stats returns [Stats],
// and every Coordinator embeds [Base].
//
// # Partitioned recovery
//
// With [WithPartitions] the recovery is split into P partitions by a hash of the gid, each with its
// own election and fencing token, so that N instances share it (each leads about P/N partitions;
// when one dies its partitions move to the others within the ZooKeeper session timeout and a
// second). A transaction belongs to one partition, so it is driven by one leader at a time and
// once per decision, as with one leader. [ContenderCount] (ZooKeeper) or [HeartbeatCount] (other
// lock backends) counts the instances:
//
//	paths := make([]string, 12)
//	for p := range paths {
//		paths[p] = fmt.Sprintf("/txkit/tcc/recovery/p%d", p)
//	}
//	c, err := tcc.New(pool, coordinator.WithSchema("shop"), coordinator.WithPartitions(12,
//		func(p int) (lock.Elector, error) { return lock.NewElector(sess, paths[p], instanceID) },
//		coordinator.ContenderCount(sess.Inspector(), paths...)))
//
// The number is stored with the log at the first Run; another number is refused (see
// [WithPartitions] for why, and how to change it).
//
// # Metrics
//
// Given [WithRegisterer], a coordinator registers Prometheus metrics labelled by protocol (tcc,
// saga, 2pc, 3pc): transactions begun and finished by outcome, branch calls by op and result and
// their durations, and, on the recovering leader, the due backlog, the oldest unfinished
// transaction's age, the recovery attempts and the timeouts. Labels never carry a gid or branch
// name. docs/coordinators.md tabulates them.
//
// # Tracing
//
// Given [WithTracerProvider] (default: the application's global OpenTelemetry provider), a
// coordinator records a span "<protocol> begin" where it records a transaction, a client span
// "<protocol> <op>" around each branch call (attributes txkit.gid, txkit.branch, txkit.op; errors
// recorded), and, on the leader, a span "recovery pass" per pass and "recovery drive" per
// transaction driven. The trace context of the ctx that records the transaction (its "begin"
// span: Begin's, or a tcc transaction's first Try when Begin made the gid and so wrote nothing)
// is stored with the transaction (column trace_context). A drive starts as a CHILD of that stored context, with a link
// to the pass's span: the work the leader does for a transaction, possibly long after its starter
// died, lands in the trace of the request that began it — where someone debugging that request
// looks — while the link still leads from the drive to the pass (and from the pass to its other
// drives). A drive of a transaction stored without a trace context is a child of the pass.
package coordinator
